"""Streaming rollouts: trajectories, or whole GRPO groups, handed over as soon as they are complete.

::

    from aworld_gym.rollout.stream import stream_groups
    for group in stream_groups("AWorld/Code-v0", policy, episodes=512, group_size=8, engine=AsyncEngine(64)):
        train_on(group)           # all 8 samples of one task; later groups are still being generated

``stream`` / ``stream_groups`` are plain iterators (the episodes run on an event loop in a background thread, so a
sync training loop can consume them); ``astream`` / ``astream_groups`` are the async generators behind them. Work in
flight is bounded by the engine's concurrency plus ``buffer`` finished items waiting for the consumer. Leaving the
loop early (``break``, an exception, ``close()``) stops the workers and closes every env and server.
:func:`~aworld_gym.rollout.collect.collect` is built on the same :class:`Rollout`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from aworld_gym.core.faces import check_async
from aworld_gym.core.trajectory import Trajectory
from aworld_gym.rollout.engines import AsyncEngine, Engine, Work
from aworld_gym.rollout.envs import EnvLike, env_factory, env_name
from aworld_gym.rollout.groups import GroupCollector, check_void_policy
from aworld_gym.rollout.jobs import Job, plan_jobs
from aworld_gym.rollout.policies import Policy
from aworld_gym.wrappers.reward_shaping import group_hooks


class Rollout:
    """One run: an env (id or factory), a policy, the planned jobs, an engine.

    Args:
        env: a registered id or a zero-argument factory returning an env (wrappers included).
        policy: a policy, or a picklable zero-argument factory (one policy per slot; required for Ray).
        episodes: how many episodes in all (``skip`` counts against them).
        engine: an :class:`~aworld_gym.rollout.engines.AsyncEngine` (default) or
            :class:`~aworld_gym.rollout.engines.ray_engine.RayEngine`.
        group_size: samples per task in a row (a GRPO group); the env's group reward hooks run on complete groups.
        seed: episode ``i`` resets with ``seed + i``.
        task_order: ``"cycle"`` (group ``g`` takes task ``g mod n``) or ``"sample"`` (drawn with ``seed``).
        env_kwargs: ``gym.make`` kwargs (with an id).
        skip: ``(task_id, sample)`` keys already done (a resumed run).
        grouped: hold every trajectory until its group is complete (``stream_groups``).
        void_policy: ``"mask"`` (void episodes get loss weight 0), ``"retry"`` (re-run, ``retry_void`` times, then
            masked) or ``"zero"``; see :mod:`aworld_gym.rollout.groups`.
        retry_void: how many times a void episode is re-run (default: 2 with ``void_policy="retry"``, else 0).
        concurrency, ray_address, ray_actors, policy_timeout_s, screenshots: build the engine when ``engine`` is a
            name (``"async"``, ``"ray"``) or ``None``, as :func:`~aworld_gym.rollout.collect.collect` does.
    """

    def __init__(
        self,
        env: EnvLike,
        policy: Policy | Callable[[], Policy],
        *,
        episodes: int,
        engine: Engine | None = None,
        group_size: int = 1,
        seed: int = 0,
        task_order: str = "cycle",
        env_kwargs: Mapping[str, Any] | None = None,
        skip: set[tuple[str, int]] | frozenset[tuple[str, int]] = frozenset(),
        grouped: bool = False,
        void_policy: str = "mask",
        retry_void: int | None = None,
        concurrency: int | None = None,
        ray_address: str | None = None,
        ray_actors: int | None = None,
        policy_timeout_s: float | None = None,
        screenshots: str | Path | None = None,
    ) -> None:
        if episodes < 1 or group_size < 1:
            raise ValueError("episodes and group_size must be at least 1")
        if task_order not in ("cycle", "sample"):
            raise ValueError("task_order must be 'cycle' or 'sample'")
        self.void_policy = check_void_policy(void_policy)
        self.retry_void = (2 if void_policy == "retry" else 0) if retry_void is None else int(retry_void)
        self.engine = make_engine(engine, concurrency, ray_address, ray_actors, policy_timeout_s, screenshots)
        self.env, self.make = env, env_factory(env, env_kwargs)
        self.policy = policy_factory(policy, env)
        self.episodes, self.group_size, self.seed, self.task_order = episodes, group_size, seed, task_order
        self.skip, self.grouped = skip, grouped
        self.probe: Any = None
        self.env_id = env if isinstance(env, str) else ""
        self.task_ids: list[str] = []
        self.jobs: list[Job] = []
        self.todo: list[Job] = []
        self.groups: GroupCollector | None = None
        self.hold = grouped
        self._ready: list[list[Trajectory]] = []  # complete groups not yet handed over (see :meth:`leftovers`)
        # episodes on their way into their group in a worker thread (the env has group hooks): an interrupt that
        # cancels the run must not cancel one (asyncio.to_thread's job is dropped when it is cancelled before a thread
        # takes it: the episode was lost), and leftovers() waits for them
        self._adding: list[concurrent.futures.Future[None]] = []
        self._work: Work | None = None

    def open(self) -> Rollout:
        """Make a probe env (validates the config, tells the tasks), plan the jobs. Idempotent."""
        if self.probe is not None:
            return self
        self.probe = self.make()
        try:
            self.env_id = env_name(self.env, self.probe)
            check_async(self.probe)
            tasks = self.probe.unwrapped.tasks
            self.task_ids = tasks.ids
            self.jobs = plan_jobs(len(tasks), self.episodes, self.group_size, self.seed, self.task_order)
            self.todo = [j for j in self.jobs if (tasks[j.task_index].id, j.sample) not in self.skip]
            rubric = group_hooks(self.probe)
            if self.group_size == 1:
                rubric = None
            self.hold = self.grouped or rubric is not None
            sizes: dict[int, int] = {}
            for j in self.jobs:
                sizes[j.group] = sizes.get(j.group, 0) + 1
            self.groups = GroupCollector(rubric, self.void_policy, sizes if rubric is not None else None)
            for j in self.todo:
                self.groups.expect(j.group if self.hold else j.index)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        probe, self.probe = self.probe, None
        if probe is not None:
            probe.close()

    async def items(self) -> AsyncIterator[list[Trajectory]]:
        """Lists of trajectories as they become ready: single ones, or whole groups when grouped or scored."""
        self.open()
        assert self.groups is not None
        if getattr(self.engine, "name", "") == "ray":
            self.close()  # the driver's own servers are not what the actors use
        work = self._work = Work(self.env_id, self.make, self.policy, self.todo, self.task_ids,
                                 retry_void=self.retry_void)  # fmt: skip
        groups = self.groups
        run = self.engine.run(work)

        def add(key: Any, traj: Trajectory) -> None:  # a complete group is kept here until it is handed over
            ready = groups.add(key, traj)
            if ready:
                self._ready.append(ready)

        try:
            async for job, traj in run:
                key = job.group if self.hold else job.index
                if groups.rubric is not None:  # a slow (async) hook: off the loop
                    adding = _GROUPING.submit(contextvars.copy_context().run, add, key, traj)
                    self._adding.append(adding)
                    await asyncio.shield(asyncio.wrap_future(adding))  # a cancellation never drops the episode
                    self._adding.remove(adding)
                else:
                    add(key, traj)
                while self._ready:
                    yield self._ready.pop(0)
        finally:
            await run.aclose()  # type: ignore[attr-defined] - stops the workers, closes every env
            self.close()
        # an interrupted run leaves groups behind: collect writes them (:meth:`leftovers`); a stream whose consumer
        # left drops them

    def leftovers(self) -> list[list[Trajectory]]:
        """What an interrupted run has not handed over: the groups completed but not yet yielded (an interrupt
        while a group's hooks ran in a worker thread), the groups that the engine's finished but unyielded episodes
        (:attr:`Work.unyielded`) complete, then the groups left open, finished as they are (``group_complete``
        False)."""
        concurrent.futures.wait(self._adding)  # an episode on its way into its group gets there before the flush
        self._adding = []
        out, self._ready = self._ready, []
        if self.groups is not None:
            unyielded, self._work = (self._work.unyielded if self._work is not None else []), None
            for job, traj in unyielded:
                ready = self.groups.add(job.group if self.hold else job.index, traj)
                if ready:
                    out.append(ready)
            out += self.groups.flush()
        return out


# the threads that add an episode to its group when the env has group hooks (a hook may be slow: off the loop)
_GROUPING = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="aworld-grouping")


def policy_factory(policy: Policy | Callable[[], Policy] | str, env: Any = None) -> Callable[[], Policy]:
    """A zero-argument factory for a policy object (shared), a factory (one policy per slot), or a policy's name
    (``"reference"``, ``"openai"``, ``"hf"``: :func:`~aworld_gym.rollout.policies.make_policy` for the env id).

    Raises:
        ConfigError: a name without a registered env id, or a name that makes no policy (said at once).
        TypeError: neither a policy, a factory nor a name.
    """
    if isinstance(policy, str):
        import functools

        from aworld_gym.base.errors import ConfigError
        from aworld_gym.rollout.policies import make_policy

        if not isinstance(env, str):
            raise ConfigError(f"a policy given by name ({policy!r}) needs the env as a registered id")
        factory = functools.partial(make_policy, policy, env)
        factory()  # fail fast on a bad name or configuration
        return factory
    if isinstance(policy, type) or not hasattr(policy, "act"):
        if not callable(policy):
            raise TypeError(f"policy must be a Policy, a zero-argument factory or a name, not {type(policy).__name__}")
        return policy  # type: ignore[return-value]
    return lambda: policy  # type: ignore[return-value]


async def astream(env: EnvLike, policy: Any, **kwargs: Any) -> AsyncIterator[Trajectory]:
    """Trajectories as episodes finish (see :class:`Rollout` for the keywords)."""
    items = Rollout(env, policy, **kwargs).items()
    try:
        async for ready in items:
            for record in ready:
                yield record
    finally:
        await items.aclose()  # type: ignore[attr-defined]


async def astream_groups(env: EnvLike, policy: Any, **kwargs: Any) -> AsyncIterator[list[Trajectory]]:
    """Complete GRPO groups (all samples of a task) as soon as each is complete (see :class:`Rollout`)."""
    items = Rollout(env, policy, grouped=True, **kwargs).items()
    try:
        async for ready in items:
            yield ready
    finally:
        await items.aclose()  # type: ignore[attr-defined]


class Stream:
    """A sync iterator over an async generator running on an event loop in a background thread.

    ``buffer`` finished items may wait for the consumer; then the producer waits (backpressure). ``close()`` (or
    leaving a ``with`` block, or garbage collection) cancels the producer, which stops its workers and closes
    every env. An exception in the producer is raised in the consumer.
    """

    _DONE = object()

    def __init__(self, agen: Callable[[], AsyncIterator[Any]], buffer: int = 1) -> None:
        self._q: queue.Queue[Any] = queue.Queue(maxsize=max(1, buffer))
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(agen,), name="aworld-stream", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self, agen: Callable[[], AsyncIterator[Any]]) -> None:
        async def pump() -> None:
            gen = agen()
            try:
                async for item in gen:
                    try:
                        self._q.put_nowait(item)
                    except queue.Full:  # the consumer has not taken the last one: wait for it off the loop (a
                        await asyncio.to_thread(self._put, item)  # poll here held each record up to 10 ms)
                    if self._stop.is_set():
                        break
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                if not isinstance(exc, asyncio.CancelledError):
                    self._put(exc)
            finally:
                # Closing stops the workers and closes every env; close() may cancel this task while it runs (the
                # stop was seen first): the closing goes on in a task of its own, waited for to its end, or the loop
                # would end with worker processes still alive.
                closing = asyncio.ensure_future(gen.aclose())  # type: ignore[attr-defined]
                while not closing.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.shield(closing)
                closing.result()
                self._put(self._DONE)

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
            self._ready.set()
            await pump()

        try:
            asyncio.run(main())
        finally:
            self._ready.set()

    def _put(self, item: Any) -> None:
        while True:
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                if self._stop.is_set():
                    return  # nobody is listening any more

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._stop.is_set():
            raise StopIteration
        item = self._q.get()
        if item is self._DONE:
            self._stop.set()
            raise StopIteration
        if isinstance(item, BaseException):
            self._stop.set()
            raise item
        return item

    def close(self) -> None:
        """Stop the producer, close every env, wait for the background loop to end."""
        if not self._thread.is_alive():
            return
        self._stop.set()
        while not self._q.empty():  # let a producer blocked on a full buffer see the stop
            try:
                self._q.get_nowait()
            except queue.Empty:
                break
        if self._loop is not None and self._task is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort at garbage collection
            pass


def stream(env: EnvLike, policy: Any, *, buffer: int = 1, **kwargs: Any) -> Stream:
    """Trajectories as episodes finish, as a plain iterator (see :class:`Rollout` for the keywords)."""
    return Stream(lambda: astream(env, policy, **kwargs), buffer)


def stream_groups(env: EnvLike, policy: Any, *, buffer: int = 1, **kwargs: Any) -> Stream:
    """Complete GRPO groups as they finish, as a plain iterator (see :class:`Rollout` for the keywords)."""
    return Stream(lambda: astream_groups(env, policy, **kwargs), buffer)


def make_engine(
    engine: Engine | str | None,
    concurrency: int | None = None,
    ray_address: str | None = None,
    ray_actors: int | None = None,
    policy_timeout_s: float | None = None,
    screenshots: str | Path | None = None,
) -> Engine:
    """An engine object from an object, a name (``"async"``, ``"ray"``, ``"process"``) or ``None`` (the in-process
    one)."""
    if engine is not None and not isinstance(engine, str):
        if any(v is not None for v in (concurrency, ray_address, ray_actors, policy_timeout_s, screenshots)):
            raise ValueError("give the engine's settings to the engine object, not to collect()")
        return engine
    n = 8 if concurrency is None else concurrency
    if engine in (None, "async"):
        if ray_address is not None or ray_actors is not None:
            raise ValueError("ray_address / ray_actors are settings of engine='ray'")
        return AsyncEngine(concurrency=n, policy_timeout_s=policy_timeout_s, screenshots=screenshots)
    if engine == "ray":
        if screenshots is not None:
            raise ValueError("screenshots are written by the in-process engine only (engine='async')")
        from aworld_gym.rollout.engines.ray_engine import RayEngine

        return RayEngine(concurrency=n, address=ray_address, actors=ray_actors, policy_timeout_s=policy_timeout_s)
    if engine == "process":
        if ray_address is not None or ray_actors is not None or screenshots is not None:
            raise ValueError("ray_address / ray_actors / screenshots are not settings of engine='process'")
        from aworld_gym.rollout.engines.process_engine import ProcessEngine

        return ProcessEngine(concurrency=n, policy_timeout_s=policy_timeout_s)
    raise ValueError("engine must be 'async', 'ray', 'process', or an engine object (AsyncEngine, RayEngine, "
                     "ProcessEngine)")  # fmt: skip
