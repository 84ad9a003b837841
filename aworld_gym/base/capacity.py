"""The limits on episodes in flight that are not ours to see: descriptors, and a pool that caps a run silently.

A run of thousands of episodes in flight goes through pools sized by someone else's defaults: the OpenAI SDK's HTTP
client allowed 1,000 connections whatever ``max_concurrency`` said, httpx's 100, and a process starts with a soft limit
of 1,024 open files on most Linux systems. Each cap is sized from the run here (in the code that owns the pool), and a
run that asks for more than a pool allows says so once (:class:`CapacityWarning`, naming both numbers and the setting
to change). This module holds what they share: the warning, and :func:`ensure_descriptors`, which every engine calls
when a run starts in a process that holds episodes.
"""

from __future__ import annotations

import warnings

from aworld_gym.base.errors import ConfigError

# Descriptors one episode in flight may hold in the process that runs it, where its env says nothing more precise
# (:func:`aworld_gym.rollout.envs.descriptors_per_episode` counts an ``mcp_config``'s servers): its model request's
# connection (1), its tool connection (an HTTP call's connection, or a stdio server of its own: its stdin and stdout
# pipes and its stderr log, 3). A shared stdio server or a shared HTTP session costs nothing per episode; an env that
# opens more (a browser's CDP socket, a sandbox's pipes) costs more.
FDS_PER_EPISODE = 4
FDS_MODEL = 1  # the model request's connection
FDS_STDIO = 3  # a stdio server process of the episode's own: its stdin and stdout pipes, its stderr log
FDS_HTTP = 1  # a call's connection to an HTTP server of the episode's own session
FDS_BASE = 256  # the process's own: the interpreter's files, the event loop, logs, a few servers' pipes


class CapacityWarning(UserWarning):
    """A run asks for more in flight than a pool on its path allows (the message names both numbers and the setting
    to change). Python shows a warning with the same text once."""


def warn_capacity(message: str) -> None:
    """Say once (per distinct message) that a pool caps the run: ``message`` names both numbers and the setting."""
    warnings.warn(message, CapacityWarning, stacklevel=3)


def descriptors_needed(in_flight: int, per_episode: int = FDS_PER_EPISODE) -> int:
    """The open files a process running ``in_flight`` episodes at once may need (:data:`FDS_PER_EPISODE` each, and
    :data:`FDS_BASE` for the process itself)."""
    return FDS_BASE + per_episode * max(0, in_flight)


def ensure_descriptors(in_flight: int, per_episode: int = FDS_PER_EPISODE) -> int | None:
    """Raise this process's soft limit on open files to its hard limit, and check it fits ``in_flight`` episodes.

    Called when a run starts in a process that holds episodes (the in-process engine, a worker process, a Ray actor).
    Raising the soft limit is what a shell's ``ulimit -n $(ulimit -Hn)`` does; nothing is lowered.

    Returns:
        The soft limit now, or ``None`` where the platform has no such limit (Windows).

    Raises:
        ConfigError: the hard limit is below what ``in_flight`` episodes may need (the message names both numbers).
    """
    try:
        import resource
    except ImportError:  # Windows: no RLIMIT_NOFILE
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = descriptors_needed(in_flight, per_episode)
    if hard != resource.RLIM_INFINITY and need > hard:
        raise ConfigError(
            f"{in_flight} episodes in flight may need about {need} open files ({per_episode} per episode: a model "
            f"connection, a tool connection or a stdio server's pipes; {FDS_BASE} for the process), but this process "
            f"may open at most {hard} (its hard limit). Raise it (`ulimit -n {need}` as root or in the shell that "
            f"starts the run; `nofile` in /etc/security/limits.conf, LimitNOFILE= for a systemd unit, --ulimit "
            f"nofile={need}:{need} for a container), or run fewer episodes at once"
        )
    # to the hard limit; where that is infinite (macOS, whose kernel refuses an infinite soft limit), to what is needed
    target = hard if hard != resource.RLIM_INFINITY else max(need, 10240)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # refused: checked against the need below
            pass
    if soft != resource.RLIM_INFINITY and soft < need:
        raise ConfigError(
            f"{in_flight} episodes in flight may need about {need} open files ({per_episode} per episode), but the "
            f"soft limit stays at {soft} and could not be raised: raise it with `ulimit -n {need}` before the run"
        )
    return None if soft == resource.RLIM_INFINITY else soft
