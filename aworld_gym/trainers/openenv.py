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
- **A token** for anything not on loopback: ``Authorization: Bearer <token>``, or HTTP Basic with the token as the
  password (what OpenEnv's client sends for ``http://user:<token>@host:port``). ``/health`` stays open.

The action is ``{"text": <the model's raw output>}`` (OpenEnv's ``metadata`` is accepted, any other field is
refused); the observation carries ``text`` (the env's observation string), ``messages`` (the chat messages the env
added: the system prompt and task on reset, the tool responses after a step), ``tools`` (on reset), ``task_id``,
``turn``, ``status``, ``termination``, ``reward_components``, ``score`` and ``error``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import ipaddress
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import aworld_gym
from aworld_gym.core.errors import ConfigError
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.envs import env_factory
from aworld_gym.rollout.pool import EnvPool
from aworld_gym.rollout.text_episode import TextEpisode, Turn
from aworld_gym.trainers.openenv_protocol import (
    AWorldAction,
    AWorldObservation,
    AWorldState,
    SessionError,
    reset_options,
    wire,
)

logger = logging.getLogger(__name__)

TOKEN_ENV = "AWORLD_GYM_SERVE_TOKEN"


class Session:
    """One client's episodes, one at a time, on one pooled env (see :class:`~aworld_gym.rollout.text_episode.TextEpisode`)."""

    def __init__(self, server: EnvServer) -> None:
        self.server = server
        self.episode: TextEpisode | None = None
        self.episode_id: str | None = None

    async def reset(self, data: Mapping[str, Any]) -> AWorldObservation:
        seed, options, episode_id = reset_options(data)
        self.abandon()
        if self.episode is None:
            self.episode = TextEpisode(self.server.pool, self.server.env_id, "openenv")
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
            raise SessionError(f"invalid action: {exc.errors(include_url=False)}", "VALIDATION_ERROR") from None
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


class EnvServer:
    """An env id served over OpenEnv's protocol (see the module's docstring).

    Args:
        env_id: a registered id (``AWorld/GAIA-v0``) or a zero-argument env factory.
        env_kwargs: ``gym.make`` keywords.
        max_sessions: WebSocket sessions (and envs) at once.
        token: required on every route but ``/health`` when set.
        session_timeout: seconds a session may stay silent before it is closed (``None``: never).
        out: a JSONL file every episode's record is appended to.
    """

    def __init__(self, env_id: Any, env_kwargs: Mapping[str, Any] | None = None, *, max_sessions: int = 8,
                 token: str | None = None, session_timeout: float | None = None,
                 out: str | Path | None = None) -> None:  # fmt: skip
        if max_sessions < 1:
            raise ConfigError(f"max_sessions must be at least 1, got {max_sessions}")
        aworld_gym.register_envs()
        self.env_id = env_id if isinstance(env_id, str) else getattr(env_id, "__qualname__", "env")
        self.pool = EnvPool(env_factory(env_id, env_kwargs), max_idle=max_sessions)
        self.max_sessions, self.token, self.session_timeout = max_sessions, token or None, session_timeout
        self.sessions = 0
        self.episodes_written = 0
        self._out = open(out, "a", encoding="utf-8") if out else None  # noqa: SIM115 - closed in aclose

    # ----- records -----------------------------------------------------------------------------------------
    def write(self, traj: Trajectory) -> None:
        if self._out is not None:
            self._out.write(json.dumps(traj.to_record(), default=str) + "\n")
            self._out.flush()
            self.episodes_written += 1

    # ----- auth --------------------------------------------------------------------------------------------
    def authorized(self, headers: Mapping[str, str]) -> bool:
        if self.token is None:
            return True
        value = headers.get("authorization", "")
        scheme, _, cred = value.partition(" ")
        if scheme.lower() == "bearer":
            given = cred.strip()
        elif scheme.lower() == "basic":
            try:
                given = base64.b64decode(cred.strip()).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError):
                return False
        else:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    # ----- the app -----------------------------------------------------------------------------------------
    def app(self) -> Any:
        """The Starlette ASGI app (serve it with uvicorn, or mount it)."""
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse
        from starlette.routing import Route, WebSocketRoute

        def guarded(handler: Any) -> Any:
            async def route(request: Any) -> Any:
                if not self.authorized(request.headers):
                    return JSONResponse({"detail": "missing or wrong token"}, status_code=401,
                                        headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
                return await handler(request)

            return route

        async def health(request: Any) -> Any:
            return JSONResponse({"status": "healthy", "sessions": self.sessions, "max_sessions": self.max_sessions})

        async def schema(request: Any) -> Any:
            return JSONResponse({"action": AWorldAction.model_json_schema(),
                                 "observation": AWorldObservation.model_json_schema(),
                                 "state": AWorldState.model_json_schema()})  # fmt: skip

        async def metadata(request: Any) -> Any:
            return JSONResponse({"name": self.env_id, "description": f"{self.env_id} from aworld-gym: MCP tool "
                                 "episodes; the action is the model's raw text", "readme_content": None,
                                 "version": aworld_gym.__version__, "author": "aworld-gym",
                                 "documentation_url": None})  # fmt: skip

        async def http_reset(request: Any) -> Any:
            # OpenEnv's HTTP routes are stateless (a fresh env per request): reset shows the first observation.
            body = await request.body()
            try:
                data = json.loads(body) if body else {}
                if not isinstance(data, dict):
                    raise SessionError("the body is a JSON object", "VALIDATION_ERROR")
                session = Session(self)
                try:
                    obs = await session.reset(data)
                finally:
                    if session.episode is not None:  # not an episode anyone will finish: nothing to record
                        await session.episode.close()
            except (json.JSONDecodeError, SessionError) as exc:
                return JSONResponse({"detail": str(exc)}, status_code=422)
            return JSONResponse(wire(obs))

        async def http_step(request: Any) -> Any:
            return JSONResponse({"detail": "an AWorld episode keeps state between steps: step it over the "
                                 "WebSocket at /ws (OpenEnv's HTTP /step runs on a fresh env)"}, status_code=409)  # fmt: skip

        async def http_state(request: Any) -> Any:
            return JSONResponse(AWorldState(env_id=self.env_id).model_dump())

        async def mcp(request: Any) -> Any:
            return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message":
                                 "Environment does not support MCP", "data": None}})  # fmt: skip

        routes = [
            Route("/health", health, methods=["GET"]),
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

    async def websocket(self, ws: Any) -> None:
        if not self.authorized(ws.headers):
            await ws.close(code=1008, reason="missing or wrong token")
            return
        await ws.accept()
        if self.sessions >= self.max_sessions:
            await self._error(ws, f"Server at capacity: {self.sessions}/{self.max_sessions} sessions active. Cannot "
                              "accept new connections.", "CAPACITY_REACHED", active_sessions=self.sessions,
                              max_sessions=self.max_sessions)  # fmt: skip
            with contextlib.suppress(Exception):
                await ws.close(code=1000)
            return
        self.sessions += 1
        session = Session(self)
        try:
            await self._serve(ws, session)
        finally:
            self.sessions -= 1
            await session.close()

    async def _serve(self, ws: Any, session: Session) -> None:
        from starlette.websockets import WebSocketDisconnect

        while True:
            try:
                raw = await asyncio.wait_for(ws.receive_text(), self.session_timeout)
            except TimeoutError:
                await self._error(ws, f"the session was idle for {self.session_timeout:g} s and is closed",
                                  "SESSION_ERROR")  # fmt: skip
                with contextlib.suppress(Exception):
                    await ws.close(code=1000)
                return
            except (WebSocketDisconnect, RuntimeError, KeyError):
                return  # the client went away (or sent a binary frame after closing)
            try:
                msg = json.loads(raw)
            except json.JSONDecodeError as exc:
                await self._error(ws, f"Invalid JSON: {exc}", "INVALID_JSON")
                continue
            kind = msg.get("type") if isinstance(msg, dict) else None
            try:
                if kind == "reset":
                    data = msg.get("data") or {}
                    if not isinstance(data, dict):
                        raise SessionError("a reset's data is an object", "VALIDATION_ERROR")
                    reply = {"type": "observation", "data": wire(await session.reset(data))}
                elif kind == "step":
                    reply = {"type": "observation", "data": wire(await session.step(msg.get("data")))}
                elif kind == "state":
                    reply = {"type": "state", "data": session.state().model_dump()}
                elif kind == "close":
                    return
                else:
                    raise SessionError(f"Unknown message type: {kind!r} (reset, step, state, close)", "UNKNOWN_TYPE")
            except SessionError as exc:
                await self._error(ws, str(exc), exc.code)
                continue
            try:
                await ws.send_text(json.dumps(reply, default=str))
            except Exception:  # noqa: BLE001 - the client went away while the step ran
                return

    @staticmethod
    async def _error(ws: Any, message: str, code: str, **extra: Any) -> None:
        with contextlib.suppress(Exception):
            await ws.send_text(json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}}))

    async def aclose(self) -> None:
        """Close every idle env (their servers stop) and the record file."""
        await self.pool.aclose()
        if self._out is not None:
            self._out.close()
            self._out = None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(env_id: str, *, host: str = "127.0.0.1", port: int = 8000, env_kwargs: Mapping[str, Any] | None = None,
          max_sessions: int = 8, token: str | None = None, session_timeout: float | None = None,
          out: str | Path | None = None, log_level: str = "warning") -> None:  # fmt: skip
    """Serve ``env_id`` until interrupted. A host that is not loopback needs a token (``token=`` or
    ``$AWORLD_GYM_SERVE_TOKEN``)."""
    import uvicorn

    token = token or os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(host):
        raise ConfigError(f"serving on {host} (not loopback) needs a token: --token or ${TOKEN_ENV}")
    server = EnvServer(env_id, env_kwargs, max_sessions=max_sessions, token=token, session_timeout=session_timeout,
                       out=out)  # fmt: skip
    uvicorn.run(server.app(), host=host, port=port, log_level=log_level, ws_max_size=64 * 1024 * 1024)
