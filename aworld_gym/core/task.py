"""Tasks and task sources (JSONL, JSON, a list of dicts, a Hugging Face ``datasets.Dataset``)."""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import TaskError

# Field names accepted for each Task attribute, in order of preference (ours, GAIA's, HumanEval's, common).
_ID_KEYS = ("id", "task_id")
_PROMPT_KEYS = ("prompt", "question", "Question", "instruction")
_ANSWER_KEYS = ("answer", "Final answer", "final_answer", "ground_truth")
_FILES_KEYS = ("files", "file_paths")


@dataclass(frozen=True)
class Task:
    """One task: what the agent is asked, the hidden answer, attachments and anything else.

    Attributes:
        id: unique id within its source.
        prompt: the text shown to the agent on reset.
        answer: the hidden reference answer (``None`` when unknown, e.g. a test split).
        files: paths of attachments the tools may read.
        metadata: everything else (level, tests, entry points, ...).
    """

    id: str
    prompt: str
    answer: Any = None
    files: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, row: Mapping[str, Any], index: int = 0) -> Task:
        """Build a task from a dict with ``id/task_id``, ``prompt/question``, ``answer``, ``files``, ``metadata``."""
        if not isinstance(row, Mapping):
            raise TaskError(f"task #{index}: expected a JSON object, got {type(row).__name__}")
        prompt = _first(row, _PROMPT_KEYS)
        if not isinstance(prompt, str) or not prompt:
            raise TaskError(f"task #{index}: needs a non-empty 'prompt' (or 'question') string; keys: {sorted(row)}")
        task_id = _first(row, _ID_KEYS)
        task_id = str(index) if task_id is None else str(task_id)
        files = _first(row, _FILES_KEYS) or ()
        if isinstance(files, str):
            files = (files,)
        if not isinstance(files, Sequence) or not all(isinstance(f, str) for f in files):
            raise TaskError(f"task {task_id!r}: 'files' must be a list of paths")
        known = {*_ID_KEYS, *_PROMPT_KEYS, *_ANSWER_KEYS, *_FILES_KEYS, "metadata"}
        given = row.get("metadata") or {}
        if not isinstance(given, Mapping):
            raise TaskError(f"task {task_id!r}: 'metadata' must be a JSON object, got {type(given).__name__}")
        metadata = dict(given)
        metadata.update({k: v for k, v in row.items() if k not in known})
        return cls(id=task_id, prompt=prompt, answer=_first(row, _ANSWER_KEYS), files=tuple(files), metadata=metadata)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "prompt": self.prompt,
            "answer": self.answer,
            "files": list(self.files),
            "metadata": dict(self.metadata),
        }


def _first(row: Mapping[str, Any], keys: Iterable[str]) -> Any:
    for k in keys:
        if k in row and row[k] is not None:
            return row[k]
    return None


TaskSpec = str | Path | Sequence[Mapping[str, Any] | Task] | Any


class TaskSource:
    """An ordered, indexable collection of tasks with unique ids."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self._tasks = list(tasks)
        if not self._tasks:
            raise TaskError("the task source is empty: give at least one task")
        self._by_id: dict[str, int] = {}
        for i, t in enumerate(self._tasks):
            if t.id in self._by_id:
                raise TaskError(f"duplicate task id {t.id!r} (tasks #{self._by_id[t.id]} and #{i})")
            self._by_id[t.id] = i

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, index: int) -> Task:
        return self._tasks[index]

    def __iter__(self):
        return iter(self._tasks)

    def index_of(self, task_id: str) -> int:
        try:
            return self._by_id[str(task_id)]
        except KeyError:
            sample = ", ".join(list(self._by_id)[:5])
            raise TaskError(f"no task with id {task_id!r} ({len(self)} tasks; first ids: {sample})") from None

    def get(self, task_id: str) -> Task:
        return self._tasks[self.index_of(task_id)]

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self._tasks]

    @functools.cached_property
    def first_without_answer(self) -> Task | None:
        """The first task that has no answer (``None`` when every one has); looked for once: a source never changes,
        and the thousands of envs of a run that share it check it at each one's start."""
        return next((t for t in self._tasks if t.answer is None), None)


def load_tasks(spec: TaskSpec) -> TaskSource:
    """Load tasks from a JSONL/JSON path, a list of dicts/Tasks, a ``datasets.Dataset`` or a TaskSource.

    A process parses each source once: the same list or dataset object, or the same unchanged file, gives back the
    same :class:`TaskSource` (the last :data:`SHARED_SOURCES` kept). So the thousands of envs of one run share one
    parsed copy of its tasks instead of one each, which made memory grow with the square of the envs in flight. A
    list whose items were replaced, added or removed since is read again (each item compared by identity: cheap); a
    task dict changed in place is not seen (pass a new dict or list); a file is read again once it changes.
    """
    if isinstance(spec, TaskSource):
        return spec
    key = _share_key(spec)
    if key is not None:
        with _shared_lock:
            hit = _shared.get(key)
            if hit is not None and (hit[2] is None or hit[2] == spec):  # a list: the same items (identity first)
                _shared.move_to_end(key)
                return hit[1]
    source = _parse(spec)
    if key is not None:
        snapshot = list(spec) if isinstance(spec, list) else None
        with _shared_lock:
            _shared[key] = (spec, source, snapshot)  # the spec is held, so its id is not reused while the entry lives
            while len(_shared) > SHARED_SOURCES:
                _shared.popitem(last=False)
    return source


SHARED_SOURCES = 8  # parsed task sources kept per process (least recently used dropped)
_shared: OrderedDict[tuple[Any, ...], tuple[Any, TaskSource, list[Any] | None]] = OrderedDict()
_shared_lock = threading.Lock()


def _share_key(spec: TaskSpec) -> tuple[Any, ...] | None:
    """What names ``spec`` for sharing: a file by its resolved path, size, inode and modification time; an object
    by its identity and length; None for what cannot be shared (a file that is missing, an object with no length)."""
    if isinstance(spec, str | Path):
        path = Path(spec).expanduser()
        try:
            st = path.stat()
        except (OSError, ValueError):
            return None  # _parse says what is wrong
        return ("file", str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    try:
        return ("object", id(spec), len(spec))
    except TypeError:
        return None


def _parse(spec: TaskSpec) -> TaskSource:
    if isinstance(spec, str | Path):
        return TaskSource(_read_path(Path(spec).expanduser()))
    if _is_hf_dataset(spec):
        return TaskSource(Task.from_dict(row, i) for i, row in enumerate(spec))
    if isinstance(spec, Sequence) and not isinstance(spec, str | bytes):
        return TaskSource(t if isinstance(t, Task) else Task.from_dict(t, i) for i, t in enumerate(spec))
    raise TaskError(
        f"tasks must be a .jsonl/.json path, a list of dicts, or a datasets.Dataset; got {type(spec).__name__}"
    )


def _is_hf_dataset(obj: Any) -> bool:
    return hasattr(obj, "column_names") and hasattr(obj, "features") and hasattr(obj, "__getitem__")


def _read_path(path: Path) -> list[Task]:
    if not path.exists():
        raise TaskError(f"task file {str(path)!r} does not exist")
    if path.is_dir():
        raise TaskError(f"{str(path)!r} is a folder; give a .jsonl or .json task file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
        if isinstance(rows, dict) and "tasks" in rows:
            rows = rows["tasks"]
        if not isinstance(rows, list):
            raise TaskError(f"{path}: expected a JSON list of task objects")
        return [Task.from_dict(r, i) for i, r in enumerate(rows)]
    return [Task.from_dict(row, i) for i, row in enumerate(read_jsonl(path, text, objects=False))]


def read_jsonl(path: Path, text: str | None = None, objects: bool = True) -> list[Any]:
    """The rows of a JSONL file (blank lines skipped); a bad line is a :class:`TaskError` naming it."""
    rows = []
    source = path.read_text(encoding="utf-8") if text is None else text
    for lineno, line in enumerate(source.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
        if objects and not isinstance(row, dict):
            raise TaskError(f"{path}:{lineno}: expected a JSON object")
        rows.append(row)
    return rows


def confine_files(task: Task, root: str | Path | None) -> Task:
    """``task`` with its files resolved inside ``root``, for a task that came from outside (a served env's client).

    A file is a path relative to ``root`` naming an existing regular file there once symlinks are resolved; an
    absolute path, a ``..`` part, a NUL byte, or a symlink that leads out of ``root`` is a :class:`TaskError`, and so
    is any file at all when ``root`` is ``None``. The files come back as absolute resolved paths.
    """
    if not task.files:
        return task
    if root is None:
        raise TaskError("a client task may not name files: the server has no client files root (--client-files-root)")
    base = Path(root).expanduser().resolve()
    out = []
    for name in task.files:
        shown = repr(name[:120]) + ("..." if len(name) > 120 else "")
        parts = Path(name).parts
        if not name or "\x00" in name or Path(name).is_absolute() or ".." in parts:
            raise TaskError(f"task file {shown}: give a path relative to the client files root, without '..'")
        try:
            full = (base / name).resolve(strict=True)
        except (OSError, RuntimeError, ValueError):
            raise TaskError(f"task file {shown} does not exist under the client files root") from None
        if not full.is_relative_to(base) or not full.is_file():
            raise TaskError(f"task file {shown} is not a file inside the client files root")
        out.append(str(full))
    return Task(id=task.id, prompt=task.prompt, answer=task.answer, files=tuple(out), metadata=task.metadata)


def pick_task(tasks: TaskSource, options: Mapping[str, Any], rng: Any) -> Task:
    """The task a reset asks for: ``options["task"]`` (a Task or a dict), ``"task_id"``, ``"task_index"``, else one
    drawn with ``rng`` (the env's own generator)."""
    from aworld_gym.base.errors import ConfigError

    if "task" in options:
        t = options["task"]
        return t if isinstance(t, Task) else Task.from_dict(t)
    if "task_id" in options:
        return tasks.get(str(options["task_id"]))
    if "task_index" in options:
        i = int(options["task_index"])
        if not 0 <= i < len(tasks):
            raise ConfigError(f"task_index {i} is out of range: there are {len(tasks)} tasks")
        return tasks[i]
    return tasks[int(rng.integers(len(tasks)))]


def task_meta(metadata: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
    """The task's short scalar facts (level, difficulty, source, ...) for trajectory records and ``report --by``:
    the metadata's and the env's reset extras' values that are numbers, booleans or strings under 100 characters
    (plans, answers' lists and long texts are left out)."""
    out: dict[str, Any] = {}
    skip = {"task_id", "tools", "system_prompt", "files", "turn", "task_meta", "reference"}
    for key, value in [*metadata.items(), *info.items()]:
        if key in skip or key.startswith("_") or value is None:
            continue
        if isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) < 100):
            out[str(key)] = value
    return out
