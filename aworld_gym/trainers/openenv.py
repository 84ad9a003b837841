"""Any registered env served over OpenEnv's HTTP/WebSocket protocol (``aworld-gym serve-env``).

OpenEnv (``openenv-core`` 0.3) is the env-as-a-service protocol that TRL, ms-swift (``OpenEnvScheduler``), SkyRL,
Unsloth, ART and Oumi consume: a client opens one WebSocket per episode stream at ``/ws`` and sends
``{"type": "reset", "data": {...}}``, ``{"type": "step", "data": <action>}``, ``{"type": "state"}`` and
``{"type": "close"}``; the server answers ``{"type": "observation", "data": {"observation": {...}, "reward": r,
"done": d}}``, ``{"type": "state", "data": {...}}`` or ``{"type": "error", "data": {"message": ..., "code": ...}}``
(the socket stays open after an error). ``GET /health``, ``GET /schema`` (the action, observation and state JSON
schemas), ``GET /metadata`` and the stateless ``POST /reset`` follow OpenEnv's server (read from its
``openenv/core/env_server/http_server.py``), so OpenEnv's own clients (``GenericEnvClient``) work unchanged.

What this server adds to OpenEnv's:

- **Sessions on the env pool**: each WebSocket session takes an env from one :class:`~aworld_gym.rollout.pool.EnvPool`
  (MCP servers, sandboxes and browsers are started once and reused, never per episode) and gives it back when the
  socket closes; at most ``max_sessions`` sessions at once (one more is told ``CAPACITY_REACHED`` and closed) and at
  most ``max_sessions`` envs alive. A session idle past ``session_timeout`` is told so and its socket closed.
- **The episode as a Trajectory**: each session's episode is recorded by the episode driver's step recorder; with
  ``out=`` every episode (a finished one, or one whose client vanished mid-episode: ``policy_error``, void) is
  written as a JSONL record. An env that raises ends its episode as ``env_error`` (an observation with
  ``status: "void"``), and the session goes on with a fresh env at its next reset.
- **A guarded door** (:mod:`~aworld_gym.base.http_guard`): a browser's ``Origin`` and a foreign ``Host`` are
  refused on every route; a token (``Authorization: Bearer <token>``, or HTTP Basic with the token as the password,
  what OpenEnv's client sends for ``http://user:<token>@host:port``) is generated for any bind that is not loopback
  and required on every route but ``/health``.
- **Clients cannot widen what the env reads**: a client's own ``task`` is refused unless the operator allows client
  tasks, and then its files must lie inside one folder (:class:`~aworld_gym.trainers.openenv_protocol.ClientTasks`).
- **Bounded input**: request bodies and WebSocket messages (``max_message_bytes``), actions (``max_action_chars``),
  ids; stateless ``POST /reset`` counts against ``max_sessions`` like a WebSocket session. Malformed input (invalid
  JSON, wrong types, nesting too deep, binary frames that are not UTF-8) is answered in OpenEnv's error shape and the
  socket stays open; no error repeats more than a cut of a client's value.
- **The event loop stays free**: the envs run on a loop of their own in another thread, so a slow step never holds
  up ``/health``, other sockets' messages or the session cap.

The action is ``{"text": <the model's raw output>}`` (OpenEnv's ``metadata`` is accepted, any other field is
refused); the observation carries ``text`` (the env's observation string), ``messages`` (the chat messages the env
added: the system prompt and task on reset, the tool responses after a step), ``tools`` (on reset), ``task_id``,
``turn``, ``status``, ``termination``, ``reward_components``, ``score`` and ``error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import aworld_gym
from aworld_gym.base.errors import ConfigError
from aworld_gym.base.http_guard import Guard, Refused, cut, read_body, server_token
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.envs import env_factory
from aworld_gym.rollout.pool import EnvPool
from aworld_gym.rollout.sinks import JSONLSink
from aworld_gym.rollout.sinks.sink_files import OutputWriteError
from aworld_gym.rollout.text_episode import TextEpisode, Turn
from aworld_gym.trainers.openenv_protocol import (
    AWorldAction,
    AWorldObservation,
    AWorldState,
    ClientTasks,
    SessionError,
    reset_options,
    wire,
)
from aworld_gym.trainers.seam.env_loop import EnvLoop

logger = logging.getLogger(__name__)

TOKEN_ENV = "AWORLD_GYM_SERVE_TOKEN"
MAX_ACTION_CHARS = 256 * 1024
MAX_MESSAGE_BYTES = 2 * 1024 * 1024
STEP_TIMEOUT_S = 600.0


class Session:
    """One client's episodes, one at a time, on one pooled env (see :class:`~aworld_gym.rollout.text_episode.TextEpisode`)."""

    def __init__(self, server: EnvServer) -> None:
        self.server = server
        self.episode: TextEpisode | None = None
        self.episode_id: str | None = None

    async def reset(self, data: Mapping[str, Any]) -> AWorldObservation:
        seed, options, episode_id = reset_options(data, self.server.client_tasks)
        self.abandon()
        if self.episode is None:
            self.episode = TextEpisode(self.server.pool, self.server.env_id, "openenv", self.server.step_timeout_s)
        turn = await self.episode.start(seed, options)
        traj = self.episode.trajectory
        self.episode_id = episode_id or traj.episode_id
        if turn.error is not None:
            return self._ended(turn)
        return AWorldObservation(text=turn.observation, messages=turn.messages, tools=list(turn.info.get("tools") or []),
                                 task_id=traj.task_id)  # fmt: skip

    async def step(self, data: Any) -> AWorldObservation:
        if not isinstance(data, dict):
            raise SessionError('a step\'s data is the action object, e.g. {"text": "..."}', "VALIDATION_ERROR")
        try:
            action = AWorldAction.model_validate(data)
        except ValidationError as exc:
            where = "; ".join(f"{'.'.join(cut(str(x), 40) for x in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
            raise SessionError(f"invalid action: {where}", "VALIDATION_ERROR") from None
        limit = self.server.max_action_chars
        if len(action.text) > limit:
            raise SessionError(f"the action is {len(action.text)} characters; the limit is {limit} (--max-action-chars)",
                               "VALIDATION_ERROR")  # fmt: skip
        episode = self.episode
        if episode is None or not episode.started:
            raise SessionError("no episode is running: send a reset first")
        if episode.done:
            raise SessionError(f"the episode is over ({episode.trajectory.termination}): send a reset to start another")
        turn = await episode.step(action.text)
        if turn.done:
            return self._ended(turn)
        return AWorldObservation(text=turn.observation, reward=turn.reward, messages=turn.messages,
                                 task_id=episode.trajectory.task_id, turn=episode.trajectory.num_turns,
                                 reward_components=dict(turn.info.get("reward_components") or {}))  # fmt: skip

    def _ended(self, turn: Turn) -> AWorldObservation:
        assert self.episode is not None
        t = self.episode.trajectory
        self.server.write(t)
        return AWorldObservation(text=turn.observation, reward=turn.reward, done=True, messages=turn.messages,
                                 task_id=t.task_id, turn=t.num_turns, status=t.status, termination=t.termination,
                                 reward_components=dict(turn.info.get("reward_components") or {}), score=t.score,
                                 error=turn.error)  # fmt: skip

    async def astate(self) -> AWorldState:
        """:meth:`state` on the env loop (where the episode changes)."""
        return self.state()

    def state(self) -> AWorldState:
        if self.episode is None:
            return AWorldState(env_id=self.server.env_id)
        t = self.episode.trajectory
        return AWorldState(episode_id=self.episode_id, step_count=t.num_turns, env_id=self.server.env_id,
                           task_id=t.task_id, status=t.status if t.done else None, termination=t.termination,
                           reward=t.reward)  # fmt: skip

    def abandon(self) -> None:
        """A running episode the client left (a new reset, or gone): ``policy_error`` (void), recorded."""
        episode = self.episode
        if episode is not None and episode.running:
            episode.end(Termination.POLICY_ERROR, "the client left the episode unfinished (reset or disconnect)")
            self.server.write(episode.trajectory)

    async def close(self) -> None:
        self.abandon()
        if self.episode is not None:
            await self.episode.close()


def answer(body: Mapping[str, Any], status: int = 200, **headers: str) -> Any:
    """A JSON response (ASCII-escaped: a client's lone surrogate cannot break the encoding)."""
    from starlette.responses import Response

    return Response(json.dumps(body, default=str), status_code=status, media_type="application/json",
                    headers=headers or None)  # fmt: skip


class EnvServer:
    """An env id served over OpenEnv's protocol (see the module's docstring).

    Args:
        env_id: a registered id (``AWorld/GAIA-v0``) or a zero-argument env factory.
        env_kwargs: ``gym.make`` keywords.
        max_sessions: sessions (and envs) at once: WebSocket sessions and stateless ``POST /reset`` requests.
        token: required on every route but ``/health`` when set.
        session_timeout: seconds a session may stay silent before it is closed (``None``: never).
        out: a JSONL file every episode's record is appended to.
        host: the address served on (an accepted ``Host`` header besides loopback).
        allowed_origins: web ``Origin`` values accepted (none by default: a browser page is refused).
        allowed_hosts: ``Host`` names accepted besides loopback and ``host`` (checked when there is no token).
        client_tasks: whether a client may bring its own task, and the one folder its files may name.
        max_action_chars: the longest action text a step takes.
        max_message_bytes: the largest request body or WebSocket message.
        step_timeout_s: the longest one reset or step may run (``None``: unbounded); past it the episode ends as
            ``env_error`` (void, recorded) and its env is dropped.
    """

    def __init__(self, env_id: Any, env_kwargs: Mapping[str, Any] | None = None, *, max_sessions: int = 8,
                 token: str | None = None, session_timeout: float | None = None, out: str | Path | None = None,
                 host: str | None = None, allowed_origins: Iterable[str] = (), allowed_hosts: Iterable[str] = (),
                 client_tasks: ClientTasks | None = None, max_action_chars: int = MAX_ACTION_CHARS,
                 max_message_bytes: int = MAX_MESSAGE_BYTES,
                 step_timeout_s: float | None = STEP_TIMEOUT_S) -> None:  # fmt: skip
        if max_sessions < 1:
            raise ConfigError(f"max_sessions must be at least 1, got {max_sessions}")
        if max_action_chars < 1 or max_message_bytes < 1024:
            raise ConfigError(f"max_action_chars must be at least 1 and max_message_bytes at least 1024, got "
                              f"{max_action_chars} and {max_message_bytes}")  # fmt: skip
        if step_timeout_s is not None and not 0 < step_timeout_s < float("inf"):
            raise ConfigError(f"step_timeout_s must be a positive number of seconds, got {step_timeout_s}")
        self.step_timeout_s = step_timeout_s
        self.client_tasks = client_tasks or ClientTasks()
        if self.client_tasks.files_root is not None and not Path(self.client_tasks.files_root).expanduser().is_dir():
            raise ConfigError(f"the client files root {str(self.client_tasks.files_root)!r} is not a folder")
        aworld_gym.register_envs()
        self.env_id = env_id if isinstance(env_id, str) else getattr(env_id, "__qualname__", "env")
        self.pool = EnvPool(env_factory(env_id, env_kwargs), max_idle=max_sessions)
        self.max_sessions, self.session_timeout = max_sessions, session_timeout
        self.guard = Guard(token, host, allowed_origins, allowed_hosts)
        self.max_action_chars, self.max_message_bytes = max_action_chars, max_message_bytes
        self.envs = EnvLoop("aworld-gym-serve-env")
        self.sessions = 0
        self.episodes_written = 0
        # one writer per file, odd values stored, a torn last line repaired; every episode kept (not keyed)
        self._out = JSONLSink(out, resume=True, keyed=False) if out else None

    @property
    def token(self) -> str | None:
        return self.guard.token

    # ----- records -----------------------------------------------------------------------------------------
    def write(self, traj: Trajectory) -> None:
        """Append the episode's record to ``out`` (a failed write, e.g. a full disk, is logged once; the sessions
        go on and the file keeps every whole record written before)."""
        if self._out is None or self._out.failed is not None:
            return
        try:
            self._out.write(traj.to_record())
        except OutputWriteError as exc:
            logger.error("serve-env: %s; episodes are no longer recorded", exc)
            return
        self.episodes_written += 1

    def authorized(self, headers: Mapping[str, str]) -> bool:
        """Whether the headers carry the token (always, when there is none)."""
        return self.guard.authorized(headers)

    def at_capacity(self) -> bool:
        return self.sessions >= self.max_sessions

    def capacity_error(self) -> dict[str, Any]:
        return {"message": f"Server at capacity: {self.sessions}/{self.max_sessions} sessions active. Cannot "
                "accept new connections.", "code": "CAPACITY_REACHED", "active_sessions": self.sessions,
                "max_sessions": self.max_sessions}  # fmt: skip

    # ----- the app -----------------------------------------------------------------------------------------
    def app(self) -> Any:
        """The Starlette ASGI app (serve it with uvicorn, or mount it)."""
        from starlette.applications import Starlette
        from starlette.routing import Route, WebSocketRoute

        def guarded(handler: Any, need_token: bool = True) -> Any:
            async def route(request: Any) -> Any:
                try:
                    self.guard.check(request.headers, need_token)
                except Refused as exc:
                    extra = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
                    return answer({"detail": str(exc)}, exc.status, **extra)
                return await handler(request)

            return route

        async def health(request: Any) -> Any:
            return answer({"status": "healthy", "sessions": self.sessions, "max_sessions": self.max_sessions})

        async def schema(request: Any) -> Any:
            return answer({"action": AWorldAction.model_json_schema(),
                           "observation": AWorldObservation.model_json_schema(),
                           "state": AWorldState.model_json_schema()})  # fmt: skip

        async def metadata(request: Any) -> Any:
            return answer({"name": self.env_id, "description": f"{self.env_id} from aworld-gym: MCP tool "
                           "episodes; the action is the model's raw text", "readme_content": None,
                           "version": aworld_gym.__version__, "author": "aworld-gym",
                           "documentation_url": None})  # fmt: skip

        async def http_reset(request: Any) -> Any:
            # OpenEnv's HTTP routes are stateless (a fresh env per request): reset shows the first observation.
            try:
                body = await read_body(request, self.max_message_bytes)
            except Refused as exc:
                return answer({"detail": str(exc), "code": "VALIDATION_ERROR"}, exc.status)
            try:
                data = json_message(body) if body else {}
                if not isinstance(data, dict):
                    raise SessionError("the body is a JSON object", "VALIDATION_ERROR")
            except SessionError as exc:
                return answer({"detail": str(exc), "code": exc.code}, 422)
            if self.at_capacity():
                error = self.capacity_error()
                return answer({"detail": error.pop("message"), **error}, 503)
            self.sessions += 1
            try:
                obs = await self.envs.run(self._stateless_reset(data))
            except SessionError as exc:
                return answer({"detail": str(exc), "code": exc.code}, 422)
            except Exception:  # the boundary: a bug is logged, the client gets a short answer
                logger.exception("POST /reset failed")
                return answer({"detail": "the server failed on this request", "code": "EXECUTION_ERROR"}, 500)
            finally:
                self.sessions -= 1
            return answer(wire(obs))

        async def http_step(request: Any) -> Any:
            return answer({"detail": "an AWorld episode keeps state between steps: step it over the WebSocket at "
                           "/ws (OpenEnv's HTTP /step runs on a fresh env)"}, 409)  # fmt: skip

        async def http_state(request: Any) -> Any:
            return answer(AWorldState(env_id=self.env_id).model_dump())

        async def mcp(request: Any) -> Any:
            return answer({"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message":
                           "Environment does not support MCP", "data": None}})  # fmt: skip

        routes = [
            Route("/health", guarded(health, need_token=False), methods=["GET"]),
            Route("/schema", guarded(schema), methods=["GET"]),
            Route("/metadata", guarded(metadata), methods=["GET"]),
            Route("/reset", guarded(http_reset), methods=["POST"]),
            Route("/step", guarded(http_step), methods=["POST"]),
            Route("/state", guarded(http_state), methods=["GET"]),
            Route("/mcp", guarded(mcp), methods=["POST"]),
            WebSocketRoute("/ws", self.websocket),
        ]

        @contextlib.asynccontextmanager
        async def lifespan(app: Any) -> Any:
            yield
            await self.aclose()

        return Starlette(routes=routes, lifespan=lifespan)

    async def _stateless_reset(self, data: dict[str, Any]) -> AWorldObservation:
        session = Session(self)
        try:
            return await session.reset(data)
        finally:
            if session.episode is not None:  # not an episode anyone will finish: nothing to record
                await session.episode.close()

    async def websocket(self, ws: Any) -> None:
        try:
            self.guard.check(ws.headers)
        except Refused as exc:
            await ws.close(code=1008, reason=str(exc)[:120])
            return
        await ws.accept()
        if self.at_capacity():
            await self._error(ws, **self.capacity_error())
            with contextlib.suppress(Exception):
                await ws.close(code=1000)
            return
        self.sessions += 1
        session = Session(self)
        try:
            await self._serve(ws, session)
        finally:
            self.sessions -= 1
            await self.envs.run(session.close())

    async def _serve(self, ws: Any, session: Session) -> None:
        while True:
            try:
                frame = await asyncio.wait_for(ws.receive(), self.session_timeout)
            except TimeoutError:
                await self._error(ws, f"the session was idle for {self.session_timeout:g} s and is closed",
                                  "SESSION_ERROR")  # fmt: skip
                with contextlib.suppress(Exception):
                    await ws.close(code=1000)
                return
            except RuntimeError:
                return  # the client went away
            if frame.get("type") == "websocket.disconnect":
                return
            try:
                reply = await self._answer(session, self._decode(frame))
            except SessionError as exc:
                await self._error(ws, str(exc), exc.code)
                continue
            except Exception:  # the boundary: a bug is logged, the session goes on
                logger.exception("serve-env: a message failed")
                await self._error(ws, "the server failed on this message", "EXECUTION_ERROR")
                continue
            if reply is None:
                return
            try:
                await ws.send_text(json.dumps(reply, default=str))
            except Exception:  # noqa: BLE001 - the client went away while the step ran
                return

    def _decode(self, frame: Mapping[str, Any]) -> Any:
        """A frame's JSON message (text, or a binary frame holding UTF-8 text), bounded in size and depth."""
        raw = frame.get("text")
        if raw is None:
            data = frame.get("bytes") or b""
            try:
                raw = data.decode("utf-8")
            except UnicodeDecodeError:
                raise SessionError("a binary frame that is not UTF-8 text: send JSON as text", "INVALID_JSON") from None
        if len(raw) > self.max_message_bytes:
            raise SessionError(f"the message is over {self.max_message_bytes} bytes (--max-message-bytes)",
                               "VALIDATION_ERROR")  # fmt: skip
        return json_message(raw)

    async def _answer(self, session: Session, msg: Any) -> dict[str, Any] | None:
        """The reply to one message (``None``: the client closed the session)."""
        kind = msg.get("type") if isinstance(msg, dict) else None
        if kind == "reset":
            data = msg.get("data")
            if data is None:
                data = {}
            if not isinstance(data, dict):
                raise SessionError(f"a reset's data is an object, got {cut(data)}", "VALIDATION_ERROR")
            return {"type": "observation", "data": wire(await self.envs.run(session.reset(data)))}
        if kind == "step":
            return {"type": "observation", "data": wire(await self.envs.run(session.step(msg.get("data"))))}
        if kind == "state":
            return {"type": "state", "data": (await self.envs.run(session.astate())).model_dump()}
        if kind == "close":
            return None
        raise SessionError(f"Unknown message type: {cut(kind)} (reset, step, state, close)", "UNKNOWN_TYPE")

    @staticmethod
    async def _error(ws: Any, message: str, code: str, **extra: Any) -> None:
        with contextlib.suppress(Exception):
            await ws.send_text(json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}}))

    def uvicorn_config(self, host: str = "127.0.0.1", port: int = 8000, log_level: str = "warning") -> Any:
        """uvicorn's config for this server's app, with the WebSocket message bound (``max_message_bytes``)."""
        import uvicorn

        return uvicorn.Config(self.app(), host=host, port=port, log_level=log_level,
                              ws_max_size=self.max_message_bytes)  # fmt: skip

    async def aclose(self) -> None:
        """Close every idle env (their servers stop), the env loop and the record file."""
        await self.envs.run(self.pool.aclose())
        self.envs.stop()
        if self._out is not None:
            self._out.close()
            self._out = None


def json_message(raw: str | bytes) -> Any:
    """Parse a client's JSON; a :class:`SessionError` (``INVALID_JSON``) for invalid text, bytes that are not UTF-8,
    or nesting too deep to parse."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise SessionError("Invalid JSON: nested too deeply", "INVALID_JSON") from None
    except UnicodeDecodeError:
        raise SessionError("Invalid JSON: not UTF-8", "INVALID_JSON") from None
    except ValueError as exc:
        raise SessionError(f"Invalid JSON: {str(exc)[:200]}", "INVALID_JSON") from None


def serve(env_id: str, *, host: str = "127.0.0.1", port: int = 8000, env_kwargs: Mapping[str, Any] | None = None,
          max_sessions: int = 8, token: str | None = None, generate_token: bool = False,
          session_timeout: float | None = None, out: str | Path | None = None, log_level: str = "warning",
          allowed_origins: Iterable[str] = (), allowed_hosts: Iterable[str] = (),
          client_tasks: ClientTasks | None = None, max_action_chars: int = MAX_ACTION_CHARS,
          max_message_bytes: int = MAX_MESSAGE_BYTES, step_timeout_s: float | None = STEP_TIMEOUT_S) -> None:  # fmt: skip
    """Serve ``env_id`` until interrupted (see :class:`EnvServer` for the arguments). The token is ``token=``, else
    ``$AWORLD_GYM_SERVE_TOKEN``, else, for a host that is not loopback (or with ``generate_token``), a new one. On
    start it prints to stderr where it serves, the token's use (a generated token itself) and a command that plays
    an episode (:func:`connect_help`)."""
    import uvicorn

    token, generated = server_token(host, token or os.environ.get(TOKEN_ENV), generate_token)
    server = EnvServer(env_id, env_kwargs, max_sessions=max_sessions, token=token, session_timeout=session_timeout,
                       out=out, host=host, allowed_origins=allowed_origins, allowed_hosts=allowed_hosts,
                       client_tasks=client_tasks, max_action_chars=max_action_chars,
                       max_message_bytes=max_message_bytes, step_timeout_s=step_timeout_s)  # fmt: skip
    print(connect_help(env_id, host, port, token if generated else None, token is not None), file=sys.stderr,
          flush=True)  # fmt: skip
    uvicorn.Server(server.uvicorn_config(host, port, log_level)).run()


def connect_help(env_id: str, host: str, port: int, new_token: str | None, token_required: bool) -> str:
    """What ``serve-env`` prints on start: where it serves, the token a client needs (``new_token``: a generated one,
    printed once; a token the operator gave is named, not printed) and one command that plays an episode."""
    shown = "<this-host>" if host in ("0.0.0.0", "::", "") else f"[{host}]" if ":" in host else host
    auth = "aworld:<token>@" if token_required else ""
    lines = [f"serve-env: {env_id} at http://{shown}:{port} (OpenEnv protocol: an episode per WebSocket at "
             f"ws://{shown}:{port}/ws; GET /health, /schema, /metadata; POST /reset)"]  # fmt: skip
    if new_token is not None:
        lines.append(f"serve-env token: {new_token}")
    if token_required:
        given = "the one above" if new_token is not None else "the one given with --token / $" + TOKEN_ENV
        lines.append(f"serve-env: every route but /health needs the token ({given}): send 'Authorization: Bearer "
                     f"<token>', or use http://aworld:<token>@{shown}:{port}")  # fmt: skip
    lines.append(f"serve-env: play an episode: python -m websockets ws://{auth}{shown}:{port}/ws, then send "
                 '{"type": "reset", "data": {}} and {"type": "step", "data": {"text": "<the model\'s output>"}} '
                 "(docs/training.md, serve-env)")  # fmt: skip
    return "\n".join(lines)
