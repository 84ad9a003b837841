"""Load GAIA as users keep it locally: the layout of the ``gaia-benchmark/GAIA`` snapshot.

::

    <data_dir>/2023/validation/metadata.jsonl   (or metadata.parquet)
    <data_dir>/2023/validation/<attachment files>
    <data_dir>/2023/test/metadata.jsonl ...

``data_dir`` may point at the snapshot root (holding ``2023/``), at ``2023/`` itself, or at a split folder.
Each row has ``task_id, Question, Level, Final answer, file_name, Annotator Metadata``; the test split has
no usable answers (its ``Final answer`` is ``"?"`` or missing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import TaskError
from aworld_gym.core.task import Task, TaskSource, read_jsonl

SPLITS = ("validation", "test")
HIDDEN_ANSWERS = {None, "", "?"}
METADATA_NAMES = ("metadata.jsonl", "metadata.parquet")  # a split's answer key: never an attachment


def split_dir(data_dir: str | Path, split: str) -> Path:
    """The folder of ``split`` under ``data_dir`` (snapshot root, ``2023/`` or the split folder itself)."""
    if split not in SPLITS:
        raise TaskError(f"split must be one of {SPLITS}, got {split!r}")
    root = Path(data_dir).expanduser()
    if not root.exists():
        raise TaskError(f"GAIA data_dir {str(root)!r} does not exist. {_EXPECTED}")
    for candidate in (root / "2023" / split, root / split, root):
        if _metadata_file(candidate) is not None:
            if candidate == root and root.name not in SPLITS and (root / "2023").exists():
                continue
            return candidate
    raise TaskError(f"no GAIA metadata for split {split!r} under {str(root)!r}. {_EXPECTED}")


_EXPECTED = (
    "Expected the gaia-benchmark/GAIA layout: <data_dir>/2023/<split>/metadata.jsonl (or metadata.parquet) with "
    "fields task_id, Question, Level, Final answer, file_name, and the attachment files beside it."
)


def _metadata_file(folder: Path) -> Path | None:
    for name in METADATA_NAMES:
        if (folder / name).is_file():
            return folder / name
    return None


def _rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise TaskError(f"{path} is parquet: install pyarrow (pip install 'aworld-gym[datasets]')") from None
        return pq.read_table(path).to_pylist()
    return read_jsonl(path)


def load_gaia(data_dir: str | Path, split: str = "validation", level: int | None = None) -> TaskSource:
    """GAIA tasks of one split (optionally one level) as :class:`Task` objects.

    ``Task.answer`` is ``None`` where the split hides it; ``Task.files`` holds the absolute path of the attachment;
    ``metadata`` keeps ``level``, ``file_name``, ``annotator_metadata`` and the other fields.
    """
    if level is not None and level not in (1, 2, 3):
        raise TaskError(f"level must be 1, 2, 3 or None, got {level!r}")
    folder = split_dir(data_dir, split)
    meta = _metadata_file(folder)
    assert meta is not None
    tasks = []
    for i, row in enumerate(_rows(meta)):
        missing = [k for k in ("task_id", "Question") if not row.get(k)]
        if missing:
            raise TaskError(f"{meta}: row {i} lacks {missing}. {_EXPECTED}")
        row_level = _level(row.get("Level"), meta, i)
        if level is not None and row_level != level:
            continue
        files: tuple[str, ...] = ()
        name = row.get("file_name") or ""
        if name:
            files = (_attachment(folder, str(name), str(row["task_id"])),)
        answer = row.get("Final answer")
        answer = None if answer in HIDDEN_ANSWERS else str(answer)
        extra = {k: v for k, v in row.items() if k not in ("task_id", "Question", "Level", "Final answer", "file_name")}
        metadata = {
            "level": row_level,
            "file_name": name,
            "split": split,
            "annotator_metadata": extra.pop("Annotator Metadata", None),
            **extra,
        }
        tasks.append(
            Task(id=str(row["task_id"]), prompt=str(row["Question"]), answer=answer, files=files, metadata=metadata)
        )
    if not tasks:
        raise TaskError(f"no GAIA tasks in {str(meta)!r}" + (f" at level {level}" if level else ""))
    return TaskSource(tasks)


def _attachment(folder: Path, name: str, task_id: str) -> str:
    """The absolute path of a task's attachment: a file inside the split folder that is not its answer key.

    The path is kept as written (not symlink-resolved), so the name the model sees is the dataset's own even where
    the files are links into a cache (the Hugging Face layout).
    """
    rel = os.path.normpath(name)
    if "\x00" in name or os.path.isabs(name) or rel in (".", "..") or rel.startswith(".." + os.sep):
        raise TaskError(f"task {task_id}: attachment {name!r} is not a file name inside {str(folder)!r}")
    path = os.path.join(os.path.abspath(folder), rel)
    if not os.path.isfile(path):
        raise TaskError(f"task {task_id}: attachment {name!r} is missing from {str(folder)!r}")
    keys = [folder / m for m in METADATA_NAMES if (folder / m).exists()]
    if any(os.path.samefile(path, key) for key in keys):
        raise TaskError(f"task {task_id}: attachment {name!r} is the split's answer key; refusing to hand it over")
    return path


def _level(value: Any, meta: Path, i: int) -> int:
    try:
        level = int(value)
    except (TypeError, ValueError):
        raise TaskError(f"{meta}: row {i} has Level {value!r}; expected 1, 2 or 3") from None
    if level not in (1, 2, 3):
        raise TaskError(f"{meta}: row {i} has Level {level}; expected 1, 2 or 3")
    return level


def write_submission(
    answers: dict[str, str | None] | list[dict[str, Any]], path: str | Path, pick: str | None = None
) -> Path:
    """Write a GAIA leaderboard submission: JSONL of ``{"task_id", "model_answer"}`` (plus ``reasoning_trace``).

    Args:
        answers: ``{task_id: answer}``, or trajectory records (``task_id`` and the submitted ``answer``).
        path: where to write.
        pick: with several samples of a task (``--group-size K``), which one is submitted: ``"first"`` (the lowest
            ``sample``: what pass@1 measures) or ``"best"`` (the highest ``score``, then ``reward``; ties go to the
            lower sample; on the test split, where nothing is scored, it falls back to the highest reward).
            Required when a task has several records: a submission has one answer per task.

    Raises:
        ValueError: several records of one task and no ``pick``, or an unknown ``pick``.
    """
    if pick not in (None, "first", "best"):
        raise ValueError(f"pick must be 'first' or 'best', not {pick!r}")
    rows: list[dict[str, Any]] = []
    if isinstance(answers, dict):
        rows = [{"task_id": k, "model_answer": "" if v is None else str(v)} for k, v in answers.items()]
    else:
        chosen: dict[str, dict[str, Any]] = {}
        for rec in answers:
            tid = str(rec["task_id"])
            if tid in chosen and pick is None:
                raise ValueError(
                    f"task {tid!r} has several samples; say which one to submit: pick='first' (pass@1) or 'best'"
                )
            if tid not in chosen or _better(rec, chosen[tid], pick or "first"):
                chosen[tid] = rec
        for tid, rec in chosen.items():
            answer = rec.get("answer")
            if answer is None:
                answer = next((t.get("answer") for t in reversed(rec.get("turns", [])) if t.get("answer")), None)
            row = {"task_id": tid, "model_answer": "" if answer is None else str(answer)}
            if rec.get("reasoning_trace"):
                row["reasoning_trace"] = rec["reasoning_trace"]
            rows.append(row)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return out


def _better(rec: dict[str, Any], than: dict[str, Any], pick: str) -> bool:
    """Whether ``rec`` should replace ``than`` as the submitted sample of their task."""
    sample, other = int(rec.get("sample", 0)), int(than.get("sample", 0))
    if pick == "first":
        return sample < other

    def key(r: dict[str, Any]) -> tuple[float, float]:
        score = r.get("score")
        return (-1.0 if score is None else float(score), float(r.get("reward") or 0.0))

    return key(rec) > key(than) or (key(rec) == key(than) and sample < other)
