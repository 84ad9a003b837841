"""``GRPOTrainer(environment_factory=...)``: an AWorld env's MCP tools as the typed, documented methods of a class
that TRL's own tool loop calls; plus the group reward function and the tool parser for such training."""

from __future__ import annotations

import atexit
import inspect
import json
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Literal

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.envs import EnvLike, env_factory, env_name
from aworld_gym.rollout.groups import check_void_policy, group_shares
from aworld_gym.rollout.pool import EnvPool
from aworld_gym.rollout.text_episode import SyncTextEpisode
from aworld_gym.trainers.seam.rows import void_weight
from aworld_gym.trainers.seam.token_rollout import adhoc_task, prompt_text

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


def _hint(schema: dict[str, Any]) -> Any:
    """A Python type hint for a JSON schema property (as transformers' get_json_schema reads them back)."""
    if "enum" in schema and schema["enum"] and all(isinstance(v, str | int | float | bool) for v in schema["enum"]):
        return Literal[tuple(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        hints = [_hint({**schema, "type": k}) for k in kind if k != "null"]
        hint: Any = hints[0] if hints else str
        for h in hints[1:]:
            hint = hint | h
        return hint | None if "null" in kind else hint
    if kind == "array":
        items = schema.get("items")
        return list[_hint(items)] if isinstance(items, dict) and items.get("type") else list
    if kind in _JSON_TYPES:
        return _JSON_TYPES[kind]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _hint({"type": [s.get("type", "string") for s in schema[key] if isinstance(s, dict)]})
    return str


def _docstring(description: str, props: dict[str, Any]) -> str:
    lines = [(description or "A tool.").strip().replace("\n\n", "\n"), "", "Args:"]
    for name, prop in props.items():
        desc = " ".join(str(prop.get("description") or f"The {name} argument.").split())
        lines.append(f"    {name}: {desc}")
    if not props:
        lines = lines[:-2]
    return "\n".join(lines)


def _tool_method(name: str, schema: dict[str, Any]) -> Callable[..., str]:
    fn = schema.get("function", schema)
    params = fn.get("parameters") or {}
    props: dict[str, Any] = dict(params.get("properties") or {})
    required = set(params.get("required") or [])
    order = [p for p in props if p in required] + [p for p in props if p not in required]
    sig_params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for p in order:
        hint = _hint(props[p])
        if p in required:
            sig_params.append(inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=hint))
        else:
            hint = hint | None
            sig_params.append(inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=hint, default=None))
        annotations[p] = hint
    annotations["return"] = str

    def method(self: Any, **kwargs: Any) -> str:
        args = {k: v for k, v in kwargs.items() if v is not None or k in required}
        return self._call_tool(name, args)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = _docstring(fn.get("description", ""), {p: props[p] for p in order})
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(sig_params, return_annotation=str)  # type: ignore[attr-defined]
    return method


class AWorldToolEnv:
    """Base of the classes made by :func:`environment_factory` (one env per instance). TRL runs the loop; each
    instance keeps its episode's :class:`~aworld_gym.core.trajectory.Trajectory` (``self.trajectory``), recorded
    by the driver's own step recorder, so this face gives the same trajectory as every other."""

    env_id: str = ""
    env_kwargs: dict[str, Any] = {}  # noqa: RUF012 - set per generated subclass
    _make_env: Callable[[], Any] = staticmethod(lambda: None)  # type: ignore[assignment] - set per subclass
    void_policy: str = "mask"
    ANSWER_HINT = "\n\nUse the tools as needed; when you know the final answer, call `answer` with it."

    def __init__(self) -> None:
        self.pool = EnvPool(self._make_env, max_idle=1)  # this instance's one env, replaced if an episode breaks it
        self.pool.peek()  # made now: the tools' servers start with the instance, not in its first rollout
        self.episode = SyncTextEpisode(self.pool, self.env_id, "trl")
        self.episode.end(Termination.ENV_ERROR)  # no episode yet
        _tool_envs.add(self)

    @property
    def trajectory(self) -> Trajectory:
        """The episode's trajectory."""
        return self.episode.trajectory

    def reset(self, **row: Any) -> str | None:
        """Start the episode on the row's task (``task_id`` column, else the prompt's text)."""
        options: dict[str, Any] = {}
        if row.get("task_id") is not None:
            options["task_id"] = row["task_id"]
        else:
            options["task"] = adhoc_task(prompt_text(row.get("prompt")))
        self.episode.close()  # the last episode's env back to the pool (a broken one dropped)
        self.episode.start(options=options)  # a void start ends the episode: masked, not a crash of the trainer
        return self.ANSWER_HINT

    @property
    def task_id(self) -> str | None:
        return self.trajectory.task_id

    def get_reward(self) -> float | None:
        """The episode's return: the task score when ``answer`` was called, plus the env's shaping components;
        ``None`` for a void episode (``void_policy="mask"``), which TRL leaves out of the group's baseline."""
        if void_weight(self.trajectory.void, self.void_policy) == 0:
            return None
        return self.trajectory.reward

    def answer(self, answer: str) -> str:
        """Submit the final answer to the task; this ends the episode.

        Args:
            answer: The final answer.
        """
        return self._act(f"<answer>{answer}</answer>")

    def _close(self) -> None:
        """Close the env (not a tool: TRL exposes every public method to the model)."""
        self.episode.close()
        self.pool.close()

    def _call_tool(self, name: str, args: dict[str, Any]) -> str:
        call = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
        return self._act(f"<tool_call>\n{call}\n</tool_call>")

    def _act(self, text: str) -> str:
        if not self.episode.running:
            return "The episode is over; no more tool calls are accepted."
        turn = self.episode.step(text)
        if turn.error is not None:  # the env failed: a void episode, said to the model
            return "The environment failed; the episode ends here."
        traj, info = self.trajectory, turn.info
        # what the model is shown of each call (a task's note after the last one, e.g. the page now, included)
        shown = [m["content"] for m in traj.turns[-1].get("messages") or [] if m["role"] == "tool"]
        if not shown:
            shown = [r["text"] for r in info.get("tool_results") or []]
        result = "\n".join(shown) if shown else (info.get("action_error") or "")
        if traj.done:
            if info.get("answer") is not None:
                result = "Your final answer was recorded."
            else:
                result = (result + "\n" if result else "") + f"The episode ended ({traj.termination})."
        return result


_tool_envs: weakref.WeakSet[AWorldToolEnv] = weakref.WeakSet()


@atexit.register
def _close_tool_envs() -> None:
    for e in list(_tool_envs):
        try:
            e._close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def environment_factory(env_id: EnvLike, *, void_policy: str = "mask", **env_kwargs: Any) -> type[AWorldToolEnv]:
    """A class for ``GRPOTrainer(environment_factory=...)``: one instance per rollout, the env's MCP tools as
    typed, documented methods, ``answer(answer)`` to finish, ``reset(**row)`` and ``get_reward()``.

    ``env_id`` is a registered id (with ``env_kwargs``) or a zero-argument factory returning an env; each instance
    steps the outermost env. Add :func:`group_reward` to ``reward_funcs`` to run the env's group reward hooks.
    """
    make = env_factory(env_id, env_kwargs)
    probe = make()
    try:
        schemas = probe.unwrapped.tools
        name = env_name(env_id, probe)
    finally:
        probe.close()
    namespace: dict[str, Any] = {"env_id": name, "env_kwargs": dict(env_kwargs), "_make_env": staticmethod(make),
                                 "void_policy": check_void_policy(void_policy)}  # fmt: skip
    reserved = {*dir(AWorldToolEnv), "pool", "episode"}  # the instance's own attributes too
    for schema in schemas:
        tool = schema["function"]["name"]
        if tool in reserved or not tool.isidentifier():
            raise ValueError(f"tool {tool!r} of {name} cannot be a method name; rename it with allow_tools/deny_tools")
        namespace[tool] = _tool_method(tool, schema)
    cls_name = "".join(ch for ch in name.title() if ch.isalnum()) + "Tools"
    return type(cls_name, (AWorldToolEnv,), namespace)


def ensure_tool_parser(tokenizer: Any) -> Any:
    """Give ``tokenizer`` TRL's Qwen3 response parser when TRL does not recognise its chat template.

    ``environment_factory`` needs ``tokenizer.parse_response`` to find tool calls. TRL sets it for the chat
    templates it knows (real Qwen3 checkpoints); a Qwen3-format template it does not know by heart (e.g. the tiny
    offline Qwen3 of ``aworld_gym.fixtures.tiny_qwen3``) gets TRL's Qwen3 parser here.
    """
    from trl import chat_template_utils as ctu

    if getattr(tokenizer, "response_schema", None) is not None or getattr(tokenizer, "response_template", None):
        return tokenizer
    try:
        return ctu.add_response_schema(tokenizer)
    except ValueError:
        if getattr(ctu, "_SUPPORTS_RESPONSE_TEMPLATE", False):
            tokenizer.response_template = ctu.qwen3_template
        else:
            tokenizer.response_schema = ctu.qwen3_schema
        return tokenizer


def group_reward(completions: Sequence[Any], environments: Sequence[Any] | None = None, **_: Any) -> list[float | None]:
    """A TRL reward function for ``environment_factory`` training: the env's group reward hooks, run once on the
    rollouts of each task in the batch (a GRPO group; void ones left out and given ``None``), each hook seeing every
    rollout's Trajectory record as the other faces do. Add it to ``reward_funcs`` next to the env's ``get_reward``:
    it returns only the group part."""
    if environments is None:
        raise ValueError("group_reward needs GRPOTrainer(environment_factory=...): the environments are missing")
    rubric = environments[0].pool.group_hooks if environments else None
    out: list[float | None] = [None if e.trajectory.void else 0.0 for e in environments]
    by_task: dict[str, list[int]] = {}
    for i, e in enumerate(environments):
        by_task.setdefault(str(e.task_id), []).append(i)
    for idxs in by_task.values():
        shares = group_shares(rubric, [environments[i].trajectory for i in idxs])
        for i, scores in zip(idxs, shares, strict=True):
            if scores is not None:
                out[i] = scores.total
    return out
