"""AWorld/GAIA-v0: GAIA questions with file, code and search tools, scored by GAIA's official rules."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.env import MCPEnv, TaskState
from aworld_gym.core.rewards import TaskScore
from aworld_gym.core.settings import Settings
from aworld_gym.core.task import Task, TaskSource
from aworld_gym.envs.gaia.access import SANDBOX_FILES, quoted
from aworld_gym.envs.gaia.loader import METADATA_NAMES, load_gaia, split_dir
from aworld_gym.envs.gaia.media import Endpoint
from aworld_gym.envs.gaia.scorer import question_scorer
from aworld_gym.mcp.config import parse_mcp_config
from aworld_gym.mcp.results import ToolResult

SYSTEM_PREAMBLE = """You are a general AI assistant. I will ask you a question. Use the tools to find the answer, \
step by step. When you know it, reply with your final answer inside <answer></answer> tags (a final line \
"FINAL ANSWER: ..." is accepted too).
YOUR FINAL ANSWER should be a number OR as few words as possible OR a comma separated list of numbers and/or \
strings.
If you are asked for a number, don't use commas to write your number, nor units such as $ or percent signs, \
unless specified otherwise.
If you are asked for a string, don't use articles, nor abbreviations (e.g. for cities), and write digits in plain \
text unless specified otherwise.
If you are asked for a comma separated list, apply the above rules depending on whether each element is a number \
or a string."""

SAMPLE_NOTE = (
    "bundled sample set: GAIA-format tasks written for aworld-gym (not the GAIA benchmark); "
    "pass data_dir= for the real GAIA data"
)


class GAIAEnv(MCPEnv):
    """GAIA with a file reader, image and audio tools, sandboxed Python and bash, and web search, over MCP.

    Args:
        data_dir: a local copy of the ``gaia-benchmark/GAIA`` snapshot (``2023/<split>/metadata.jsonl`` and the
            attachments); ``None`` uses the bundled sample set (generated on first use).
        split: ``"validation"`` (answers known) or ``"test"`` (no answers: no reward, answers recorded).
        level: 1, 2, 3 or ``None`` for all.
        search: search backend: ``"local:<folder>"`` (offline BM25 over a folder of documents), ``"tavily"``,
            ``"serper"``, ``"brave"`` (API key from the environment), ``"none"``; default: the sample set's
            local corpus, or ``search_docs`` when given, else no search tool.
        search_docs: a folder of documents for the offline search backend.
        mcp_config: extra servers in AWorld's format (e.g. AWorld's hosted GAIA tool server, ``@playwright/mcp``).
        python_server: ``"shared"``, ``"inprocess"`` or a URL (see ``AWorld/Code-v0``).
        isolation: the sandbox of ``run_python`` and ``run_shell`` (``"auto"``, ``"bwrap"``, ``"none"``).
        exec_timeout_s: their wall-clock limit per execution.
        memory_mb: their memory limit per execution.
        vision_model: the OpenAI-compatible endpoint (``{"base_url", "model", "api_key"?}``) of ``describe_image``
            (default: ``AWORLD_GYM_VISION_*`` from the environment; without one the tool says how to configure it).
        audio_model: the same for ``transcribe_audio`` (default: ``AWORLD_GYM_AUDIO_*``).
        browser: add the browser tools of ``AWorld/Browser-v0`` (the shared Playwright MCP server, an isolated
            context per env), opening http(s) sites at public addresses only (:mod:`aworld_gym.envs.gaia.browser`).
        browser_allow: ``host`` / ``host:port`` glob patterns the browser may also reach (e.g. a site on 127.0.0.1).
        browser_deny: ``host`` / ``host:port`` glob patterns the browser may never reach.
        **kwargs: everything :class:`MCPEnv` takes (``allow_tools``, ``reward_hooks``, ``max_turns``, ...).
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        split: str = "validation",
        level: int | None = None,
        *,
        search: str | None = None,
        search_docs: str | Path | None = None,
        mcp_config: Mapping[str, Any] | str | Path | None = None,
        python_server: str = "shared",
        isolation: str = "auto",
        exec_timeout_s: float = 30.0,
        memory_mb: int = 2048,
        vision_model: Mapping[str, Any] | None = None,
        audio_model: Mapping[str, Any] | None = None,
        browser: bool = False,
        browser_allow: Sequence[str] = (),
        browser_deny: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        for key in ("tasks", "servers"):
            if key in kwargs:
                raise ConfigError(f"AWorld/GAIA-v0 defines its own {key!r}; use AWorld/MCP-v0 for custom setups")
        settings = Settings.take("AWorld/GAIA-v0", kwargs).fixed("AWorld/GAIA-v0", scorer=None)
        self.sample = data_dir is None
        if self.sample:
            from aworld_gym.envs.gaia.sample import ensure_sample

            root = ensure_sample()
            if split != "validation":
                raise ConfigError("the bundled sample set has only the validation split; pass data_dir= for test")
            search_docs = search_docs or root / "search_docs"
            data_dir = root
        tasks = load_gaia(data_dir, split=split, level=level)
        if self.sample:  # sample tasks that need a tool this env was not asked for (the browser) are left out
            offered = {"browser"} if browser else set()
            media = {
                kind: Endpoint.of(kind, given) for kind, given in (("vision", vision_model), ("audio", audio_model))
            }
            offered |= {kind for kind, endpoint in media.items() if endpoint is not None}
            tasks = TaskSource(t for t in tasks if t.metadata.get("needs") in (None, *offered))
        self.browser = browser
        self.split = split
        self.data_folder = split_dir(data_dir, split)
        self.media = {"vision_model": vision_model, "audio_model": audio_model}
        servers = self._servers(search, search_docs, python_server, isolation, exec_timeout_s, memory_mb)
        if browser:
            from aworld_gym.envs.browser.env import HIDDEN_ARGUMENTS
            from aworld_gym.envs.gaia.browser import browser_entry, check_navigation, sample_site

            hosts = sample_site(root / "site") if self.sample else None  # http://archive.sample.test/
            servers["browser"] = browser_entry(browser_allow, browser_deny, hosts)
            settings = settings.with_defaults(
                guard=check_navigation,
                hidden_arguments=HIDDEN_ARGUMENTS,
                sequential_calls=True,  # one page: a turn's clicks and typing run in order
                tool_format="compact",  # the Playwright schemas are long (info["tools"] has them)
            )
        extra = parse_mcp_config(mcp_config) if mcp_config is not None else []
        clash = {s.name for s in extra} & set(servers)
        if clash:
            raise ConfigError(f"mcp_config server names {sorted(clash)} clash with GAIA's own servers; rename them")
        config = {"mcpServers": {**servers, **{s.name: _entry(s) for s in extra}}}
        settings = settings.with_defaults(
            system_prompt=SYSTEM_PREAMBLE, reward_hooks=[TaskScore()], tool_timeout=exec_timeout_s + 30.0
        )
        super().__init__(mcp_config=config, tasks=tasks, settings=settings, **kwargs)

    def _servers(
        self,
        search: str | None,
        search_docs: str | Path | None,
        python_server: str,
        isolation: str,
        exec_timeout_s: float,
        memory_mb: int,
    ) -> dict[str, Any]:
        from aworld_gym.envs.gaia import files_server, search_server
        from aworld_gym.sandbox.shared import python_server_entry

        folder = self.data_folder.absolute()  # the attachments' paths are absolute, not symlink-resolved
        files = files_server.build_server(roots=[folder], deny=[folder / n for n in METADATA_NAMES], **self.media)
        servers: dict[str, Any] = {"files": files}
        spec = search if search is not None else (f"local:{search_docs}" if search_docs else "none")
        if spec.startswith("local:"):
            self._check_corpus(Path(spec.removeprefix("local:")).expanduser())
        if spec == "none":
            if search is None:
                warnings.warn(
                    "AWorld/GAIA-v0: no search tool (pass search='tavily'|'serper'|'brave' or search_docs=<folder>)",
                    stacklevel=3,
                )
        else:
            servers["search"] = search_server.build_server(search_server.make_backend(spec))
        servers["python"] = python_server_entry(
            python_server, isolation, exec_timeout_s, memory_mb, file_roots=(str(self.data_folder.resolve()),)
        )
        return servers

    def _check_corpus(self, docs: Path) -> None:
        """An offline search corpus holding the split's folder (or held by it) would search the answer key and
        every task's attachments: refused."""
        docs, data = Path(os.path.realpath(docs)), Path(os.path.realpath(self.data_folder))
        if docs.is_relative_to(data) or data.is_relative_to(docs):
            raise ConfigError(
                f"search_docs {str(docs)!r} overlaps the GAIA data folder {str(data)!r}, which holds the answer key "
                "(metadata.jsonl) and every task's attachments; give the search a folder of documents of its own"
            )

    def work_folders(self) -> list[str]:
        """``roots=["{work}"]`` lists the split's folder: the attachments ``read_file`` and ``run_python`` see."""
        return [str(self.data_folder.resolve())]

    async def acheck_task(self, task: Task, results: list[ToolResult]) -> TaskState | None:
        """The browser's answers as AWorld/Browser-v0 shows them: without the lines naming Playwright's timestamped
        log and snapshot files (escape sequences are already gone: every result passes the hub's sanitiser)."""
        if self.browser:
            from aworld_gym.envs.browser.env import steady

            results[:] = [r.with_text(steady(r.text, "")) if r.server == "browser" else r for r in results]
        return await super().acheck_task(task, results)

    def reset_info(self, task: Task) -> dict[str, Any]:
        return {
            "dataset": SAMPLE_NOTE if self.sample else f"GAIA {self.split} ({self.data_folder})",
            "level": task.metadata.get("level"),
        }

    def render_prompt(self, task: Task) -> str:
        if not task.files:
            return task.prompt
        lines = [task.prompt, ""]
        for f in task.files:
            name = Path(f).name
            mounted = Path(os.path.realpath(f)).name  # the sandbox mounts a linked file under its target's name
            lines.append(
                f"Attached file: {name} (read it with read_file(path={quoted(name)}); inside run_python or run_shell "
                f"it is {quoted(SANDBOX_FILES + mounted)})"
            )
        return "\n".join(lines)

    def score(self, answer: str, task: Task) -> float | None:
        if task.answer is None:
            return None  # the test split hides answers: the answer is recorded, not scored
        return 1.0 if question_scorer(answer, str(task.answer)) else 0.0


def _entry(spec: Any) -> dict[str, Any]:
    """An mcpServers entry back from a parsed ServerSpec (extra servers pass through unchanged)."""
    if spec.type == "inprocess":
        return {"type": "inprocess", "server": spec.server}
    out: dict[str, Any] = {"type": spec.type}
    for key in ("command", "cwd", "url", "timeout", "sse_read_timeout", "reset_tool", "pool", "socket", "tool_prefix"):
        value = getattr(spec, key)
        if value is not None:
            out[key] = value
    if spec.share_session:
        out["share_session"] = True
    if spec.allow_tools is not None:
        out["allow_tools"] = list(spec.allow_tools)
    if spec.args:
        out["args"] = list(spec.args)
    if spec.env:
        out["env"] = dict(spec.env)
    if spec.headers:
        out["headers"] = dict(spec.headers)
    out.update(spec.capabilities)  # its own elicitation / sampling / roots
    if spec.cache is not None:
        out["cache"] = {k: v for k, v in dataclasses.asdict(spec.cache).items() if v is not None}
    return out
