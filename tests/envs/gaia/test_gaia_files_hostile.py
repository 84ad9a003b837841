"""GAIA's tools read only the task's own attachments (issue 44): the answer key (``metadata.jsonl``) and other
tasks' files are unreachable by any spelling of a path, on the bundled sample set and on a user's copy; odd file
names are listed unambiguously and readable; a document that expands hugely or parses for too long is stopped at
its bounds, and its work with it (the process's CPU time stays flat after the call)."""

from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path

import gymnasium as gym
import psutil
import pytest

import aworld_gym  # noqa: F401
from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ConfigError, TaskError
from aworld_gym.envs.gaia.files_server import build_server
from aworld_gym.envs.gaia.loader import load_gaia
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.options import ToolOptions


def _calls(paths: list[str]) -> str:
    return "".join(
        f"<tool_call>{json.dumps({'name': 'read_file', 'arguments': {'path': p}})}</tool_call>" for p in paths
    )


def _spellings(split: Path, attachment: str) -> list[str]:
    """Every way we know to name the answer key from a task whose attachment is ``attachment``."""
    key = str(split / "metadata.jsonl")
    return [
        "metadata.jsonl", "./metadata.jsonl", "../metadata.jsonl", f"../{split.name}/metadata.jsonl", key,
        f"file://{key}", f"{split}/./metadata.jsonl", f"{split}/{attachment}/../metadata.jsonl",
        f"{attachment}/../metadata.jsonl", "/sandbox/files/../metadata.jsonl", "metadata%2Ejsonl",
        "%2E%2E%2Fmetadata.jsonl", " metadata.jsonl ", '"metadata.jsonl"', "metadata.parquet", "METADATA.JSONL",
    ]  # fmt: skip


def _assert_refused(env: gym.Env, paths: list[str], answers: list[str]) -> None:
    """Each path, read by the model, is a tool error that shows nothing of the answer key."""
    for chunk in range(0, len(paths), 4):  # a few calls per turn
        batch = paths[chunk : chunk + 4]
        obs, *_, info = env.step(_calls(batch))
        assert obs.count("<tool_response>") == len(batch), obs
        assert "Final answer" not in obs and "task_id" not in obs, obs
        assert [r.get("error") for r in info["tool_results"]] == ["tool_error"] * len(batch), (batch, obs)
        for answer in answers:
            assert f'"{answer}"' not in obs, (answer, obs)


# ----- the answer key ------------------------------------------------------------------------------------------


def test_bundled_set_answer_key_is_unreachable():
    env = gym.make("AWorld/GAIA-v0", python_server="inprocess", max_turns=20)
    split = env.unwrapped.data_folder
    rows = [json.loads(x) for x in (split / "metadata.jsonl").read_text().splitlines()]
    task = next(r for r in rows if r["file_name"].endswith(".txt"))
    env.reset(options={"task_id": task["task_id"]})
    others = sorted({r["file_name"] for r in rows if r["file_name"] and r["file_name"] != task["file_name"]})
    try:
        _assert_refused(env, _spellings(split, task["file_name"]) + others[:4], [r["Final answer"] for r in rows])
        obs, *_ = env.step(_calls([task["file_name"]]))  # its own attachment stays readable
        assert "access denied" not in obs and "Error" not in obs
        # The code sandbox sees the attachment alone (bubblewrap mounts it by itself at /sandbox/files).
        key = split / "metadata.jsonl"
        code = (f"import os\nprint(sorted(os.listdir('/sandbox/files')))\n"
                f"print([os.path.exists(p) for p in ({str(key)!r}, '/sandbox/files/../metadata.jsonl', {str(split)!r})])\n"
                "print(sorted(os.path.join(d, f) for d, _, fs in os.walk('/sandbox') for f in fs if 'metadata' in f))")  # fmt: skip
        obs, *_ = env.step(f"<tool_call>{json.dumps({'name': 'run_python', 'arguments': {'code': code}})}</tool_call>")
        assert f"[{task['file_name']!r}]\n[False, False, False]\n[]" in obs, obs
    finally:
        env.close()


@pytest.fixture
def user_copy(tmp_path):
    """A user's GAIA copy: two tasks with attachments, one without, the answer key beside them."""
    split = tmp_path / "GAIA" / "2023" / "validation"
    split.mkdir(parents=True)
    (split / "mine.txt").write_text("The colour is blue.\n")
    (split / "theirs.txt").write_text("The other task's secret: 9182.\n")
    (split / "alias.txt").symlink_to(split / "metadata.jsonl")  # a symlink in the folder, attached to no task
    rows = [
        {"task_id": "t1", "Question": "Colour?", "Level": 1, "Final answer": "blue-7731", "file_name": "mine.txt"},
        {"task_id": "t2", "Question": "Secret?", "Level": 1, "Final answer": "9182", "file_name": "theirs.txt"},
        {"task_id": "t3", "Question": "2 + 2?", "Level": 1, "Final answer": "4-4-4", "file_name": ""},
    ]
    (split / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return split


def test_user_copy_answer_key_and_other_tasks_files_are_unreachable(user_copy):
    env = gym.make("AWorld/GAIA-v0", data_dir=str(user_copy.parent.parent), search="none",
                   python_server="inprocess", max_turns=20)  # fmt: skip
    try:
        env.reset(options={"task_id": "t1"})
        spellings = [*_spellings(user_copy, "mine.txt"), "alias.txt", str(user_copy / "alias.txt")]
        _assert_refused(env, [*spellings, "theirs.txt", str(user_copy / "theirs.txt"), "../validation/theirs.txt"],
                        ["blue-7731", "9182", "4-4-4"])  # fmt: skip
        obs, *_ = env.step(_calls(["mine.txt"]))
        assert "The colour is blue." in obs
        env.reset(options={"task_id": "t3"})  # no attachment: nothing at all is readable
        _assert_refused(env, ["metadata.jsonl", "mine.txt", "theirs.txt"], ["blue-7731", "9182", "4-4-4"])
    finally:
        env.close()


def test_loader_refuses_an_attachment_that_is_the_answer_key_or_outside_the_split(user_copy):
    rows = [json.loads(x) for x in (user_copy / "metadata.jsonl").read_text().splitlines()]
    for name in ("metadata.jsonl", "alias.txt", "../../../../etc/passwd", "/etc/passwd"):
        bad = [{**rows[0], "file_name": name}, *rows[1:]]
        (user_copy / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bad))
        with pytest.raises(TaskError, match="attachment"):
            load_gaia(user_copy)


def test_search_corpus_may_not_hold_the_answer_key(user_copy):
    for docs in (user_copy, user_copy.parent.parent):
        with pytest.raises(ConfigError, match="answer"):
            gym.make("AWorld/GAIA-v0", data_dir=str(user_copy), search_docs=str(docs), python_server="inprocess")


def test_file_server_refuses_client_named_files_outside_its_roots(user_copy, tmp_path):
    """What the hub names as the task's attachments is bounded by the server's roots and deny list too (a served
    env's client cannot make it read a host file or the answer key)."""
    outside = tmp_path / "host-secret.txt"
    outside.write_text("host secret 5521")
    server = build_server(roots=[user_copy], deny=[user_copy / "metadata.jsonl"])
    with ToolHub(servers={"files": server}) as hub:
        hub.begin_episode(files=[str(outside), str(user_copy / "metadata.jsonl"), str(user_copy / "alias.txt"),
                                 str(user_copy / ".." / "validation" / "mine.txt")])  # fmt: skip
        for path in (str(outside), "host-secret.txt", "metadata.jsonl", "alias.txt"):
            r = hub.call([ToolCall("read_file", {"path": path})])[0]
            assert r.error == "tool_error" and "5521" not in r.text and "Final answer" not in r.text, r.text
        assert "blue" in hub.call([ToolCall("read_file", {"path": "mine.txt"})])[0].text
        listed = hub.call([ToolCall("list_files", {})])[0].text
        assert listed.splitlines() == [listed.splitlines()[0]] and '"mine.txt"' in listed, listed


# ----- odd names ---------------------------------------------------------------------------------------------

ODD = [" leading.txt", "trailing.txt ", "two\nlines.txt", "ünï cødé ☃.txt", 'quote"d.txt', "tab\there.txt"]


def test_odd_names_are_listed_unambiguously_and_readable(tmp_path):
    d = tmp_path / "att"
    (d / "sub").mkdir(parents=True)
    paths = []
    for i, name in enumerate(ODD):
        (d / name).write_text(f"content number {i}\n")
        paths.append(d / name)
    (d / "sub" / "metadata.jsonl").write_text('{"note": "an attachment that happens to have this name"}\n')
    paths.append(d / "sub" / "metadata.jsonl")
    with ToolHub(servers={"files": build_server(roots=[d])}) as hub:
        hub.begin_episode(files=[str(p) for p in paths])
        listed = hub.call([ToolCall("list_files", {})])[0].text
        lines = listed.splitlines()
        assert len(lines) == len(paths), listed  # one line per file: a newline in a name does not split it
        names = [json.loads(line[2 : line.index('" (') + 1]) for line in lines]
        assert names == [*ODD, "metadata.jsonl"], names
        for i, name in enumerate(ODD):
            for spelling in (name, json.dumps(name, ensure_ascii=False), f"/sandbox/files/{name}"):
                r = hub.call([ToolCall("read_file", {"path": spelling})])[0]
                assert r.text.strip() == f"content number {i}", (spelling, r.text)
        r = hub.call([ToolCall("read_file", {"path": "metadata.jsonl"})])[0]
        assert "happens to have this name" in r.text


# ----- document bombs ----------------------------------------------------------------------------------------


def _docx(path: Path, paragraphs: int) -> Path:
    """A .docx whose body is ``paragraphs`` one-letter paragraphs (python-docx writes the other parts); the body is
    streamed into the zip, so a huge one costs little memory here."""
    import docx

    docx.Document().save(str(path))
    with zipfile.ZipFile(path) as zf:
        parts = {i.filename: zf.read(i) for i in zf.infolist()}
    doc = parts.pop("word/document.xml").decode()
    start, end = doc.index("<w:body>") + len("<w:body>"), doc.index("</w:body>")
    chunk = ("<w:p><w:r><w:t>a</w:t></w:r></w:p>" * 10_000).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in parts.items():
            zf.writestr(name, data)
        with zf.open("word/document.xml", "w", force_zip64=True) as out:
            out.write(doc[:start].encode())
            for _ in range(paragraphs // 10_000):
                out.write(chunk)
            out.write(doc[end:].encode())
    return path


def _cpu_s() -> float:
    """CPU time of this process (all its threads) and of its live descendants."""
    total = sum(psutil.Process().cpu_times()[:2])
    for child in psutil.Process().children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            continue
    return total


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bombs")
    expand = _docx(d / "expand.docx", 9_000_000)  # 306 MB of XML
    slow = _docx(d / "slow.docx", 600_000)  # 20 MB of XML: many seconds of python-docx
    return {"expand": expand, "slow": slow}


def test_docx_bomb_is_refused_by_its_expansion(bombs):
    assert bombs["expand"].stat().st_size < 1 << 20  # under 1 MB on disk, 300 MB expanded
    with ToolHub(servers={"files": build_server()}, options=ToolOptions(timeout=20)) as hub:
        hub.begin_episode(files=[str(bombs["expand"])])
        t0 = time.monotonic()
        r = hub.call([ToolCall("read_file", {"path": "expand.docx"})])[0]
        took = time.monotonic() - t0
    assert r.error == "tool_error" and "expands to" in r.text, r.text
    assert took < 10, took


def test_slow_document_is_stopped_at_the_deadline_and_burns_nothing_after(bombs):
    with ToolHub(servers={"files": build_server(read_timeout_s=1.5)}, options=ToolOptions(timeout=20)) as hub:
        hub.begin_episode(files=[str(bombs["slow"])])
        t0 = time.monotonic()
        r = hub.call([ToolCall("read_file", {"path": "slow.docx"})])[0]
        took = time.monotonic() - t0
        assert r.error == "tool_error" and "took longer than 1.5 s" in r.text, r.text
        assert took < 8, took
        cpu0 = _cpu_s()
        time.sleep(1.5)
        burnt = _cpu_s() - cpu0
        alive = [
            p.cmdline() for p in psutil.Process().children(recursive=True) if "read_worker" in " ".join(p.cmdline())
        ]
    assert alive == [] and burnt < 0.5, (alive, burnt)  # the reader's work stopped with the call
    assert os.path.exists(bombs["slow"])


def test_hugging_face_cache_layout_keeps_names_and_still_denies_the_key(tmp_path):
    """A snapshot_download copy: every file a symlink to a blob outside the split folder. The model sees the
    dataset's names (the loader once resolved links, and the prompt showed the blob's hash), reads its attachment,
    and the answer key stays denied by identity."""
    blobs, split = tmp_path / "blobs", tmp_path / "snapshots" / "rev" / "2023" / "validation"
    blobs.mkdir()
    split.mkdir(parents=True)
    (blobs / "9f2c").write_text("hello from a blob\n")
    row = {"task_id": "t", "Question": "q", "Level": 1, "Final answer": "zz-917", "file_name": "a.txt"}
    (blobs / "77ab").write_text(json.dumps(row) + "\n")
    (split / "a.txt").symlink_to(blobs / "9f2c")
    (split / "metadata.jsonl").symlink_to(blobs / "77ab")
    env = gym.make("AWorld/GAIA-v0", data_dir=str(split), search="none", python_server="inprocess")
    try:
        obs, _ = env.reset(options={"task_id": "t"})
        assert 'Attached file: a.txt (read it with read_file(path="a.txt")' in obs, obs
        assert (
            '"/sandbox/files/9f2c"' in obs
        )  # where the sandbox mounts it today (sandbox/runner.py: its target's name)
        obs, *_ = env.step(_calls(["a.txt"]))
        assert "hello from a blob" in obs
        _assert_refused(env, ["metadata.jsonl", str(blobs / "77ab"), "77ab", "../../../../../blobs/77ab"], ["zz-917"])
    finally:
        env.close()
