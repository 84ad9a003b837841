"""`aworld-gym serve-env` says where it serves and how to connect, and a user's env (``--import``) is served; one
episode played as docs/training.md shows it, with the `websockets` client."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from aworld_gym.trainers.openenv import connect_help
from tests.rollout.test_cli_user_env import LAB

ROOT = Path(__file__).resolve().parents[2]


def test_connect_help_names_the_url_the_token_and_a_command():
    assert connect_help("Lab/Converter-v0", "127.0.0.1", 8000, None, False).splitlines() == [
        "serve-env: Lab/Converter-v0 at http://127.0.0.1:8000 (OpenEnv protocol: an episode per WebSocket at "
        "ws://127.0.0.1:8000/ws; GET /health, /schema, /metadata; POST /reset)",
        'serve-env: play an episode: python -m websockets ws://127.0.0.1:8000/ws, then send {"type": "reset", '
        '"data": {}} and {"type": "step", "data": {"text": "<the model\'s output>"}} (docs/training.md, serve-env)',
    ]
    lines = connect_help("AWorld/Code-v0", "0.0.0.0", 9000, "s3cret", True).splitlines()
    assert lines[1:3] == [
        "serve-env token: s3cret",
        "serve-env: every route but /health needs the token (the one above): send 'Authorization: Bearer <token>', "
        "or use http://aworld:<token>@<this-host>:9000",
    ]
    assert "python -m websockets ws://aworld:<token>@<this-host>:9000/ws" in lines[3]
    given = connect_help("AWorld/Code-v0", "::1", 9000, None, True)
    assert "s3cret" not in given and "(the one given with --token / $AWORLD_GYM_SERVE_TOKEN)" in given
    assert "http://[::1]:9000" in given


def test_serve_env_prints_how_to_connect_and_serves_a_users_env(tmp_path):
    (tmp_path / "mylab.py").write_text(LAB)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    proc = subprocess.Popen([sys.executable, "-m", "aworld_gym.cli", "serve-env", "Lab/Converter-v0", "--import",
                             "mylab", "--port", str(port)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            env=env, cwd=tmp_path, start_new_session=True)  # fmt: skip
    try:
        first = proc.stderr.readline().decode()
        assert first.startswith(f"serve-env: Lab/Converter-v0 at http://127.0.0.1:{port} (OpenEnv protocol"), first
        assert f"python -m websockets ws://127.0.0.1:{port}/ws" in proc.stderr.readline().decode()
        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                assert proc.poll() is None, "serve-env exited"
                time.sleep(0.1)
        else:
            raise AssertionError("serve-env did not come up")
        # the Python example of docs/training.md, as the page shows it
        page = (ROOT / "docs/training.md").read_text()
        example = page.split("**The same episode in Python**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
        assert example.count("ws://127.0.0.1:8000/ws") == 1
        exec(compile(example.replace(":8000/", f":{port}/"), "docs/training.md", "exec"), {})
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
