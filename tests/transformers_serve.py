"""A real OpenAI-compatible model server for tests: ``transformers serve`` on CPU with a tiny Qwen3 that calls tools.

:func:`train_tool_caller` saves a tiny offline Qwen3 fine-tuned on the tool-choice demonstrations of
``aworld_gym.fixtures.toy`` (always the right tool), in both prompt formats of ``OpenAIPolicy``: tools listed in the
system prompt (``tool_mode="text"``) and tools sent as the request's ``tools`` (``tool_mode="native"``).
:class:`TransformersServe` runs ``transformers serve <folder>`` as a child process (its own process group) on
127.0.0.1 and can kill and restart it on the same port.

From a checkout: ``python -m tests.transformers_serve runs/tiny-qwen3`` builds the model and prints the commands.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from aworld_gym.core.prompts import render_system_prompt
from aworld_gym.fixtures.toy import tool_choice_env_kwargs
from aworld_gym.mcp.transports.shared import free_port
from aworld_gym.rollout.tokens import ChatTokens

ENV = "AWorld/MCP-v0"
OPS = ("add", "multiply")


def env_kwargs() -> dict[str, Any]:
    """The tool-choice env of these tests: six tasks, "add" or "multiply" 3 and 4, in three wordings each."""
    return tool_choice_env_kwargs(ops=OPS)


class NativeChat(ChatTokens):
    """Prompts as ``OpenAIPolicy(tool_mode="native")`` sends them: the preamble alone as the system turn, and the
    tools as the request's ``tools`` (rendered into the system turn by the chat template)."""

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]], preamble: str) -> None:
        super().__init__(tokenizer, {"tools": tools})
        self.system = {"role": "system", "content": render_system_prompt([], preamble)}

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        return super().prompt_ids([self.system, *messages[1:]])


def train_tool_caller(folder: str | Path, steps: int = 150, lr: float = 3e-3, seed: int = 0, threads: int = 1) -> Path:
    """Build the tiny Qwen3, fine-tune it to call the right tool and answer with its result, save it to ``folder``.

    ``threads``: torch threads while training (restored after). One is the fastest on a shared machine: on 2 busy
    cores two threads took 2.6x the wall time (130 vs 49 CPU-seconds). Returns the folder (``config.json``, weights,
    tokenizer with the Qwen3 chat template)."""
    import gymnasium as gym
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3
    from aworld_gym.fixtures.toy import demonstrations, warm_start

    out = Path(folder)
    base = build_tiny_qwen3(out.with_name(out.name + "-base"))
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    env = gym.make(ENV, **env_kwargs())
    try:
        demos = demonstrations(env, ChatTokens(tok), wrong_rate=0.0, copies=4, seed=seed)
        demos += demonstrations(
            env, NativeChat(tok, env.unwrapped.tools, env.unwrapped.preamble), wrong_rate=0.0, copies=4, seed=seed
        )
    finally:
        env.close()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        warm_start(model, demos, steps=steps, lr=lr, batch_size=8, seed=seed)
    finally:
        torch.set_num_threads(before)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def serve_command() -> list[str]:
    """``transformers serve``: the console script beside this Python, else the one on PATH."""
    local = Path(sys.executable).parent / "transformers"
    exe = str(local) if local.exists() else shutil.which("transformers")
    if exe is None:
        raise FileNotFoundError("the `transformers` command is missing: pip install 'transformers[serving]'")
    return [exe, "serve"]


class TransformersServe:
    """``transformers serve <folder>`` on 127.0.0.1 (a free port, kept across restarts), pinned to that model.

    The model name for requests is the folder path as given (what ``/v1/models`` lists); the server answers 400
    to any other name.
    """

    def __init__(self, folder: str | Path, log: str | Path, port: int | None = None) -> None:
        self.model = str(folder)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = Path(log)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts: list[float] = []  # seconds each start took, to a healthy /health

    def start(self, timeout_s: float = 120.0) -> None:
        cmd = [*serve_command(), self.model, "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu",
               "--log-level", "warning"]  # fmt: skip
        # One torch thread: the model is tiny, and on a busy machine more threads only contend.
        env = {"OMP_NUM_THREADS": "1", **os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
        t0 = time.monotonic()
        with self.log.open("ab") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited with {self.proc.returncode}: see {self.log}")
            if self.get("/health") is not None:
                self.starts.append(time.monotonic() - t0)
                return
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"transformers serve was not healthy after {timeout_s}s: see {self.log}")

    def get(self, path: str) -> dict[str, Any] | None:
        """GET ``path`` (e.g. ``/health``, ``/v1/models``) as JSON; ``None`` while the server does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, urllib.error.URLError, json.JSONDecodeError):
            return None

    def stop(self) -> None:
        """SIGKILL the server's process group (no graceful shutdown: requests in flight see a dropped connection)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self.proc = None

    def __enter__(self) -> TransformersServe:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cli_env_kwargs() -> dict[str, Any]:
    """:func:`env_kwargs` for ``aworld-gym rollout --env-kwargs``: JSON, the toy server as a stdio child process."""
    kwargs = env_kwargs()
    root = str(Path(__file__).resolve().parents[1])
    kwargs["mcp_config"] = {"mcpServers": {"calc": {"command": sys.executable, "args": ["-m", "tests.transformers_serve", "--mcp"], "cwd": root}}}  # fmt: skip
    return kwargs


def main(argv: list[str]) -> None:
    """``--mcp``: the toy tool server on stdio; else build the model into ``argv[0]`` and print the commands."""
    if argv[:1] == ["--mcp"]:
        from aworld_gym.fixtures.toy import build_toy_server

        build_toy_server().run("stdio")
        return
    folder = train_tool_caller(argv[0] if argv else "runs/tiny-qwen3")
    (folder / "env_kwargs.json").write_text(json.dumps(cli_env_kwargs()))
    print(f"saved {folder} and {folder / 'env_kwargs.json'}; then:")
    print(f"  OMP_NUM_THREADS=1 transformers serve {folder} --host 127.0.0.1 --port 8000 --device cpu &")
    print(f"  aworld-gym rollout --env {ENV} --policy openai --base-url http://127.0.0.1:8000/v1 --model {folder} \\")
    print(f'      --env-kwargs "$(cat {folder / "env_kwargs.json"})" --episodes 24')


if __name__ == "__main__":
    main(sys.argv[1:])
