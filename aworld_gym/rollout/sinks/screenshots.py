"""Screenshots of an episode: an image per step for envs that render ``rgb_array`` or show the model images."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aworld_gym.base.images import image_extension

if TYPE_CHECKING:
    from aworld_gym.core.trajectory import Trajectory


def screenshots_folder(out: str | Path) -> Path:
    """The folder of a run's screenshots: beside its trajectory file, ``runs/x.jsonl`` -> ``runs/x.screenshots`` (an
    episode's frames in ``<folder>/<episode id>/``). The report reads screenshots from this folder only."""
    return Path(out).with_suffix(".screenshots")


class Screenshots:
    """Writes an episode's frames as image files and names them in its record (a failed frame is noted, not raised)."""

    def __init__(self, folder: Path, traj: Trajectory) -> None:
        self.folder = folder / traj.episode_id
        self.traj = traj

    @classmethod
    def open(cls, folder: str | Path | None, traj: Trajectory, env: Any) -> Screenshots | None:
        if folder is None or not (getattr(env, "render_mode", None) == "rgb_array" or image_observations(env)):
            return None
        return cls(Path(folder), traj)

    def save(self, turn: int, frame: Any) -> None:
        """Write ``frame`` (an RGB array as a PNG, or image bytes as they are: an observation image as the model saw
        it, named by its format)."""
        from PIL import Image

        if frame is None:
            return
        path = self.folder / f"{turn:03d}.{image_extension(frame) if isinstance(frame, bytes) else 'png'}"
        if not isinstance(frame, BaseException):
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                if isinstance(frame, bytes):
                    path.write_bytes(frame)
                else:
                    Image.fromarray(frame).save(path)
                if turn:
                    self.traj.turns[-1]["screenshot"] = str(path)
                else:
                    self.traj.screenshot = str(path)
                return
            except Exception as exc:  # noqa: BLE001 - a missing frame is noted; the episode goes on
                frame = exc
        note = f"{type(frame).__name__}: {frame}"
        if turn:
            self.traj.turns[-1]["screenshot_error"] = note  # type: ignore[typeddict-unknown-key]
        else:
            self.traj.extra["screenshot_error"] = note


def image_observations(env: Any) -> bool:
    """Whether the env shows the model screenshots (its observation's images are in ``observation_images``, the
    page's screenshot last, after any images of the step's tool results)."""
    return bool(getattr(env, "image_observations", False))


def render_sync(env: Any) -> Any:
    if image_observations(env):
        return next(reversed(getattr(env, "observation_images", None) or []), None)  # none: the step ended the task
    try:
        return env.render()
    except Exception as exc:  # noqa: BLE001 - a missing frame must not end the episode
        return exc


async def render_async(env: Any) -> Any:
    if image_observations(env):
        return render_sync(env)
    try:
        shot = getattr(env, "ascreenshot", None)
        return await shot() if shot is not None else await asyncio.to_thread(env.render)
    except Exception as exc:  # noqa: BLE001 - a missing frame must not end the episode
        return exc
