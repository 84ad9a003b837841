"""GAIA's image and audio tools through model endpoints the user configures: ``describe_image(path, question)``
asks an OpenAI-compatible vision chat model about an attachment (sent as a base64 data URI); ``transcribe_audio
(path)`` sends an attachment to an OpenAI-compatible ``/audio/transcriptions`` endpoint (e.g. a served Whisper).

An endpoint is ``{"base_url", "model", "api_key"?, "timeout_s"?}``, given to ``gym.make("AWorld/GAIA-v0",
vision_model=..., audio_model=...)`` or read from ``AWORLD_GYM_VISION_BASE_URL`` / ``AWORLD_GYM_VISION_MODEL`` /
``AWORLD_GYM_VISION_API_KEY`` (and ``AWORLD_GYM_AUDIO_*``). Without one the tools answer how to configure it.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import ConfigError

IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".webp": "image/webp", ".bmp": "image/bmp"}  # fmt: skip
AUDIO_TYPES = {".mp3": "audio/mpeg", ".wav": "audio/wav", ".m4a": "audio/mp4", ".flac": "audio/flac",
               ".ogg": "audio/ogg", ".webm": "audio/webm", ".mp4": "audio/mp4"}  # fmt: skip
MAX_BYTES = 25 << 20  # what OpenAI's transcription endpoint accepts; images are far below it


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible model endpoint."""

    base_url: str
    model: str
    api_key: str = "EMPTY"
    timeout_s: float = 120.0

    @classmethod
    def of(cls, kind: str, given: Mapping[str, Any] | None) -> Endpoint | None:
        """The endpoint for ``kind`` (``"vision"`` or ``"audio"``): ``given``, else the environment, else None."""
        prefix = f"AWORLD_GYM_{kind.upper()}_"
        spec = dict(given) if given is not None else {
            k: os.environ[prefix + k.upper()] for k in ("base_url", "model", "api_key") if os.environ.get(prefix + k.upper())
        }  # fmt: skip
        if not spec:
            return None
        unknown = set(spec) - {"base_url", "model", "api_key", "timeout_s"}
        if unknown or not spec.get("base_url") or not spec.get("model"):
            raise ConfigError(
                f"{kind}_model needs 'base_url' and 'model' (optional 'api_key', 'timeout_s'); got {sorted(spec)}"
            )
        return cls(str(spec["base_url"]).rstrip("/"), str(spec["model"]), str(spec.get("api_key") or "EMPTY"),
                   float(spec.get("timeout_s", 120.0)))  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "model": self.model, "api_key": self.api_key, "timeout_s": self.timeout_s}


def how_to(kind: str, tool: str) -> str:
    what = "a vision chat model" if kind == "vision" else "an /audio/transcriptions model (e.g. a served Whisper)"
    return (
        f"Error: {tool} needs {what}, and none is configured: pass {kind}_model={{'base_url': ..., 'model': ...}} "
        f"to gym.make('AWorld/GAIA-v0', ...) or set AWORLD_GYM_{kind.upper()}_BASE_URL and "
        f"AWORLD_GYM_{kind.upper()}_MODEL."
    )


def _check(real: Path, shown: str, types: Mapping[str, str], what: str) -> str | None:
    if real.suffix.lower() not in types:
        return f"Error: {shown!r} is not {what} this tool reads ({', '.join(sorted(types))})."
    if not real.is_file():  # missing, or a FIFO or device whose reading would never end
        return f"Error: {shown!r} is missing or not a regular file."
    size = real.stat().st_size
    if size > MAX_BYTES:
        return f"Error: {shown!r} is too large to send ({size} bytes; the limit is {MAX_BYTES})."
    return None


async def describe_image(endpoint: Endpoint, real: Path, shown: str, question: str) -> tuple[str, bool]:
    """(the model's answer about the image, whether it is an error)."""
    import httpx2 as httpx

    problem = _check(real, shown, IMAGE_TYPES, "an image")
    if problem:
        return problem, True
    data = base64.b64encode(real.read_bytes()).decode()
    uri = f"data:{IMAGE_TYPES[real.suffix.lower()]};base64,{data}"
    body = {"model": endpoint.model, "max_tokens": 1024, "messages": [{"role": "user", "content": [
        {"type": "text", "text": question or "Describe this image in detail."},
        {"type": "image_url", "image_url": {"url": uri}}]}]}  # fmt: skip
    try:
        async with httpx.AsyncClient(timeout=endpoint.timeout_s) as client:
            r = await client.post(f"{endpoint.base_url}/chat/completions", json=body, headers=_auth(endpoint))
        r.raise_for_status()
        text = r.json()["choices"][0]["message"]["content"]
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
        return f"Error: the vision model endpoint failed: {_why(exc)}", True
    return str(text or ""), False


async def transcribe_audio(endpoint: Endpoint, real: Path, shown: str) -> tuple[str, bool]:
    """(the transcript, whether it is an error)."""
    import httpx2 as httpx

    problem = _check(real, shown, AUDIO_TYPES, "an audio file")
    if problem:
        return problem, True
    files = {"file": (real.name, real.read_bytes(), AUDIO_TYPES[real.suffix.lower()])}
    try:
        async with httpx.AsyncClient(timeout=endpoint.timeout_s) as client:
            r = await client.post(f"{endpoint.base_url}/audio/transcriptions", data={"model": endpoint.model},
                                  files=files, headers=_auth(endpoint))  # fmt: skip
        r.raise_for_status()
        text = r.json()["text"]
    except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
        return f"Error: the transcription endpoint failed: {_why(exc)}", True
    return str(text or "") or "(the transcript is empty)", False


def _auth(endpoint: Endpoint) -> dict[str, str]:
    return {"Authorization": f"Bearer {endpoint.api_key}"}


def _why(exc: BaseException) -> str:
    import httpx2 as httpx

    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}: {exc.response.text[:200]}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"
