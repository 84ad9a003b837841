"""AWorld/Code-v0: solve programming tasks with a sandboxed ``run_python`` tool; reward = hidden tests pass."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.env import MCPEnv
from aworld_gym.core.settings import Settings
from aworld_gym.core.task import Task, TaskSpec
from aworld_gym.envs.code.scorer import Verdict, check_solution
from aworld_gym.envs.code.tasks import code_tasks, humaneval_tasks
from aworld_gym.sandbox.runner import Limits, shared_sandbox

SYSTEM_PREAMBLE = (
    "You are an expert Python programmer. Solve the task. You may run code with the run_python tool to test "
    "your ideas. Submit the complete function (with any imports it needs) inside <answer></answer>, as a "
    "```python code block."
)

PROMPT_TEMPLATE = """Complete the following Python function so that it passes hidden unit tests.

```python
{code}```

Submit the complete function `{entry_point}` in <answer>```python ...```</answer>."""


class CodeEnv(MCPEnv):
    """HumanEval (default) or your own HumanEval-shaped tasks, with a sandboxed Python tool over MCP.

    Args:
        tasks: ``None`` for HumanEval's 164 problems, or a path/list/Dataset of rows with ``task_id``,
            ``prompt``, ``entry_point``, ``test`` (and optionally ``canonical_solution``).
        server: ``"shared"`` (one Python-execution server process for every env of this process, over
            streamable HTTP on 127.0.0.1), ``"inprocess"`` (the server runs inside this process), or the URL of
            a running ``python -m aworld_gym.sandbox.server --transport streamable-http``.
        isolation: sandbox isolation (``"auto"``, ``"bwrap"``, ``"none"``); see :class:`Sandbox`.
        exec_timeout_s: wall-clock limit of one ``run_python`` call and of the hidden tests.
        memory_mb: memory limit of one execution.
        warm: ``"auto"`` (default: executions forked from a warm zygote where it can start, else cold with a
            warning), ``"on"`` (required) or ``"off"`` (a fresh sandboxed process per execution).
        shell: also offer ``run_shell`` (bash in the same sandbox); off by default.
        **kwargs: everything :class:`MCPEnv` takes (``max_turns``, ``reward_hooks``, ...).
    """

    def __init__(
        self,
        tasks: TaskSpec | None = None,
        *,
        server: str = "shared",
        isolation: str = "auto",
        exec_timeout_s: float = 10.0,
        memory_mb: int = 1024,
        warm: str = "auto",
        shell: bool = False,
        **kwargs: Any,
    ) -> None:
        for key in ("mcp_config", "servers"):
            if key in kwargs:
                raise ConfigError(f"AWorld/Code-v0 defines its own {key!r}; use AWorld/MCP-v0 for custom tools")
        settings = Settings.take("AWorld/Code-v0", kwargs).fixed("AWorld/Code-v0", scorer=None)
        settings = settings.with_defaults(system_prompt=SYSTEM_PREAMBLE, tool_timeout=exec_timeout_s + 30.0)
        if not shell:  # the execution server also offers run_shell (GAIA uses it); HumanEval needs Python only
            settings = settings.replace(deny_tools=(*settings.tool_options.deny, "run_shell"))
        limits = Limits(
            wall_seconds=exec_timeout_s, cpu_seconds=max(1, int(exec_timeout_s)), memory_bytes=memory_mb << 20
        )
        from aworld_gym.sandbox.shared import python_server_entry

        config: Mapping[str, Any] = {"mcpServers": {"python": python_server_entry(server, isolation, exec_timeout_s,
                                                                                  memory_mb, warm=warm)}}  # fmt: skip
        source = humaneval_tasks() if tasks is None else code_tasks(tasks)
        self.exec_timeout_s = exec_timeout_s
        self.sandbox = shared_sandbox(limits, isolation, warm)  # type: ignore[arg-type] - one per process: its warm zygote
        self.last_verdict: Verdict | None = None
        super().__init__(mcp_config=config, tasks=source, settings=settings, **kwargs)

    def render_prompt(self, task: Task) -> str:
        return PROMPT_TEMPLATE.format(code=task.prompt, entry_point=task.metadata["entry_point"])

    def score(self, answer: str, task: Task) -> float:
        self.last_verdict = check_solution(answer, task, self.sandbox, timeout_s=self.exec_timeout_s)
        return 1.0 if self.last_verdict.passed else 0.0
