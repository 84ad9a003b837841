"""AWorld/Browser-v0: MiniWoB++ tasks in a real headless Chromium, driven through the official Playwright MCP server.

The agent sees the task's instruction and an accessibility snapshot of the page, and acts with an allow-list of Playwright
MCP tools (no JavaScript, files or tabs). The env itself opens the page, seeds and starts the task, and after
each step reads the page's done flag and raw reward with JavaScript (a tool the agent never sees).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import re
import secrets
import shutil
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, SupportsFloat
from urllib.parse import urlsplit

from aworld_gym.base.errors import ConfigError, ServerError
from aworld_gym.core.env import MCPEnv, TaskState
from aworld_gym.core.settings import Settings
from aworld_gym.core.task import Task
from aworld_gym.envs.browser.answers import as_timeout, steady
from aworld_gym.envs.browser.answers import result_json as _result_json
from aworld_gym.envs.browser.answers import sections as _sections
from aworld_gym.envs.browser.answers import text_of as _text
from aworld_gym.envs.browser.browsers import active_cap, admission, browser_pool, contexts_cap
from aworld_gym.envs.browser.observe import OBS_MODES, SCREENSHOT_CODE, Element, draw_marks, split_boxes
from aworld_gym.envs.browser.page_js import NAME_CLICKABLE_JS
from aworld_gym.envs.browser.playwright import own_browser_entry
from aworld_gym.envs.browser.tasks import miniwob_tasks, shared_pages
from aworld_gym.mcp.results import SERVER_DIED, TIMEOUT, ToolResult

# What the agent may call. Not exposed: browser_evaluate / browser_run_code_unsafe (JavaScript),
# browser_file_upload / browser_drop (files), browser_tabs (new tabs at any URL), screenshots, network and
# console logs, storage and cookies, browser_close / browser_resize, and the coordinate tools of the "vision"
# capability (mouse_click_xy, ...) except the wheel: scrolling by an amount.
AGENT_TOOLS = (
    "browser_navigate",
    "browser_navigate_back",
    "browser_mouse_wheel",
    "browser_snapshot",
    "browser_click",
    "browser_type",
    "browser_fill_form",
    "browser_select_option",
    "browser_press_key",
    "browser_hover",
    "browser_drag",
    "browser_wait_for",
)
SCREENSHOT_TOOLS = ("browser_mouse_click_xy",)  # coordinate clicks: only where the agent sees the pixels
TAB_TOOLS = ("browser_tabs",)  # with tabs=True; a new tab's URL is checked like a navigation
HIDDEN_ARGUMENTS = {"browser_snapshot": ["filename", "boxes"]}  # a file; boxes come with element_boxes=True

SYSTEM_PREAMBLE = (
    "You operate a web browser to complete the task shown on a web page. Act with the browser tools, one call per "
    "turn; refer to elements by the ref=... ids of the latest snapshot (a CSS selector works too). After each "
    "action you get the page as it is now. The task ends by itself when you complete it, or fail it."
)
SCREENSHOT_PREAMBLE = (
    "You operate a web browser to complete the task shown on a web page. Act with the browser tools, one call per "
    "turn. You see the page as a screenshot of 640x480 CSS pixels{marks}. browser_mouse_click_xy clicks at x, y "
    "pixels of the screenshot. After each action you get the page as it is now. The task ends by itself when you "
    "complete it, or fail it."
)
MARKS_NOTE = (
    ", on which each element you can act on is outlined and labelled with its ref (e5): pass that ref to the tools "
    "(browser_click, browser_type, ...)"
)

# Seed the page's generator, give it a long timer, start the task, mark the page as this episode's. The harness's
# reward/timer widget is hidden: it is not part of the task, and its ticking clock would make observations vary.
_START_JS = """async () => {
  for (let i = 0; i < 200 && (document.readyState !== 'complete' || !core.cover_div); i++)
    await new Promise(r => setTimeout(r, 25));
  Math.seedrandom(%(seed)d);
  core.EPISODE_MAX_TIME = %(ms)d;
  core.startEpisodeReal();
  const display = document.getElementById('reward-display');
  if (display) display.style.display = 'none';
  for (let i = 0; i < 100 && !WOB_TASK_READY; i++) await new Promise(r => setTimeout(r, 50));
  window.__aworld_episode = %(episode)s;
  return {ready: WOB_TASK_READY, utterance: core.getUtterance()};
}"""
_STATE_JS = """() => {
  const g = (name) => (typeof window[name] === 'undefined' ? null : window[name]);
  return {episode: g('__aworld_episode'), url: location.href, done: g('WOB_DONE_GLOBAL'),
          raw_reward: g('WOB_RAW_REWARD_GLOBAL'), reward: g('WOB_REWARD_GLOBAL'), reason: g('WOB_REWARD_REASON')};
}"""


class BrowserEnv(MCPEnv):
    """MiniWoB++ web tasks through ``@playwright/mcp`` on the system Chromium.

    Args:
        tasks: task names (``None``: all ~125 single-page tasks the ``miniwob`` package ships).
        task: pin one task (``"click-button"``); the same as ``tasks=["click-button"]``.
        browser: ``"shared"`` (Playwright MCP servers with one Chromium each, shared by the envs of this process, an
            isolated browser context per env) or ``"own"`` (a Playwright MCP server with its own Chromium for this env).
        contexts_per_browser: in shared mode, the envs one browser holds at most; more envs start more browsers
            (``None``: ``$AWORLD_GYM_BROWSER_CONTEXTS``, else 32).
        active_browsers: how many Browser-v0 envs of this process may drive their browser at once (a reset, a
            step); the others wait for a turn in the driver, where no browser timeout runs (``None``:
            ``$AWORLD_GYM_BROWSER_ACTIVE``, else 4 per CPU).
        time_limit_s: the page's own episode timer (MiniWoB++'s default is 10 s, too short for a model).
        settle_ms: how long Playwright waits after an action for the page to settle.
        snapshot_after_step: append the page's snapshot to each step's observation (unless the step's last
            call was ``browser_snapshot``).
        obs_mode: ``"text"`` (the accessibility snapshot), ``"screenshot"`` (a PNG of the viewport instead) or
            ``"screenshot+text"`` (both). Images go into the message history as image parts and into
            ``info["images"]`` as PNG bytes; the observation string stays text. Screenshot modes add the
            coordinate click ``browser_mouse_click_xy``.
        set_of_marks: outline and label every actionable element with its ref on the screenshot (screenshot modes).
        element_boxes: ``info["elements"]`` at reset and after each step: the elements with refs, their role,
            name and box ``[x, y, width, height]`` in viewport CSS pixels (the screenshot's pixels).
        tabs: expose ``browser_tabs`` (list, open, select, close tabs; a new tab may open only the task's site).
        render_mode: ``"rgb_array"`` (a screenshot as a numpy array), ``"ansi"`` or ``"human"``.
        **kwargs: everything :class:`MCPEnv` takes (``max_turns``, ``reward_hooks``, ...).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        tasks: str | Sequence[str] | None = None,
        *,
        task: str | None = None,
        browser: str = "shared",
        contexts_per_browser: int | None = None,
        active_browsers: int | None = None,
        time_limit_s: float = 600.0,
        settle_ms: int = 150,
        snapshot_after_step: bool = True,
        obs_mode: str = "text",
        set_of_marks: bool = False,
        element_boxes: bool = False,
        tabs: bool = False,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        for key in ("mcp_config", "servers"):
            if key in kwargs:
                raise ConfigError(f"AWorld/Browser-v0 defines its own {key!r}; use AWorld/MCP-v0 for custom tools")
        if browser not in ("shared", "own"):
            raise ConfigError("browser must be 'shared' or 'own'")
        if time_limit_s <= 0:
            raise ConfigError("time_limit_s must be positive")
        if obs_mode not in OBS_MODES:
            raise ConfigError(f"obs_mode must be one of {OBS_MODES}, not {obs_mode!r}")
        if set_of_marks and obs_mode == "text":
            raise ConfigError("set_of_marks labels a screenshot: use obs_mode='screenshot' or 'screenshot+text'")
        settings = Settings.take("AWorld/Browser-v0", kwargs)
        marks = MARKS_NOTE if set_of_marks else ""
        tools = AGENT_TOOLS + (SCREENSHOT_TOOLS if obs_mode != "text" else ()) + (TAB_TOOLS if tabs else ())
        settings = settings.fixed(  # before any resource is held: a refused setting leaks nothing
            "AWorld/Browser-v0",
            scorer=None,
            allow_tools=tools,
            guard=self._guard,
            hidden_arguments=HIDDEN_ARGUMENTS,
            sequential_calls=True,  # one page: a turn's calls (type, type, click) run in the order given
        ).with_defaults(
            system_prompt=SCREENSHOT_PREAMBLE.format(marks=marks) if obs_mode != "text" else SYSTEM_PREAMBLE,
            tool_format="compact",  # the Playwright schemas are long; info["tools"] keeps them
            tool_timeout=60.0,
        )
        self.obs_mode, self.set_of_marks, self.element_boxes, self.tabs = obs_mode, set_of_marks, element_boxes, tabs
        self.image_observations = obs_mode != "text"
        self.elements: list[Element] = []
        self._intro_images: list[bytes] = []
        source = miniwob_tasks(task if task is not None else tasks)
        self.time_limit_s = time_limit_s
        self.snapshot_after_step = snapshot_after_step
        self.utterance = ""
        self.page_url = ""
        self._intro = ""
        self._episode_key = ""
        self._output_dir: str | None = None
        self._fresh_session = False  # an infrastructure failure: the next reset opens a new browser session
        cap = contexts_cap(contexts_per_browser)
        self.admission = admission(active_cap(active_browsers))
        self._admitted = False
        self.pages = self.hold(shared_pages()).rstrip("/")  # http://127.0.0.1:<port>/<token>
        self.origin = "{0.scheme}://{0.netloc}".format(urlsplit(self.pages))
        try:
            if browser == "shared":
                entry: Any = browser_pool(self.origin, settle_ms).checkout(self._holdings, cap)
            else:
                entry, self._output_dir = own_browser_entry(self.origin, settle_ms)
        except BaseException:
            self._failed_init()  # releases the page server taken above
            raise
        super().__init__(
            mcp_config={"mcpServers": {"browser": entry}},
            tasks=source,
            settings=settings,
            render_mode=render_mode,
            **kwargs,
        )

    # ----- MCPEnv hooks ----------------------------------------------------------------------------------
    async def abegin_task(self, task: Task) -> None:
        if task.metadata.get("page") is None:
            raise ConfigError(f"{task.id!r} is not a MiniWoB++ task of AWorld/Browser-v0 (no page to open)")
        seed = int(self.np_random.integers(2**31))  # the page's seed: drawn once, a second try opens the same task
        if self._admitted:  # the sync reset holds this env's slot
            return await self._begin(task, seed)
        async with self.admission.ahold():
            await self._begin(task, seed)

    async def _begin(self, task: Task, seed: int) -> None:
        for attempt in range(2):  # the first call after a browser crash may fail while Playwright relaunches it
            if self._fresh_session or attempt:
                await self._new_session()
            try:
                await self._open(task, seed, fresh=self._fresh_session or attempt > 0)
                break
            except ServerError:
                self._fresh_session = True
                if attempt:
                    raise
        self._fresh_session = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        with self.admission.hold():  # waits in this thread: outside the hub's call timeout, before any browser clock
            self._admitted = True
            try:
                return super().reset(seed=seed, options=options)
            finally:
                self._admitted = False

    def step(self, action: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        with self.admission.hold():
            return super().step(action)

    async def astep(self, action: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        async with self.admission.ahold():
            return await super().astep(action)

    def render_prompt(self, task: Task) -> str:
        # The instruction once (the page shows it at its top); the page by its path, not its run-dependent URL.
        if self.obs_mode == "screenshot":
            return f"Your task is on the page {task.metadata['page']}: {self.utterance}\nThe screenshot shows the page."
        return f"Your task is at the top of the page {task.metadata['page']}, which shows:\n{self._intro}"

    def prompt_images(self, task: Task) -> list[bytes]:
        return self._intro_images

    def reset_info(self, task: Task) -> dict[str, Any]:
        return {"elements": [e.to_dict() for e in self.elements]} if self.element_boxes else {}

    async def acheck_task(self, task: Task, results: list[ToolResult]) -> TaskState | None:
        # what the agent sees is the same for the same seed and actions, run after run: copies without run-dependent
        # text are what the step shows and records (the hub's results are not changed)
        results[:] = [r.with_text(steady(r.text, self.pages)) for r in results]
        results[:] = [as_timeout(r) for r in results]  # a browser too slow to act: infrastructure, not the model
        if any(r.error in (TIMEOUT, SERVER_DIED) for r in results):
            self._fresh_session = True  # a page that hangs, a server that died: this session is not trusted again
            if self.truncate_on_infra_error:
                return None  # the step ends the episode on it (tool_timeout / env_crash): no wait on a hung page
        try:
            state = await self._read_state()
        except ServerError as exc:
            self._fresh_session = True
            return TaskState(crash=f"the browser failed: {exc}")
        if state.get("episode") != self._episode_key and self.tabs and await self._tab_count() > 1:
            note = "This tab is not the task's page: the task goes on in its own tab (browser_tabs, action select)."
            return TaskState(note=note, info=state)
        if state.get("episode") != self._episode_key:
            went_back = any(r.call.name == "browser_navigate_back" and not r.is_error for r in results)
            if went_back or str(state.get("url", "")).startswith(self.origin + "/"):  # navigation, reload, submit
                note = "You left the task's page (or reloaded it): the task is over."
                return TaskState(done=True, score=0.0, note=note, info=state)
            self._fresh_session = True
            return TaskState(crash="the task's page was lost (the browser was restarted)", info=state)
        if state.get("done"):
            return TaskState(done=True, score=float(state.get("raw_reward") or 0.0), info=state)
        text_wanted = self.obs_mode != "screenshot" and self.snapshot_after_step
        text_wanted = text_wanted and results[-1].call.name != "browser_snapshot"
        if not (text_wanted or self.image_observations or self.element_boxes):
            return TaskState(info=state)
        try:
            text, images = await self._observe(text_wanted)
        except ServerError as exc:
            self._fresh_session = True
            return TaskState(crash=f"the browser failed: {exc}", info=state)
        note = "The page now:\n" + text if text else "The screenshot shows the page now." if images else ""
        step_info = {"elements": [e.to_dict() for e in self.elements]} if self.element_boxes else {}
        return TaskState(note=note, info=state, images=images, step_info=step_info)

    def score(self, answer: str, task: Task) -> float:
        return 0.0  # a MiniWoB++ task is scored by its page; an answer without finishing it scores nothing

    def render(self) -> Any:
        if self.render_mode != "rgb_array":
            return super().render()
        return self.hub.run_sync(self.ascreenshot())

    async def ascreenshot(self) -> Any:
        """The page as an RGB ``numpy`` array (height x width x 3, uint8)."""
        import numpy as np
        from PIL import Image

        with Image.open(io.BytesIO(await self._screenshot_png())) as image:
            return np.asarray(image.convert("RGB"))

    def release(self) -> None:
        if self._output_dir:
            shutil.rmtree(self._output_dir, ignore_errors=True)
            self._output_dir = None

    # ----- internals -------------------------------------------------------------------------------------
    def _guard(self, tool: str, arguments: Mapping[str, Any]) -> str | None:
        if tool == "browser_tabs" and arguments.get("url"):
            tool = "browser_navigate"  # a new tab at a URL is a navigation
        if tool != "browser_navigate":
            return None
        url = str(arguments.get("url", ""))
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" != self.origin or parts.username or parts.password:
            return (
                f"navigation to {url[:200]!r} is refused: only pages of the task's site ({self.origin}/) may be opened"
            )
        return None

    async def _new_session(self) -> None:
        """After an infrastructure failure (a crashed or hung page, a dead browser or server): drop this env's MCP
        session (the server closes its browser context, a hung page's renderer with it) and kill what a dead
        browser left behind; the next call opens a new session, on a new browser if the old one is gone."""
        self.hub.reconnect("browser")
        server = self.local_server("browser")
        if server is not None:  # shared: restart the server if it died, then reap
            await asyncio.to_thread(self._check_resources)
            await asyncio.to_thread(server.reap_orphans)
            server.keep()

    async def _open(self, task: Task, seed: int, fresh: bool = False) -> None:
        self.page_url = f"{self.pages}/{task.metadata['page']}"
        # A fresh browser context per episode: nothing (cookies, storage, history) carries over, and the
        # snapshot refs start again at e1, so a seeded reset gives the same observation. (A new session has one.)
        server = self.local_server("browser")
        if server is not None:  # shared: a browser that died since (and was relaunched) gets the keeper's context
            server.keep(force=False)
        if not fresh:
            with contextlib.suppress(ServerError):
                await self.hub.acall_internal("browser_close", {})
        opened = await self.hub.acall_internal("browser_navigate", {"url": self.page_url})
        if opened.is_error:
            raise ServerError(f"could not open {self.page_url}: {_text(opened)[:300]}")
        self._episode_key = secrets.token_hex(8)
        script = _START_JS % {
            "seed": seed,
            "ms": int(self.time_limit_s * 1000),
            "episode": json.dumps(self._episode_key),
        }
        started = _result_json(await self.hub.acall_internal("browser_evaluate", {"function": script}))
        if not started.get("ready"):
            raise ServerError(f"the task {task.id!r} did not become ready")
        self.utterance = str(started.get("utterance", ""))
        self._intro, self._intro_images = await self._observe(self.obs_mode != "screenshot")

    async def _tab_count(self) -> int:
        listed = await self.hub.acall_internal("browser_tabs", {"action": "list"})
        return len(re.findall(r"^- \d+:", _text(listed), re.M))

    async def _read_state(self) -> dict[str, Any]:
        return _result_json(await self.hub.acall_internal("browser_evaluate", {"function": _STATE_JS}))

    async def _observe(self, text_wanted: bool) -> tuple[str, list[bytes]]:
        """The page as this mode shows it: the snapshot's text (if wanted) and the screenshot (screenshot modes,
        labelled with set-of-marks); ``self.elements`` gets the boxes when marks or boxes are asked for."""
        boxes = self.set_of_marks or self.element_boxes
        text = ""
        if text_wanted or boxes:
            text, self.elements = split_boxes(await self._snapshot(boxes))
        images: list[bytes] = []
        if self.image_observations:
            png = await self._screenshot_png()
            images = [draw_marks(png, self.elements) if self.set_of_marks else png]
        return (text if text_wanted else ""), images

    async def _snapshot(self, boxes: bool = False) -> str:
        # every element the page made clickable gets a role, and so a ref in the snapshot
        with contextlib.suppress(ServerError):
            await self.hub.acall_internal("browser_evaluate", {"function": NAME_CLICKABLE_JS})
        result = await self.hub.acall_internal("browser_snapshot", {"boxes": True} if boxes else {})
        if result.is_error:
            raise ServerError(f"no snapshot: {_text(result)[:300]}")
        body = steady(_sections(_text(result)).get("Snapshot", "").strip(), self.pages)
        return body or "(empty page)"

    async def _screenshot_png(self) -> bytes:
        result = await self.hub.acall_internal("browser_run_code_unsafe", {"code": SCREENSHOT_CODE})
        body = _sections(_text(result)).get("Result", "").strip()
        try:
            if result.is_error:
                raise ValueError(body)
            return base64.b64decode(json.loads(body), validate=True)
        except (ValueError, TypeError) as exc:
            raise ServerError(f"no screenshot: {_text(result)[:300]}") from exc
