"""The README's examples run as written."""

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_mcp_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    code = blocks[0] + "\nassert reward == 1.0 and terminated\nprint('README-OK')\n"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert "README-OK" in out.stdout
    assert len(blocks[0].strip().splitlines()) <= 12


def test_readme_code_env_example_runs():
    blocks = re.findall(r"```python\n(.*?)```\n(?=\n|-|$)", README.read_text(), re.DOTALL)
    code_block = next(b for b in blocks if "AWorld/Code-v0" in b)
    code = "import gymnasium as gym\nimport aworld_gym\n" + code_block + "\nprint('CODE-OK')\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "CODE-OK" in out.stdout


def test_readme_opens_with_the_two_commands():
    head = README.read_text().split("## ", 1)[0]
    assert "make run" in head and "make test" in head


def test_readme_streaming_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    block = next(b for b in blocks if "stream_groups" in b)
    code = block + "\nassert summary.recorded == 8 and summary.successes == 8\nprint('STREAM-OK')\n"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert "STREAM-OK" in out.stdout
