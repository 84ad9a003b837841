"""TRL GRPOTrainer adapters on CPU with the real trainer and a tiny offline Qwen3."""

from __future__ import annotations

import math
import os
import platform

import gymnasium as gym
import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from aworld_gym.envs.code.tasks import solution_of  # noqa: E402
from aworld_gym.fixtures.learning import RUNS, experiment, kernels, warm_model  # noqa: E402
from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3  # noqa: E402
from aworld_gym.fixtures.toy import (  # noqa: E402
    demo_actions,
    tool_choice_env_kwargs,
)
from aworld_gym.rollout.tokens import ChatTokens  # noqa: E402
from aworld_gym.trainers.seam.token_rollout import scripted_episode  # noqa: E402
from aworld_gym.trainers.trl import (  # noqa: E402
    component_reward,
    ensure_tool_parser,
    env_reward,
    environment_factory,
    make_rollout_func,
    model_generate,
    task_dataset,
)

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
FIXED = {"ops": ("multiply",), "pairs": ((3, 4),)}  # the small fixed task set of the plumbing tests


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny") / "qwen3")


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """The tiny Qwen3 after the frozen recipe's warm start (:func:`aworld_gym.fixtures.learning.warm_model`): SFT on
    the tool-choice train split's demonstrations, per task two calling the right tool and two a wrong one, so the
    wording-to-tool choice is left to learn (it copies numbers well by the end); the lookup tasks also over three
    other tables, so their values are copied, not remembered."""
    return warm_model(tmp_path_factory.mktemp("warm"))


def load(path):
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def config(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=64,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    base.update(kw)
    return GRPOConfig(**base)


class RecordingTrainer(GRPOTrainer):
    """Keeps the batches the loss is computed on."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.batches = []

    def compute_loss(self, model, inputs, *a, **kw):
        self.batches.append({k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in inputs.items()})
        return super().compute_loss(model, inputs, *a, **kw)


def recorded(rollout_func):
    """``(rollout_func wrapped, the trajectories of every batch it ran)``."""
    seen = []
    inner = rollout_func.__call__

    def record(prompts, trainer):
        out = inner(prompts, trainer)
        seen.extend(rollout_func.last_trajectories)
        return out

    return record, seen


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def changed(model, before) -> int:
    return sum(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def losses(trainer) -> list[float]:
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def batch_rows(batch):
    """(completion ids, env mask) per row of a loss batch, without right padding."""
    rows = []
    for ids, cmask, tmask in zip(batch["completion_ids"], batch["completion_mask"], batch["tool_mask"], strict=True):
        n = int(cmask.sum())
        rows.append((ids[:n].tolist(), tmask[:n].tolist()))
    return rows


class ScriptedMix:
    """A generation backend for tests: the even rows of each first turn follow a script (known token ids), the
    rest sample from the model; a scripted episode stays scripted. Gives an untrained model's groups reward
    variance, and rollouts whose model token ids are known."""

    def __init__(self, script, chat):
        self.script, self.chat = script, chat
        self.scripted: dict[tuple[int, ...], int] = {}  # input ids -> turn index of the script
        self.emitted: list[list[int]] = []

    def __call__(self, trainer):
        sample = model_generate(trainer.model, trainer.processing_class)

        def generate(inputs, max_new):
            out = []
            for i, ids in enumerate(inputs):
                turn = self._turn_of(ids)
                if turn is None and i % 2 == 0 and self.chat.decode(ids).count("<|im_start|>assistant") == 1:
                    turn = 0
                text = self.script(self.chat.decode(ids), turn) if turn is not None else None
                if text is None:
                    out.append(sample([ids], max_new)[0])
                    continue
                new = [*self.chat.encode(text), self.chat.eos_id]
                self.scripted[tuple(ids)] = turn
                self.emitted.append(new)
                out.append((new, None))
            return out

        return generate

    def _turn_of(self, ids):
        best = None
        for prefix, turn in self.scripted.items():  # the longest scripted input this one continues
            if (
                len(ids) > len(prefix)
                and tuple(ids[: len(prefix)]) == prefix
                and (best is None or len(prefix) > best[0])
            ):
                best = (len(prefix), turn)
        return None if best is None else best[1] + 1


def code_script(env):
    tasks = list(env.unwrapped.tasks)

    def script(text, turn):
        task = next(t for t in tasks if t.prompt in text)
        solution = solution_of(task)
        if turn == 0:
            import json

            call = json.dumps({"name": "run_python", "arguments": {"code": solution + "\nprint('ok')\n"}})
            return f"<tool_call>\n{call}\n</tool_call>"
        if turn == 1:
            return f"<answer>\n```python\n{solution}```\n</answer>"
        return None

    return script


def toy_script(env):
    tasks = {t.prompt: t for t in env.unwrapped.tasks}

    def script(text, turn):
        task = next(t for p, t in tasks.items() if p in text)
        actions = demo_actions({"reference": task.metadata["reference"]}, wrong_tool=False)
        return actions[turn] if turn is not None and turn < len(actions) else None

    return script


def assert_rows_match(trainer, rf, mix):
    """Every row the loss saw is a rollout, token for token, with env_mask 0 exactly on the env's tokens."""
    rows = [r for b in trainer.batches for r in batch_rows(b)]
    assert rows
    episodes = {tuple(ep.tokens.completion_ids): ep for ep in rf.all_episodes}
    for ids, mask in rows:
        ep = episodes.get(tuple(ids))
        assert ep is not None, "a trained completion is not one of the rollouts (re-tokenised?)"
        assert mask == ep.tokens.mask
    # The scripted episodes: model turns are exactly the emitted ids (mask 1), everything between is the env's
    # rendering of its answer (mask 0), found independently with the chat template.
    scripted = [ep for ep in rf.all_episodes if ep.tokens.completion_ids[: len(mix.emitted[0])] in mix.emitted]
    assert scripted
    for ep in scripted:
        pos = 0
        turns = 0
        while pos < len(ep.tokens.completion_ids):
            turn = next(e for e in mix.emitted if ep.tokens.completion_ids[pos : pos + len(e)] == e)
            assert ep.tokens.mask[pos : pos + len(turn)] == [1] * len(turn)
            pos += len(turn)
            turns += 1
            end = pos
            while end < len(ep.tokens.mask) and ep.tokens.mask[end] == 0:
                end += 1
            env_ids = ep.tokens.completion_ids[pos:end]
            if env_ids:
                text = mix.chat.decode(env_ids)
                assert text.startswith("\n<|im_start|>user\n<tool_response>\n")
                assert text.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
            pos = end
        assert turns == ep.tokens.model_turns == 2
        assert ep.terminated and ep.reward > 0.5


@pytest.mark.parametrize("env_id", ["AWorld/Code-v0", "AWorld/MCP-v0"])
def test_rollout_func_trains_token_exact(env_id, tiny, tmp_path):
    model, tok = load(tiny)
    kwargs = tool_choice_env_kwargs(**FIXED) if env_id == "AWorld/MCP-v0" else {}
    probe = gym.make(env_id, **kwargs)
    script = code_script(probe) if env_id == "AWorld/Code-v0" else toy_script(probe)
    probe.close()
    mix = ScriptedMix(script, ChatTokens(tok))
    rf = make_rollout_func(env_id, generate=mix, **kwargs)
    rf.all_episodes = []
    inner = rf.__call__

    def record(prompts, trainer):
        out = inner(prompts, trainer)
        rf.all_episodes += rf.last_trajectories
        return out

    dataset = task_dataset(env_id, limit=2, **kwargs)
    budget = 1024 if env_id == "AWorld/Code-v0" else 64
    trainer = RecordingTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[env_reward, component_reward("task")],
        args=config(tmp_path, max_completion_length=budget),
        train_dataset=dataset,
        rollout_func=record,
    )
    before = snapshot(model)
    try:
        trainer.train()
    finally:
        rf.close()
    assert len(losses(trainer)) >= 2 and all(math.isfinite(x) for x in losses(trainer))
    assert changed(model, before) > 0
    assert_rows_match(trainer, rf, mix)
    assert all(len(ep.tokens.completion_ids) <= budget for ep in rf.all_episodes)
    # GRPO groups start on one task: each group of num_generations rollouts shares a task id.
    ids = [ep.task_id for ep in rf.all_episodes]
    assert all(len(set(ids[g : g + 4])) == 1 for g in range(0, len(ids), 4))


def test_completion_budget_spans_turns(tiny):
    """max_completion_length bounds model and env tokens together; an episode cut there says so."""
    model, tok = load(tiny)
    chat = ChatTokens(tok)
    env = gym.make("AWorld/MCP-v0", **tool_choice_env_kwargs(**FIXED))
    try:
        actions = demo_actions({"reference": env.unwrapped.tasks[0].metadata["reference"]}, wrong_tool=False)
        full = scripted_episode(env, chat, actions, options={"task_index": 0}, budget=10_000)
        assert full.terminated and full.reward == 1.0
        cut = scripted_episode(
            env, chat, actions, options={"task_index": 0}, budget=len(full.tokens.completion_ids) - 3
        )
    finally:
        env.close()
    assert not cut.terminated and cut.termination == "token_budget"
    assert (
        len(cut.tokens.completion_ids)
        == len(full.tokens.completion_ids) - 3
        == len(cut.tokens.mask)
        == len(cut.tokens.logprobs)
    )
    assert cut.tokens.completion_ids == full.tokens.completion_ids[: len(cut.tokens.completion_ids)]


def test_sampled_logprobs_are_the_models(tiny):
    """The logprobs sent with a rollout are the model's own for the sampled ids (checked by a fresh forward)."""
    model, tok = load(tiny)
    model.eval()
    chat = ChatTokens(tok)
    from aworld_gym.trainers.seam.token_rollout import token_episodes

    torch.manual_seed(0)
    eps = token_episodes(lambda: gym.make("AWorld/MCP-v0", **tool_choice_env_kwargs()),
                         [{"task_index": i} for i in range(3)], chat, model_generate(model, tok), 40)  # fmt: skip
    for ep in eps:
        seq = torch.tensor([ep.tokens.prompt_ids + ep.tokens.completion_ids])
        with torch.no_grad():
            logits = model(seq).logits[0].float()
        p = len(ep.tokens.prompt_ids)
        lp = torch.log_softmax(logits[p - 1 : -1], -1).gather(-1, torch.tensor(ep.tokens.completion_ids)[:, None])[:, 0]
        m = torch.tensor(ep.tokens.mask).bool()
        assert m.any()
        assert torch.allclose(lp[m], torch.tensor(ep.tokens.logprobs)[m], atol=1e-4)


def test_environment_factory_class_schema():
    """Tool methods have typed signatures and Google docstrings that transformers turns back into the schema."""
    from transformers.utils import get_json_schema

    cls = environment_factory("AWorld/MCP-v0", **tool_choice_env_kwargs(**FIXED))
    env = cls()
    try:
        schema = get_json_schema(env.multiply)["function"]
        assert schema["name"] == "multiply"
        assert schema["parameters"]["properties"] == {
            "a": {"type": "integer", "description": "The a argument."},
            "b": {"type": "integer", "description": "The b argument."},
        }
        assert schema["parameters"]["required"] == ["a", "b"]
        assert get_json_schema(env.answer)["function"]["parameters"]["required"] == ["answer"]
        assert env.reset(task_id="multiply-0-3-4", prompt=[]) is not None
        assert env.multiply(a=3, b=4) == "12"
        assert env.multiply(a="x", b=4).startswith("Error")  # wrong types: an error observation, not a crash
        assert env.answer(answer="12") == "Your final answer was recorded."
        components = env.trajectory.ledger.components
        assert components["task"] == 1.0 and env.trajectory.status == "ok"
        # the task score, minus the tool-error penalty of the bad call
        assert env.get_reward() == pytest.approx(sum(components.values())) and env.get_reward() < 1.0
        assert env.add(a=1, b=2) == "The episode is over; no more tool calls are accepted."
    finally:
        env._close()


def length_reward(completions, **_):
    """Gives an untrained model's groups reward variance (so that the weights must move)."""
    return [-0.001 * len(str(c)) for c in completions]


def parity_reward(completions, **_):
    """Reward variance that does not depend on what the model wrote (completions cut at the same length would
    give length_reward none): the test is that gradients flow through environment_factory's rollouts."""
    return [float(i % 2) for i in range(len(completions))]


@pytest.mark.parametrize("env_id", ["AWorld/Code-v0", "AWorld/MCP-v0"])
def test_environment_factory_trains(env_id, warm, tmp_path):
    model, tok = load(warm)
    ensure_tool_parser(tok)
    kwargs = tool_choice_env_kwargs(**FIXED) if env_id == "AWorld/MCP-v0" else {}
    factory = environment_factory(env_id, **kwargs)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[length_reward, parity_reward],
        args=config(tmp_path, max_completion_length=96, max_tool_calling_iterations=2),
        train_dataset=task_dataset(env_id, limit=2, **kwargs),
        environment_factory=factory,
    )
    before = snapshot(model)
    trainer.train()
    assert len(losses(trainer)) >= 2 and all(math.isfinite(x) for x in losses(trainer))
    assert changed(model, before) > 0
    names = {h for entry in trainer.state.log_history for h in entry}
    assert f"rewards/{factory.__name__}/mean" in names  # get_reward was a reward source
    for env in trainer.environments:
        env._close()


# The seeds the learning test runs: seed 0 in `make test` (each seed costs about 5 minutes on 2 cores);
# AWORLD_GYM_GRPO_SEEDS=0,1,2 runs the recipe's three (examples/train_grpo_trl.py --evidence writes all three's JSON).
GRPO_SEEDS = [int(s) for s in os.environ.get("AWORLD_GYM_GRPO_SEEDS", "0").split(",")]


@pytest.mark.timeout(3600)  # two 120-step GRPO runs of 32 rollouts, the lr=0 control, 576 sampled episodes
@pytest.mark.parametrize("seed", GRPO_SEEDS)
def test_grpo_learns_the_tool_choice_on_the_test_split_and_its_controls_do_not(warm, tmp_path, seed):
    """The frozen experiment of :mod:`aworld_gym.fixtures.learning`: GRPO (the token-exact rollout function) on the
    train split lifts the warm-started tiny Qwen3 on the test split (operands, keys and wordings never trained on and
    never used to tune the recipe) by the pre-registered criterion: one-sided Fisher exact test on 144 sampled
    episodes before and after, p <= 0.01, so a model that did not learn passes with probability at most 1%. Two
    controls must fail it: the same run with each batch's rewards shuffled among its rollouts (the same learning
    rate and number of updates: "any update at this rate helps" fails it) and learning rate 0 (every weight is
    asserted unchanged, so it runs 8 steps: its model is the warm start's, bit for bit). The CPU kernels are the
    pinned AVX2 ones (tests/conftest.py), so the machine does not pick the model."""
    if platform.machine() in ("x86_64", "AMD64"):
        assert kernels()["torch_cpu_capability"] == "AVX2", kernels()
    out = experiment(warm, tmp_path, seeds=[seed])
    (row,) = out["seeds"]
    summary = {run: (out["before"], row[run]["after"], f"p={row[run]['p']:.2g}") for run in RUNS}
    print(f"GRPO seed {seed} on the {out['split']} split (before, after, p): {summary}")
    assert out["split"] == "test"
    assert row["trained"]["passed"], (summary, row["trained"]["reward_per_step"])
    assert not row["shuffled"]["passed"], summary
    assert not row["lr0"]["passed"], summary


@pytest.fixture(scope="module")
def half_tool(tmp_path_factory):
    """The tiny Qwen3 warm-started to call a tool in about half its episodes (:mod:`aworld_gym.fixtures.tool_dropout`)."""
    from aworld_gym.fixtures.tool_dropout import warm_model as half_tool_model

    return half_tool_model(tmp_path_factory.mktemp("half-tool"))


@pytest.mark.timeout(1200)
def test_training_the_model_off_its_tools_raises_the_parse_health_alarm_and_its_controls_do_not(half_tool, tmp_path,
                                                                                                capsys):  # fmt: skip
    """The frozen experiment of :mod:`aworld_gym.fixtures.tool_dropout`: GRPO with a reward for answering without a
    tool drives the model off its tools, and the training run's parse-health alarm fires while it trains (a
    ParseHealthWarning), not at its first window; the same number of steps toward the tools, and at learning rate
    0, never fire it. `aworld-gym report` of the training run's episodes (the rollout function's `out`) raises the same
    alarm, and none for the control's."""
    from aworld_gym.cli import main
    from aworld_gym.fixtures import tool_dropout

    out = {which: tool_dropout.run(half_tool, tmp_path, which) for which in tool_dropout.RUNS}
    summary = {k: (v["tool_call_episodes_per_step"], v["alarms"]) for k, v in out.items()}
    print(f"parse-health learning test (tool-call share per step, alarms): {summary}")
    trained = out["trained"]
    assert trained["passed"] and any(tool_dropout.NO_TOOL in w for w in trained["warned"]), summary
    assert trained["tool_call_share_first_window"] > 0.25, summary  # it started with tools
    assert not out["tools"]["passed"] and not out["lr0"]["passed"], summary
    flags = ["--parse-window", str(tool_dropout.RECIPE["window"]), "--no-tool-alarm",
             str(tool_dropout.RECIPE["no_tool_call"])]  # fmt: skip
    assert main(["report", trained["out"], *flags]) == 0
    first = next(a for a in trained["alarms"] if tool_dropout.NO_TOOL in a)
    assert f"ALARM {first}" in capsys.readouterr().out  # the same alarm, after the same episode
    assert main(["report", out["tools"]["out"], *flags]) == 0
    assert tool_dropout.NO_TOOL not in capsys.readouterr().out


def test_recipe_settings_are_a_valid_grpo_config(tmp_path):
    import yaml

    from aworld_gym.trainers import recipes_dir

    recipe = yaml.safe_load((recipes_dir() / "qwen3_32b_grpo_trl.yaml").read_text())
    settings = {**recipe["grpo"], "bf16": False, "use_cpu": True, "use_vllm": False}  # the CPU here
    cfg = GRPOConfig(output_dir=str(tmp_path), report_to=[], **settings)
    assert cfg.num_generations == 8 and cfg.max_completion_length == 16384
    assert recipe["env"] in gym.registry
    assert (recipes_dir() / "deepspeed_zero3.yaml").exists()


class ScriptedToolLoopTrainer(GRPOTrainer):
    """GRPOTrainer whose generation follows a ScriptedMix (known tool calls in the even rows)."""

    mix: ScriptedMix

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        outs = self.mix(self)(prompt_ids, self.max_completion_length)
        return [ids for ids, _ in outs], None


def test_environment_factory_in_trls_tool_loop(warm, tmp_path):
    """TRL parses the tool calls, calls the generated methods with typed arguments, and get_reward scores them."""
    model, tok = load(warm)
    ensure_tool_parser(tok)
    kwargs = tool_choice_env_kwargs(**FIXED)
    factory = environment_factory("AWorld/MCP-v0", **kwargs)
    script = [
        '<tool_call>\n{"name": "multiply", "arguments": {"a": 3, "b": 4}}\n</tool_call>',
        '<tool_call>\n{"name": "answer", "arguments": {"answer": "12"}}\n</tool_call>',
        "Done.",
    ]
    ScriptedToolLoopTrainer.mix = ScriptedMix(lambda text, turn: script[turn] if turn < 3 else None, ChatTokens(tok))
    trainer = ScriptedToolLoopTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[],
        args=config(tmp_path, max_completion_length=128, max_tool_calling_iterations=3, max_steps=1),
        train_dataset=task_dataset("AWorld/MCP-v0", limit=2, **kwargs),
        environment_factory=factory,
    )
    trainer.train()
    calls = [h["tools/call_frequency"] for h in trainer.state.log_history if "tools/call_frequency" in h]
    assert calls and calls[0] >= 1.0  # the scripted half makes two calls each
    solved = [e for e in trainer.environments if e.trajectory.num_turns == 2]
    assert len(solved) == 2  # the even rows of the batch of 4
    assert all(e.get_reward() == 1.0 and e.trajectory.ledger.components == {"task": 1.0} for e in solved)
    for env in trainer.environments:
        env._close()


class RaisingStep(gym.Wrapper):
    def step(self, action):
        raise RuntimeError("tool infrastructure gone")

    async def astep(self, action):
        raise RuntimeError("tool infrastructure gone")


def test_env_that_raises_ends_only_its_episode(tiny):
    """An env whose step raises ends that episode with env_error (void); the rest of the batch still runs."""
    from aworld_gym.trainers.seam.token_rollout import token_episodes
    from aworld_gym.trainers.trl import adhoc_task, prompt_text

    model, tok = load(tiny)
    chat = ChatTokens(tok)
    made = []

    def make():
        env = gym.make("AWorld/MCP-v0", **tool_choice_env_kwargs(**FIXED))
        made.append(env)
        return RaisingStep(env) if len(made) == 1 else env

    probe = gym.make("AWorld/MCP-v0", **tool_choice_env_kwargs(**FIXED))
    call = demo_actions({"reference": probe.unwrapped.tasks[0].metadata["reference"]}, wrong_tool=False)[0]
    probe.close()
    ids = [*chat.encode(call), chat.eos_id]
    eps = token_episodes(make, [{"task_index": 0}] * 2, chat, lambda inputs, n: [(ids, None)] * len(inputs), 200)
    by_end = {ep.termination: ep for ep in eps}
    assert set(by_end) == {"env_error", "turn_limit"}
    assert by_end["env_error"].status == "void" and by_end["env_error"].tokens.model_turns == 1
    assert by_end["turn_limit"].status == "failed" and by_end["turn_limit"].tokens.model_turns == 3
    # prompts that are not tasks become tasks without answers, with a stable id
    assert prompt_text([{"role": "user", "content": "hi"}]) == "hi"
    assert adhoc_task("hi") == adhoc_task("hi") and adhoc_task("hi")["id"].startswith("adhoc-")


def test_one_shaping_wrapper_through_both_trl_adapters(tiny):
    """The shaping wrapper of an env factory reaches make_rollout_func's fields and environment_factory's reward."""
    from types import SimpleNamespace

    from tests.helpers import SHAPED, shaped_env

    model, tok = load(tiny)
    chat = ChatTokens(tok)
    script = {"n": 0}
    turns = ['<tool_call>{"name": "add", "arguments": {"a": 0, "b": 1}}</tool_call>', "<answer>1.0</answer>"]

    def scripted(trainer):
        def generate(inputs, max_new):
            out = []
            for ids in inputs:
                turn = chat.decode(ids).count("<|im_start|>assistant") - 1  # model turns so far
                out.append(([*chat.encode(turns[min(turn, 1)]), chat.eos_id], None))
            script["n"] += 1
            return out

        return generate

    rf = make_rollout_func(shaped_env, generate=scripted)
    trainer = SimpleNamespace(processing_class=tok, max_completion_length=400, accelerator=None)
    try:
        out = rf([[{"role": "user", "content": "What is 0 + 1? Use the add tool."}]] * 2, trainer)
    finally:
        rf.close()
    assert out["reward_components"] == [SHAPED, SHAPED] and out["reward"] == [11.0, 11.0]

    from tests.helpers import grouped_env

    rf = make_rollout_func(grouped_env, generate=scripted)
    try:  # two prompts of one task (a GRPO group of 2) and one of another (a group of 1)
        prompts = [[{"role": "user", "content": f"What is {i} + 1? Use the add tool."}] for i in (0, 0, 1)]
        out = rf(prompts, trainer)
    finally:
        rf.close()
    sizes = [c["group_size"] for c in out["reward_components"]]
    assert sizes == [pytest.approx(0.2), pytest.approx(0.2), pytest.approx(0.1)]

    cls = environment_factory(shaped_env)
    env = cls()
    try:
        env.reset(task_id="add-0")
        assert env.add(a=0, b=1) == "1.0"
        assert env.answer(answer="1.0") == "Your final answer was recorded."
        assert env.trajectory.ledger.components == SHAPED and env.get_reward() == 11.0
    finally:
        env._close()


def test_task_dataset_from_a_factory():
    from tests.helpers import shaped_env

    ds = task_dataset(shaped_env)
    assert ds["task_id"] == ["add-0", "add-1", "add-2", "add-3"]
    assert ds[1]["prompt"] == [{"role": "user", "content": "What is 1 + 1? Use the add tool."}]


def test_environment_factory_shows_the_task_note_after_a_call():
    """A task's note (the page after an action, in Browser-v0) reaches TRL's tool loop as the env shows it."""
    from aworld_gym.core.env import MCPEnv, TaskState
    from aworld_gym.mcp.demo_server import build_server
    from tests.helpers import TASKS

    class Noting(MCPEnv):
        async def acheck_task(self, task, results):
            return TaskState(note="[the page now]")

    cls = environment_factory(lambda: Noting({"mcpServers": {"demo": build_server}}, TASKS))
    env = cls()
    try:
        env.reset(task_id="echo")
        assert env.echo(text="hi") == "hi\n[the page now]"
    finally:
        env._close()
