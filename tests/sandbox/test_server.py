"""The Python-execution MCP server: per-env, per-episode work folders; one process for many envs."""

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import SandboxError
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.sandbox.server import Workspaces, build_server
from tests.helpers import child_pids, wait_until


def run(hub, code, **kw):
    return hub.call([ToolCall("run_python", {"code": code, **kw})])[0]


def test_state_is_per_session_and_reset_per_episode():
    server = build_server()
    a, b = ToolHub(servers={"py": server}).start(), ToolHub(servers={"py": server}).start()
    try:
        a.begin_episode()
        b.begin_episode()
        assert "exit code 0" in run(a, "open('note.txt', 'w').write('from a')").text
        assert "from a" in run(a, "print(open('note.txt').read())").text  # persists within the episode
        assert "FileNotFoundError" in run(b, "print(open('note.txt').read())").text  # other env: own folder
        a.begin_episode()
        assert "FileNotFoundError" in run(a, "print(open('note.txt').read())").text  # new episode: fresh folder
        assert len(server.workspaces) == 2
    finally:
        a.close()
        b.close()


def test_output_truncation_timeouts_and_errors_are_results():
    hub = ToolHub(servers={"py": build_server()}).start()
    try:
        r = run(hub, "print('x' * 100000)")
        assert r.error is None and "output truncated" in r.text
        r = run(hub, "while True: pass", timeout_s=1)
        assert "wall-clock" in r.text and r.error is None
        r = run(hub, "raise SystemExit(3)")
        assert r.text.startswith("exit code 3")
        r = run(hub, "def f(:\n  pass")
        assert "SyntaxError" in r.text
        assert run(hub, "print(1)", timeout_s="soon").error == "bad_arguments"
    finally:
        hub.close()


def test_workspaces_evict_oldest_sessions(tmp_path):
    ws = Workspaces(tmp_path / "w", max_sessions=2)
    p1 = ws.get("s1", 1)
    ws.get("s2", 1)
    ws.get("s3", 1)
    assert not p1.exists() and len(ws) == 2
    p3 = ws.get("s3", 1)
    assert ws.get("s3", 2) != p3 and not p3.exists()
    ws.close()
    assert not (tmp_path / "w").exists()


def test_workspaces_whose_root_was_removed_make_it_again(tmp_path, caplog):
    """A server's work root removed under it (a temp cleaner) failed every new session with FileNotFoundError."""
    import shutil

    mine = Workspaces()  # the server's own root, in the temp folder: a new one
    chosen = Workspaces(tmp_path / "w")  # a root the caller chose: made again where it was
    try:
        for ws in (mine, chosen):
            old = ws.root
            ws.get("s1", 1)
            shutil.rmtree(old)
            with caplog.at_level("WARNING", logger="aworld_gym.base.scratch"):
                path = ws.get("s2", 1)
            assert path.is_dir() and path.parent == ws.root and str(old) in caplog.text
            assert (ws.root == old) is (ws is chosen)
            assert not ws.get("s1", 1).exists()  # a running episode's folder is not replaced: its files are lost
            assert ws.get("s1", 2).is_dir()  # its next episode gets one
    finally:
        mine.close()
        chosen.close()
    assert not mine.root.exists() and not chosen.root.exists()
    with pytest.raises(SandboxError, match="closed"):  # a late call after close: refused, no root brought back
        mine.get("s3", 1)
    assert not mine.root.exists()


def test_server_survives_200_executions_with_bounded_memory():
    """One stdio server process, 200 consecutive sandboxed executions; its RSS must stay flat."""
    before = child_pids()
    hub = ToolHub({"mcpServers": {"py": {"command": sys.executable, "args": ["-m", "aworld_gym.sandbox.server"]}}})
    hub.start()
    try:
        (server_pid,) = child_pids() - before
        proc = psutil.Process(server_pid)
        rss = []
        for i in range(200):
            r = run(hub, f"import json; print(json.dumps({{'i': {i}, 'data': 'x' * 2000}}))")
            assert json.loads(r.text.split("--- stdout ---\n", 1)[1])["i"] == i
            if i in (49, 199):
                rss.append(proc.memory_info().rss)
        growth_mb = (rss[1] - rss[0]) / 2**20
        print(f"server RSS after 50: {rss[0] / 2**20:.1f} MiB, after 200: {rss[1] / 2**20:.1f} MiB")
        assert growth_mb < 15, f"server RSS grew {growth_mb:.1f} MiB over 150 executions"
        assert proc.is_running()
        assert folders(server_pid)  # its work and scratch folders, named by its PID
    finally:
        hub.close()
    assert wait_until(lambda: not (child_pids() - before))
    assert not folders(server_pid)


def folders(pid: int) -> list[Path]:
    """The sandbox server ``pid``'s work and scratch folders (``aworld_gym.base.scratch`` names)."""
    return list(Path(tempfile.gettempdir()).glob(f"aworld-sandbox-*-{pid}-*"))


def test_a_sigtermed_stdio_server_removes_its_folders():
    """SIGTERM (what a client sends a server that outlived its closed stdin) runs the server's exit clean-up."""
    proc = subprocess.Popen([sys.executable, "-m", "aworld_gym.sandbox.server"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        assert wait_until(lambda: len(folders(proc.pid)) >= 2, 60)  # work + scratch: made at start
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                 "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
        proc.stdin.write((json.dumps(hello) + "\n").encode())
        proc.stdin.flush()
        assert b'"result"' in proc.stdout.readline()  # serving, its stdin open and read by the SDK's thread
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 128 + signal.SIGTERM  # at once: not held by the stdin reader
        assert not folders(proc.pid)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("n_envs", [6])
def test_many_envs_share_one_server_process(n_envs):
    import gymnasium as gym

    import aworld_gym  # noqa: F401

    before = child_pids()
    envs = [gym.make("AWorld/Code-v0") for _ in range(n_envs)]
    try:
        for e in envs:
            e.reset(options={"task_index": 0})
        spawned = child_pids() - before
        servers = [p for p in spawned if "aworld_gym.sandbox.server" in " ".join(psutil.Process(p).cmdline())]
        assert len(servers) == 1, f"{len(servers)} Python-execution servers for {n_envs} envs"
        call = '<tool_call>{"name": "run_python", "arguments": {"code": "import os; print(len(os.listdir()))"}}</tool_call>'
        envs[0].step('<tool_call>{"name": "run_python", "arguments": {"code": "open(\'f\', \'w\')"}}</tool_call>')
        assert "\n1\n" in envs[0].step(call)[0]
        assert "\n0\n" in envs[1].step(call)[0]
    finally:
        for e in envs:
            e.close()
    assert wait_until(lambda: not (child_pids() - before), 20)


INPROCESS_ENVS = """
import gc, glob, json, os, tempfile
import gymnasium as gym
import psutil
import aworld_gym
call = '<tool_call>{"name": "run_python", "arguments": {"code": "open(\\'f\\', \\'w\\'); print(7 * 6)"}}</tool_call>'
for i in range(4):
    env = gym.make("AWorld/Code-v0", server="inprocess")
    env.reset(seed=i)
    assert "42" in env.step(call)[0]
    env.close()
    del env
    gc.collect()
    me = psutil.Process()
    print(json.dumps({"pid": os.getpid(), "direct": len(me.children()),
                      "children": [p.pid for p in me.children(recursive=True)],
                      "folders": len(glob.glob(f"{tempfile.gettempdir()}/aworld-sandbox-*-{os.getpid()}-*"))}))
"""


def test_envs_with_an_inprocess_server_share_one_sandbox_and_leave_nothing_after_exit(tmp_path):
    """``server="inprocess"``: every env's server object used to start a sandbox (a warm zygote and two temp
    folders) of its own that nothing closed: 4 envs made one after another left 4 zygotes and 8 folders. Now they
    share the process's sandbox and work folders, and the process leaves none of them when it exits."""
    out = subprocess.run([sys.executable, "-c", INPROCESS_ENVS], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 4
    assert [r["direct"] for r in rows] == [1] * 4  # one sandbox (its zygote's bwrap), not one more per env
    assert {len(r["children"]) for r in rows} == {len(rows[0]["children"])}
    assert {r["folders"] for r in rows} == {rows[0]["folders"]} and rows[0]["folders"] <= 2
    pid = rows[0]["pid"]
    assert wait_until(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                                      for r in rows for p in r["children"]), 20)  # fmt: skip
    assert list(Path(tempfile.gettempdir()).glob(f"aworld-sandbox-*-{pid}-*")) == []


def test_a_killed_shared_server_is_restarted_at_the_same_url():
    import gymnasium as gym

    import aworld_gym  # noqa: F401

    env = gym.make("AWorld/Code-v0")
    call = '<tool_call>{"name": "run_python", "arguments": {"code": "print(6 * 7)"}}</tool_call>'
    try:
        env.reset(options={"task_index": 0})
        shared = env.unwrapped.local_server("python")
        url, proc, starts = shared.url, shared.proc, shared.starts
        proc.kill()
        proc.wait()
        assert folders(proc.pid)  # a killed server cannot remove its own folders
        obs, *_, info = env.step(call)
        assert info["truncation_reason"] == "env_crash"
        env.reset(options={"task_index": 0})  # restarts the server, at the same URL
        assert shared.url == url and shared.proc is not proc and shared.starts == starts + 1
        assert not folders(proc.pid)  # the new server removed the killed one's at its start
        assert "\n42\n" in env.step(call)[0]
    finally:
        env.close()


def test_clients_cannot_hand_in_private_files(tmp_path):
    import os

    secret = tmp_path / "private" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("top secret")
    os.chmod(secret.parent, 0o700)
    allowed = tmp_path / "data"
    allowed.mkdir()
    (allowed / "task.txt").write_text("task data")
    os.chmod(allowed, 0o700)
    read = "import os; print(sorted(os.listdir('/sandbox/files')) if os.path.isdir('/sandbox/files') else [])"
    hub = ToolHub(servers={"py": build_server(file_roots=(str(allowed),))}).start()
    try:
        hub.begin_episode(files=[str(secret), str(allowed / "task.txt")])
        out = run(hub, read).text
        assert "task.txt" in out and "secret.txt" not in out
    finally:
        hub.close()


def test_the_shared_server_wants_its_token():
    """Only the envs of the process that started the shared server can use it."""
    import gymnasium as gym
    import pytest

    import aworld_gym  # noqa: F401
    from aworld_gym.base.errors import ServerError

    env = gym.make("AWorld/Code-v0")
    try:
        env.reset(options={"task_index": 0})
        url = env.unwrapped.local_server("python").url
        with pytest.raises(ServerError, match="'python'"):
            ToolHub({"mcpServers": {"python": {"type": "streamable-http", "url": url}}}).start()
        wrong = {"type": "streamable-http", "url": url, "headers": {"Authorization": "Bearer guess"}}
        with pytest.raises(ServerError):
            ToolHub({"mcpServers": {"python": wrong}}).start()
        call = '<tool_call>{"name": "run_python", "arguments": {"code": "print(1)"}}</tool_call>'
        assert "\n1\n" in env.step(call)[0]  # the env itself is let in
    finally:
        env.close()


def test_run_shell_runs_bash_in_the_same_sandbox(tmp_path):
    """``run_shell``: bash with the usual tools, the task's attachments read-only, the episode's work folder shared
    with run_python, no network, the same limits; Code-v0 does not offer it unless asked, GAIA-v0 does."""
    import sqlite3
    import zipfile

    import gymnasium as gym

    import aworld_gym  # noqa: F401

    data = tmp_path / "data"
    data.mkdir()
    with zipfile.ZipFile(data / "bundle.zip", "w") as z:
        z.writestr("notes/a.txt", "apple\nbanana\napricot\n")
    db = sqlite3.connect(data / "shop.db")
    db.execute("create table items(name text, price real)")
    db.executemany("insert into items values (?, ?)", [("pen", 1.5), ("book", 12.0), ("bag", 30.0)])
    db.commit()
    db.close()
    hub = ToolHub(servers={"py": build_server(file_roots=(str(data),))}).start()

    def shell(command, **kw):
        return hub.call([ToolCall("run_shell", {"command": command, **kw})])[0]

    try:
        hub.begin_episode(files=[str(data / "bundle.zip"), str(data / "shop.db")])
        r = shell("unzip -o -q /sandbox/files/bundle.zip -d . && grep -c '^a' notes/a.txt")
        assert r.error is None and r.text.startswith("exit code 0") and "\n2\n" in r.text, r.text
        assert "apricot" in run(hub, "print(open('notes/a.txt').read())").text  # the same work folder
        r = shell("sqlite3 /sandbox/files/shop.db 'select sum(price) from items where price > 10'")
        assert "42.0" in r.text, r.text
        r = shell("echo x > /sandbox/files/shop.db")
        assert r.text.startswith("exit code 1") and "Read-only file system" in r.text, r.text
        r = shell("python3 -c \"import urllib.request as u; u.urlopen('http://1.1.1.1', timeout=2)\"")
        assert "Network is unreachable" in r.text or "URLError" in r.text, r.text
        r = shell("sleep 30", timeout_s=1)
        assert "wall-clock" in r.text and r.error is None, r.text
        assert shell("exit 7").text.startswith("exit code 7")
        assert hub.call([ToolCall("run_shell", {"cmd": "ls"})])[0].error == "bad_arguments"
    finally:
        hub.close()
    code = gym.make("AWorld/Code-v0")
    gaia = gym.make("AWorld/GAIA-v0", python_server="inprocess")
    try:
        names = [t["function"]["name"] for t in code.reset(options={"task_index": 0})[1]["tools"]]
        assert "run_shell" not in names and "run_python" in names
        names = [t["function"]["name"] for t in gaia.reset(options={"task_index": 0})[1]["tools"]]
        assert "run_shell" in names and "run_python" in names
    finally:
        code.close()
        gaia.close()
