"""The ms-swift faces, against ms-swift 4.6's real classes (run in .venv-swift: swift pins trl<1.0): its own
schedulers (server ``run()`` and the colocate trainer's ``run_multi_turn``), its CPU ``TransformersEngine`` with the
tiny Qwen3, its ``GYMScheduler`` and its ``OpenEnvScheduler`` client path against ``aworld-gym serve-env``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest

swift_rollout = pytest.importorskip("swift.rollout")

from swift.infer_engine import RequestConfig, TransformersEngine  # noqa: E402
from swift.infer_engine.protocol import (  # noqa: E402
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatMessage,
    RolloutInferRequest,
    RolloutOutput,
    UsageInfo,
)
from swift.rollout import envs, invoke_async_hook, multi_turns, run_multi_turn  # noqa: E402
from swift.utils import import_external_file  # noqa: E402

from aworld_gym.mcp.transports.shared import free_port  # noqa: E402
from aworld_gym.rollout.tokens import ChatTokens  # noqa: E402
from tests.helpers import ANSWER, CALL, CRASH, ROOT, demo_env_kwargs, scripted_tokens, stdio_config, wait_until  # noqa: E402

PLUGIN = ROOT / "aworld_gym/trainers/plugins/aworld_swift.py"


@pytest.fixture(scope="module")
def engine(tiny):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import_external_file(str(PLUGIN))  # what --external_plugins does
    return TransformersEngine(str(tiny), model_type="qwen3", template_type="qwen3", max_batch_size=0)


def scripted(engine, req, max_tokens: int | None = None) -> ChatCompletionResponse:
    """The reply a model would give: the row's script, turn by turn (the ids encoded then closed with eos), cut at
    ``max_tokens`` with finish reason ``length`` as swift's engines do."""
    chat = ChatTokens(engine.tokenizer)
    turn = sum(bool(m["role"] == "assistant" and m.get("content")) for m in req.messages)
    script = req.data_dict["script"]
    text = script[min(turn, len(script) - 1)]
    full = [*chat.encode(text), chat.eos_id]
    ids = full[:max_tokens] if max_tokens else full
    finish, text = ("length", chat.decode(ids)) if len(ids) < len(full) else ("stop", text)
    logprobs = {"content": [{"token": str(i), "logprob": -0.25, "bytes": None} for i in ids]}
    choice = ChatCompletionResponseChoice(0, ChatMessage("assistant", text), finish, logprobs, token_ids=ids)
    return ChatCompletionResponse("scripted", [choice], UsageInfo(0, len(ids), len(ids)))


class Scripted:
    """swift's inference-engine contract (``InferEngine.infer_async``, checked below; ``template``, ``tokenizer``)
    with scripted replies cut at ``request_config.max_tokens``."""

    def __init__(self, real: TransformersEngine) -> None:
        self.real, self.template, self.tokenizer = real, real.template, real.tokenizer

    async def infer_async(self, infer_request, request_config=None, **kwargs):
        await asyncio.sleep(0)
        return scripted(self, infer_request, request_config.max_tokens if request_config is not None else None)


def request(uuid: str, script: list[str], env_config: dict, **extra) -> RolloutInferRequest:
    return RolloutInferRequest(messages=[{"role": "user", "content": "ignored"}], uuid=uuid,
                               data_dict={"env_config": env_config, "script": script, **extra})  # fmt: skip


def config(**kw) -> RequestConfig:
    return RequestConfig(max_tokens=kw.pop("max_tokens", 64), temperature=1.0, return_details=True, logprobs=True,
                         seed=0, **kw)  # fmt: skip


def model_ids(out: RolloutOutput) -> list[int]:
    return [i for ids, mask in zip(out.response_token_ids, out.response_loss_mask, strict=True)
            for i, m in zip(ids, mask, strict=True) if m]  # fmt: skip


MCP = {"env_id": "AWorld/MCP-v0", "task_id": "add-2"}


def test_the_plugin_registers_every_face(engine):
    from aworld_gym.trainers import swift as face

    assert (
        multi_turns["aworld"] is face.AWorldScheduler and multi_turns["aworld_openenv"] is face.AWorldOpenEnvScheduler
    )
    assert envs["aworld"] is face.AWorldEnv and multi_turns["aworld_gym"] is face.AWorldGymScheduler
    from swift.rewards import orms

    assert orms["aworld"] is face.AWorldReward
    assert issubclass(face.AWorldScheduler, swift_rollout.MultiTurnScheduler)


def test_swift_runs_a_real_episode_with_the_tiny_qwen3_on_its_transformers_engine(engine):
    sched = multi_turns["aworld"](infer_engine=engine, max_turns=3)
    req = request("real", [], {**MCP, "env_kwargs": demo_env_kwargs(4)})
    # The random tiny model rarely emits eos: a stop string ends each reply (finish "stop", so the env is stepped).
    out = asyncio.run(sched.run(req, config(max_tokens=32, stop=[" ", "e"])))
    traj = sched.finished[-1]
    assert out.rollout_infos["num_turns"] == 3 == len(out.response_token_ids)
    assert traj.num_turns == 3 and traj.termination == "turn_limit" and traj.status == "failed"
    # The env opened the conversation: its system prompt with the tools, its task.
    assert out.messages[0]["role"] == "system" and '"name": "add"' in out.messages[0]["content"]
    assert out.messages[1] == {"role": "user", "content": "What is 2 + 1? Use the add tool."}
    tok = engine.tokenizer
    for k, (ids, mask) in enumerate(zip(out.response_token_ids, out.response_loss_mask, strict=True)):
        sampled = [i for i, m in zip(ids, mask, strict=True) if m]
        assert sampled and mask == [0] * (len(ids) - len(sampled)) + [1] * len(sampled)  # the template's prefix: 0
        # exactly what the env was given as the model's turn (the prefix is the template's empty think block)
        assert tok.decode(ids, skip_special_tokens=False) == traj.turns[k]["action"]
        assert len(out.rollout_logprobs[k]) == len(sampled)
    # Each earlier turn's ids went back into the next prompt verbatim (no re-tokenisation).
    prompt = out.response.prompt_token_ids
    for ids in out.response_token_ids[:-1]:
        assert any(prompt[i : i + len(ids)] == ids for i in range(len(prompt)))
    # The env's answers (format feedback here) came in as user turns; the reward is the env's own.
    feedback = [m["content"] for m in out.messages[3::2]]
    assert len(feedback) == 2 and all(t["observation"] in feedback for t in traj.turns[:2])
    assert out.rollout_infos["total_reward"] == traj.reward == sum(t["reward"] for t in traj.turns)
    assert traj.ledger.components.get("format", 0.0) < 0


def test_the_scheduler_is_token_exact_and_matches_the_driver_on_both_of_swifts_loops(engine):
    tok = engine.tokenizer
    kwargs = demo_env_kwargs(4)
    ref = scripted_tokens(ChatTokens(tok), [CALL, ANSWER], "add-2", kwargs)
    ref_model = [i for i, m in zip(ref.tokens.completion_ids, ref.tokens.mask, strict=True) if m]
    # Server mode: the scheduler's run().
    sched = multi_turns["aworld"](infer_engine=Scripted(engine), max_turns=4)
    out = asyncio.run(sched.run(request("s1", [CALL, ANSWER], {**MCP, "env_kwargs": kwargs}), config()))
    assert model_ids(out) == ref_model
    assert out.rollout_infos["total_reward"] == ref.reward == 1.0 and out.rollout_infos["status"] == "ok"
    assert [len(x) for x in out.rollout_logprobs] == [sum(m) for m in out.response_loss_mask]
    assert sched.finished[-1].turns[0]["tool_calls"][0]["name"] == "add"
    # Colocate mode (the trainer's loop): swift's run_multi_turn with the scheduler's hooks.
    colo = multi_turns["aworld"](max_turns=4, tokenizer=tok, template=engine.template)
    reqs = [request(f"c{i}", [CALL, ANSWER], {**MCP, "env_kwargs": kwargs}) for i in range(2)]
    invoke_async_hook(colo.on_trajectory_start(reqs))

    def rollout_fn(batch, cfg):
        return [RolloutOutput(response=scripted(engine, r)) for r in batch]

    outs = run_multi_turn(reqs, rollout_fn(reqs, config()), colo, rollout_fn, config(), max_turns=4)
    for o in outs:
        assert model_ids(o) == ref_model and o.rollout_infos["total_reward"] == 1.0
    assert not colo.episodes and not colo._masks()  # nothing kept of finished requests


def test_the_stand_in_keeps_swifts_engine_contract():
    """Fails when ms-swift changes ``InferEngine.infer_async`` (what its schedulers call) or the response choice's
    fields and finish reasons the face reads (swift reports ``stop`` and ``length`` only: there is no abort to map)."""
    import dataclasses
    import typing

    from swift.infer_engine import InferEngine

    from tests.trainers.contract import params

    assert params(Scripted.infer_async) == params(InferEngine.infer_async)
    fields = {f.name: f.type for f in dataclasses.fields(ChatCompletionResponseChoice)}
    assert {"message", "finish_reason", "logprobs", "token_ids"} <= set(fields)
    assert set(typing.get_args(fields["finish_reason"])) == {"stop", "length", None}


def test_a_reply_cut_at_max_tokens_ends_with_length_unstepped(engine):
    sched = multi_turns["aworld"](infer_engine=Scripted(engine), max_turns=4)
    script = ["thinking " * 40]
    out = asyncio.run(
        sched.run(request("cut", script, {**MCP, "env_kwargs": demo_env_kwargs(4)}), config(max_tokens=8))
    )
    traj = sched.finished[-1]
    assert traj.termination == "length" and traj.status == "failed" and traj.turns == []
    assert out.rollout_infos["status"] == "failed" and len(model_ids(out)) == 8


def test_void_episodes_are_masked_and_get_their_groups_live_mean(engine):
    """A group of 4 with stdio servers: two servers are killed mid-episode (the demo's crash tool)."""
    from aworld_gym.trainers.swift import AWorldReward

    kwargs = {**demo_env_kwargs(4), "mcp_config": stdio_config()}
    scripts = [[CALL, ANSWER], [CALL, CRASH, ANSWER], [CALL, "<answer>7</answer>"], [CALL, CRASH, ANSWER]]
    # Server mode: the void rows' earlier turns (masks already handed to swift) are zeroed in place.
    sched = multi_turns["aworld"](infer_engine=Scripted(engine), max_turns=5)

    async def group():
        reqs = [request(f"v{i}", s, {**MCP, "env_kwargs": kwargs}) for i, s in enumerate(scripts)]
        return await asyncio.gather(*(sched.run(r, config()) for r in reqs))

    outs = asyncio.run(group())
    infos = [o.rollout_infos for o in outs]
    assert [i["status"] for i in infos] == ["ok", "void", "failed", "void"]
    assert [i["termination"] for i in infos] == ["answer", "env_crash", "answer", "env_crash"]
    for o, info in zip(outs, infos, strict=True):
        flat = [m for mask in o.response_loss_mask for m in mask]
        assert (sum(flat) == 0) == (info["status"] == "void")
        assert len(o.response_loss_mask) == info["aworld_turns"]
    env_config = [{**MCP, "env_kwargs": kwargs}] * 4  # the dataset's column, as swift hands it to reward functions
    rewards = AWorldReward()([None] * 4, rollout_infos=infos, prompt_id=["p"] * 4, env_config=env_config)
    assert rewards == [1.0, 0.5, 0.0, 0.5]  # the void rows: the live rows' mean, so their advantage is 0
    # Colocate mode: the same masking.
    colo = multi_turns["aworld"](max_turns=5, tokenizer=engine.tokenizer, template=engine.template)
    reqs = [request(f"w{i}", s, {**MCP, "env_kwargs": kwargs}) for i, s in enumerate(scripts)]
    invoke_async_hook(colo.on_trajectory_start(reqs))

    def rollout_fn(batch, cfg):
        return [RolloutOutput(response=scripted(engine, r)) for r in batch]

    outs = run_multi_turn(reqs, rollout_fn(reqs, config()), colo, rollout_fn, config(), max_turns=5)
    assert [sum(m for mask in o.response_loss_mask for m in mask) == 0 for o in outs] == [False, True, False, True]
    assert [o.rollout_infos["weight"] for o in outs] == [1.0, 0.0, 1.0, 0.0]


def test_the_gym_env_under_swifts_gym_scheduler(engine):
    gym = multi_turns["gym_scheduler"](infer_engine=Scripted(engine), max_turns=4, gym_env="aworld")
    env_config = {**MCP, "env_kwargs": demo_env_kwargs(4)}
    out = asyncio.run(gym.run(request("g1", [CALL, ANSWER], env_config), config()))
    assert out.rollout_infos["total_reward"] == 1.0 and out.rollout_infos["step_rewards"] == [0.0, 1.0]
    assert out.messages[0]["role"] == "system" and out.messages[1]["content"] == "What is 2 + 1? Use the add tool."
    assert "3.0" in out.messages[3]["content"]  # the tool's answer, as the next user turn
    wrong = asyncio.run(gym.run(request("g2", [CALL, "<answer>5</answer>"], env_config), config()))
    assert wrong.rollout_infos["total_reward"] == 0.0


def run_group(engine, name: str, prefix: str, scripts: list[list[str]], env_config: dict, max_turns: int):
    """One group of requests (one per script) through scheduler ``name``'s server ``run()``, concurrently."""
    sched = multi_turns[name](infer_engine=Scripted(engine), max_turns=max_turns, gym_env="aworld")

    async def all_of():
        reqs = [request(f"{prefix}{i}", s, env_config) for i, s in enumerate(scripts)]
        return await asyncio.gather(*(sched.run(r, config()) for r in reqs))

    return asyncio.run(all_of())


def test_a_void_gym_env_episode_is_masked_under_the_aworld_gym_scheduler(engine):
    """The gym env with a server killed mid-episode: under ``aworld_gym`` (swift's GYMScheduler plus the episode's
    ending) the void row's every loss mask is 0, its infos say void with weight 0, and AWorldReward gives it the live
    mean. Under swift's own ``gym_scheduler`` the same episode trains as reward 0 with its masks on."""
    from aworld_gym.trainers.swift import AWorldReward

    env_config = {**MCP, "env_kwargs": {**demo_env_kwargs(4), "mcp_config": stdio_config()}}
    scripts = [[CALL, ANSWER], [CALL, CRASH, ANSWER]]

    def group(name, prefix):
        return run_group(engine, name, prefix, scripts, env_config, max_turns=4)

    plain = group("gym_scheduler", "p")
    assert [o.rollout_infos["total_reward"] for o in plain] == [1.0, 0.0] and "status" not in plain[1].rollout_infos
    assert all(sum(m for mask in o.response_loss_mask for m in mask) > 0 for o in plain)  # the void row trains
    outs = group("aworld_gym", "a")
    infos = [o.rollout_infos for o in outs]
    assert [(i["status"], i["termination"], i["weight"]) for i in infos] == [
        ("ok", "answer", 1.0), ("void", "env_crash", 0.0)]  # fmt: skip
    assert [sum(m for mask in o.response_loss_mask for m in mask) == 0 for o in outs] == [False, True]
    assert len(outs[1].response_loss_mask) == 2  # both of its turns, the one before the crash included
    rewards = AWorldReward()([None] * 2, rollout_infos=infos, prompt_id=["p"] * 2, env_config=[env_config] * 2)
    assert rewards == [1.0, 1.0]


def group_bonus(group: list[dict]) -> list[float]:
    """A group reward hook that adds a known bonus (0.5) to each live member (as in test_every_face.py)."""
    return [0.5] * len(group)


def trained_rewards(outs, env_config, *, gym: bool):
    """What swift trains on: its own ``score_completions`` on samples built from the outputs as its trainer builds them
    (one group: one dataset row repeated), with ``--reward_funcs aworld`` (and, on the gym env, its ``gym_reward``
    column), weighted ``--reward_weights 1 0`` on the gym env."""
    import torch
    from swift.rl_core.data import GRPOSample
    from swift.rl_core.grpo_algorithm import score_completions

    from aworld_gym.trainers.swift import AWorldReward

    samples = []
    for out in outs:
        sample = GRPOSample.from_row({"messages": [{"role": "user", "content": "ignored"}], "env_config": env_config})
        sample.prompt_id = "prompt_0"
        sample.apply_rollout_output(rollout_output=out)
        samples.append(sample)
    per_func = score_completions(samples, [AWorldReward()], None, gym, torch.device("cpu"))
    weights = torch.tensor([1.0, 0.0] if gym else [1.0])
    return (per_func * weights).sum(dim=1).tolist(), per_func[:, -1].tolist()


def test_the_envs_group_hooks_reach_what_swift_trains_on(engine):
    """A group hook adding 0.5, on the token-exact scheduler and on the gym env under ``aworld_gym``: the solved
    episode trains on 1.5 (the hook's share added by AWorldReward, which holds the group), the wrong one on 0.5, and a
    void episode (its server killed mid-episode) stays masked, given the live rows' mean (its advantage 0)."""
    from aworld_gym.core.rewards import Hook, default_hooks

    hooks = [*default_hooks(), Hook(group_bonus, on="group")]
    env_config = {**MCP, "env_kwargs": {**demo_env_kwargs(4), "mcp_config": stdio_config(), "reward_hooks": hooks}}
    scripts = [[CALL, ANSWER], [CALL, CRASH, ANSWER], [CALL, "<answer>7</answer>"]]

    def group(name, prefix):
        return run_group(engine, name, prefix, scripts, env_config, max_turns=5)

    outs = group("aworld", "h")
    assert [o.rollout_infos["status"] for o in outs] == ["ok", "void", "failed"]
    assert [sum(m for mask in o.response_loss_mask for m in mask) == 0 for o in outs] == [False, True, False]
    json.dumps([o.rollout_infos for o in outs])  # swift's server mode sends them as JSON
    rewards, _ = trained_rewards(outs, env_config, gym=False)
    assert rewards == [1.5, 1.0, 0.5]  # the void row: the live rows' mean (1.5 + 0.5) / 2
    gym_outs = group("aworld_gym", "k")
    assert [o.rollout_infos["weight"] for o in gym_outs] == [1.0, 0.0, 1.0]
    assert [sum(m for mask in o.response_loss_mask for m in mask) == 0 for o in gym_outs] == [False, True, False]
    rewards, gym_reward = trained_rewards(gym_outs, env_config, gym=True)
    assert rewards == [1.5, 1.0, 0.5] and gym_reward == [1.0, 0.0, 0.0]  # swift's own column: the env's, no share


def test_the_reward_groups_rows_by_task_not_only_by_swifts_prompt_id():
    """swift's ``prompt_id`` names the dataset's messages, which AWorld rows may all share ("the scheduler replaces
    them"): two tasks in one batch are two groups, so a void row gets its own task's live mean."""
    from aworld_gym.trainers.swift import AWorldReward

    infos = [{"total_reward": 1.0, "weight": 1.0}, {"total_reward": 0.0, "weight": 0.0, "termination": "env_crash"},
             {"total_reward": 0.0, "weight": 1.0}, {"total_reward": 0.0, "weight": 0.0, "termination": "env_crash"}]  # fmt: skip
    configs = [{**MCP, "task_id": t} for t in ("add-2", "add-2", "add-3", "add-3")]
    assert AWorldReward()([None] * 4, rollout_infos=infos, prompt_id=["p"] * 4, env_config=configs) == [1, 1, 0, 0]


@contextlib.contextmanager
def serve_env(kwargs: dict, env_id: str = "AWorld/MCP-v0"):
    port = free_port()
    argv = [sys.executable, "-m", "aworld_gym.cli", "serve-env", env_id, "--port", str(port),
            "--env-kwargs", json.dumps(kwargs), "--max-sessions", "4"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        assert wait_until(healthy, 60), "serve-env did not start"
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def test_swifts_openenv_client_path_runs_episodes_against_serve_env(engine):
    kwargs = {**demo_env_kwargs(4), "mcp_config": stdio_config()}
    with serve_env(kwargs) as url:
        sched = multi_turns["aworld_openenv"](infer_engine=Scripted(engine), max_turns=4)
        cfg = {"base_url": url, "reset_kwargs": {"task_id": "add-2"}}

        async def both():
            good = request("o1", [CALL, ANSWER], cfg)
            crash = request("o2", [CALL, CRASH, ANSWER], cfg)
            return await asyncio.gather(sched.run(good, config()), sched.run(crash, config()))

        good, crash = asyncio.run(both())
    assert good.rollout_infos["total_reward"] == 1.0 and good.rollout_infos["status"] == "ok"
    assert good.messages[0]["role"] == "system" and '"name": "add"' in good.messages[0]["content"]
    assert good.messages[1]["content"] == "What is 2 + 1? Use the add tool."
    assert "3.0" in good.messages[3]["content"]
    assert crash.rollout_infos["status"] == "void" and crash.rollout_infos["termination"] == "env_crash"
    assert sum(m for mask in crash.response_loss_mask for m in mask) == 0
    assert sum(m for mask in good.response_loss_mask for m in mask) > 0


def test_the_docs_examples_of_this_venv_run(engine, tmp_path):
    """docs/training.md's blocks marked to run in .venv-swift (ms-swift's section, OpenEnv's client)."""
    from tests.test_examples import blocks

    marked = [b for b in blocks(ROOT / "docs/training.md") if b.skip and b.skip.startswith("runs in .venv-swift")]
    assert len(marked) == 2 and all(b.lang == "python" for b in marked)
    swift_block, client_block = (b.code for b in marked)
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"  # "python": this venv's
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    (tmp_path / "swift_example.py").write_text(swift_block)
    done = subprocess.run([sys.executable, "swift_example.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "turn_limit" in done.stdout
    with serve_env({**demo_env_kwargs(4), "mcp_config": stdio_config()}) as url:
        (tmp_path / "client_example.py").write_text(client_block.replace("http://127.0.0.1:8918", url))
        done = subprocess.run([sys.executable, "client_example.py"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-2:] == ["What is 0 + 1? Use the add tool.", "answer"]
