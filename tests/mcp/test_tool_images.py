"""Images and resources from any tool (issue 29, item 4).

Image content and image blob resources become OpenAI image parts in ``env.messages`` and bytes in ``info["images"]``
(the path Browser-v0's screenshots take), within the hub's limits and with a line in the tool's text for each;
text-only consumers refuse such histories clearly; ``$schema``/``$id`` and task-only tools stay out of what the
model reads. Real servers throughout: the demo server with ``--images`` over stdio and streamable HTTP, the npm
server-everything over stdio, an in-process MCP server for odd content, and an OpenAI-compatible stand-in model.
"""

from __future__ import annotations

import base64
import json
import sys
from dataclasses import replace
from typing import Any

import gymnasium as gym
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.types import AudioContent, BlobResourceContents, EmbeddedResource, ImageContent, TextContent

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.base.calls import ToolCall
from aworld_gym.core.episode import require_text
from aworld_gym.mcp.demo_server import PICTURES
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.options import ToolOptions
from aworld_gym.mcp.results.images import ImageLimits, image_limits
from aworld_gym.mcp.tools import namespace
from aworld_gym.rollout.driver import run_episode
from aworld_gym.rollout.policies.openai_policy import OpenAIPolicy
from tests.fake_openai import FakeOpenAI
from tests.helpers import EVERYTHING_JS, http_server

ENV = "AWorld/MCP-v0"
RAW = {k: base64.b64decode(v) for k, v in PICTURES.items()}
DEMO = ["-m", "aworld_gym.mcp.demo_server", "--images"]
STDIO = {"mcpServers": {"demo": {"command": sys.executable, "args": DEMO}}}
TASKS = [{"id": "p", "prompt": "Which image types did the tools return?", "answer": "image/png image/jpeg image/gif"}]
ARGS = [{"format": "png"}, {"format": "jpeg"}, {"format": "gif", "as_resource": True}]
THREE = "".join(f"<tool_call>{json.dumps({'name': 'picture', 'arguments': a})}</tool_call>" for a in ARGS)
LINES = ["A 2x2 red square (png):\n[image: image/png, 79 bytes]", "A 2x2 red square (jpeg):\n[image: image/jpeg, 287 bytes]",
         "A 2x2 red square (gif):\n[image resource demo://picture.gif: image/gif, 45 bytes]"]  # fmt: skip


def image_urls(message: dict[str, Any]) -> list[str]:
    return [p["image_url"]["url"] for p in message["content"] if p["type"] == "image_url"]


def tool_texts(env: Any) -> list[str]:
    return [m["content"] for m in env.unwrapped.turns[-1]["messages"] if m["role"] == "tool"]


@pytest.fixture(params=["stdio", "streamable-http"])
def config(request):
    if request.param == "stdio":
        yield STDIO
        return
    with http_server([*DEMO, "--transport", "streamable-http"]) as url:
        yield {"mcpServers": {"demo": {"type": "streamable-http", "url": url}}}


def test_png_jpeg_and_an_image_resource_become_image_parts(config):
    env = gym.make(ENV, mcp_config=config, tasks=TASKS)
    try:
        env.reset(seed=0)
        obs, _, _, _, info = env.step(THREE)
        u = env.unwrapped
        assert info["images"] == [RAW["png"], RAW["jpeg"], RAW["gif"]] and u.observation_images == info["images"]
        last = u.messages[-1]  # one user message after the three tool messages
        assert last["role"] == "user" and [m["role"] for m in u.messages[-5:-1]] == [
            "assistant",
            "tool",
            "tool",
            "tool",
        ]
        assert image_urls(last) == [f"data:image/{k};base64,{PICTURES[k]}" for k in ("png", "jpeg", "gif")]
        ids = [c["id"] for c in info["tool_calls"]]
        captions = [p["text"] for p in last["content"] if p["type"] == "text"]
        assert captions == [f"The image returned by picture (call {i}):" for i in ids]
        assert tool_texts(env) == LINES and all(line in obs for line in LINES)  # the lines stay in the text
        records = [r["images"] for r in info["tool_results"]]
        assert records == [[{"mime_type": f"image/{k}", "bytes": len(RAW[k])}] for k in ("png", "jpeg", "gif")]
        json.dumps(info["tool_results"])  # records hold no bytes
        with pytest.raises(ValueError, match="tool_images=False"):
            require_text(u.messages, "token-exact training (a text chat template)")
        _, _, _, _, info = env.step('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>')
        assert "images" not in info and u.observation_images == [] and isinstance(u.messages[-1]["content"], str)
    finally:
        env.close()


def test_limits_drop_images_with_a_note_and_false_keeps_placeholders():
    env = gym.make(ENV, mcp_config=STDIO, tasks=TASKS)
    hub = env.unwrapped.hub
    try:
        env.reset(seed=0)
        hub.options = replace(hub.options, images={"max_image_bytes": 200})  # the JPEG (287 bytes) is too large
        _, _, _, _, info = env.step(THREE)
        assert info["images"] == [RAW["png"], RAW["gif"]]
        why = "not shown: larger than the 200-byte limit per image (max_image_bytes)"
        assert tool_texts(env)[1] == f"A 2x2 red square (jpeg):\n[image: image/jpeg, about 287 bytes, {why}]"
        assert "images" not in info["tool_results"][1] and image_urls(env.unwrapped.messages[-1])[1].startswith(
            "data:image/gif;"
        )
        hub.options = replace(hub.options, images={"max_images_per_step": 2})  # the third image, in call order
        _, _, _, _, info = env.step(THREE)
        assert info["images"] == [RAW["png"], RAW["jpeg"]]
        why = "not shown: this step shows at most 2 images (max_images_per_step)"
        assert (
            tool_texts(env)[2]
            == f"A 2x2 red square (gif):\n[image resource demo://picture.gif: image/gif, 45 bytes, {why}]"
        )
        hub.options = replace(
            hub.options, images={"max_step_image_bytes": 300}
        )  # 79 + 287 > 300: the JPEG goes, the GIF fits
        _, _, _, _, info = env.step(THREE)
        assert info["images"] == [RAW["png"], RAW["gif"]]
        assert "not shown: this step shows at most 300 image bytes (max_step_image_bytes)]" in tool_texts(env)[1]
        hub.options = replace(hub.options, images=False)  # text only: today's placeholders, no image parts anywhere
        _, _, _, _, info = env.step(THREE)
        assert "images" not in info and all("images" not in r for r in info["tool_results"])
        assert tool_texts(env)[0] == "A 2x2 red square (png):\n[image: image/png, about 79 bytes]"
        assert tool_texts(env)[2].endswith("[image resource demo://picture.gif: image/gif, about 45 bytes]")
        require_text(env.unwrapped.turns[-1]["messages"], "a text consumer")  # this turn is text only
    finally:
        env.close()


def test_tool_images_values_are_checked():
    from aworld_gym.base.errors import ConfigError

    assert image_limits(True) == ImageLimits() and not image_limits(False).enabled
    assert image_limits({"max_images_per_step": 1}).max_images_per_step == 1
    with pytest.raises(ConfigError, match="unknown key"):
        image_limits({"max_images": 1})
    with pytest.raises(ConfigError, match="positive integer"):
        image_limits({"max_image_bytes": 0})
    with pytest.raises(ConfigError, match="True, False or a dict"):
        image_limits("yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="positive integer"):
        ToolOptions(images={"max_step_image_bytes": -1})


def odd_server() -> MCPServer:
    server = MCPServer("odd", log_level="WARNING")
    svg = base64.b64encode(b"<svg xmlns='http://www.w3.org/2000/svg'/>").decode()
    webp = "UklGRjoAAABXRUJQVlA4IC4AAACwAQCdASoCAAIAAUAmJaACdLoABDAAAP7x3I/4DdfFtMv/vYL/3YL/3YL/WwAA"

    @server.tool(structured_output=False)
    def odd() -> list[Any]:
        """Content a model cannot see as an image, and one it can (WebP)."""
        return [
            ImageContent(type="image", data=svg, mime_type="image/svg+xml"),
            ImageContent(type="image", data="%%%not base64%%%", mime_type="image/png"),
            ImageContent(type="image", data=webp, mime_type="image/png"),  # declared wrongly: the bytes decide
            AudioContent(type="audio", data=base64.b64encode(b"RIFF0000WAVE").decode(), mime_type="audio/wav"),
            EmbeddedResource(type="resource", resource=BlobResourceContents(
                uri="demo://data.bin", mime_type="application/octet-stream", blob=base64.b64encode(b"x" * 30).decode())),
            TextContent(type="text", text="done"),
        ]  # fmt: skip

    @server.tool(structured_output=False)
    def huge() -> ImageContent:
        """An image far over the limit (not decoded to be refused)."""
        return ImageContent(type="image", data="A" * 8_000_000, mime_type="image/png")

    return server


def test_formats_models_cannot_take_audio_and_other_blobs_stay_text():
    with ToolHub(servers={"odd": odd_server}) as hub:
        odd, huge = hub.call([ToolCall("odd", {}, id="1"), ToolCall("huge", {}, id="2")])
    lines = odd.text.splitlines()
    assert lines[0] == "[image: image/svg+xml, 41 bytes, not shown: not an image format vision models take (PNG, " \
                       "JPEG, GIF or WebP)]"  # fmt: skip
    assert lines[1] == "[image: image/png, not shown: its data is not valid base64]"
    assert lines[2] == "[image: image/webp, 66 bytes]" and [i.mime_type for i in odd.images] == ["image/webp"]
    assert lines[3] == "[audio: audio/wav, about 12 bytes]"
    assert lines[4] == "[resource demo://data.bin: application/octet-stream, about 30 bytes]" and lines[5] == "done"
    assert huge.images == () and "about 6000000 bytes, not shown: larger than the 5000000-byte limit" in huge.text
    assert odd.error is None and huge.error is None


@pytest.mark.skipif(not EVERYTHING_JS.exists(), reason="npm install has not been run")
def test_server_everything_schema_noise_task_only_tools_and_its_image(monkeypatch):
    monkeypatch.setattr(namespace, "_reported_task_only", set())
    config = {"mcpServers": {"everything": {"command": "node", "args": [str(EVERYTHING_JS), "stdio"]}}}
    tasks = [{"id": "s", "prompt": "Show me the tiny image.", "answer": "done"}]
    said: list[str] = []  # what namespace logs at INFO, taken at the call (no logging config in the way: in the
    # full suite caplog twice saw nothing here, though the tool was hidden)
    monkeypatch.setattr(namespace.logger, "info", lambda msg, *args: said.append(msg % args))
    env = gym.make(ENV, mcp_config=config, tasks=tasks)
    try:
        _, info = env.reset(seed=0)
        hub = env.unwrapped.hub
        names = [t["function"]["name"] for t in info["tools"]]
        assert "get-tiny-image" in names and "simulate-research-query" not in names
        assert any("$schema" in t.schema for t in hub._tools.values())  # the server sends it; checks still use it
        read = json.dumps(info["tools"]) + env.unwrapped.messages[0]["content"]
        assert "$schema" not in read and '"$id"' not in read
        listed = [t.name for c in hub._conns for t in c.tools]
        assert "simulate-research-query" in listed  # the server listed it: hidden by us, not missing
        hidden = [m for m in said if "simulate-research-query" in m]
        assert len(hidden) == 1 and "MCP task" in hidden[0], said
        _, _, _, _, info = env.step('<tool_call>{"name": "get-sum", "arguments": {"a": "2"}}</tool_call>')
        assert info["tool_results"][0]["error"] == "bad_arguments"  # validated against the whole schema
        _, _, _, _, info = env.step('<tool_call>{"name": "get-tiny-image", "arguments": {}}</tool_call>')
        (png,) = info["images"]
        assert png.startswith(b"\x89PNG") and image_urls(env.unwrapped.messages[-1])[0].startswith("data:image/png;")
        assert len(png) == 4033 and "[image: image/png, 4033 bytes]" in tool_texts(env)[0]
        blob = '{"name": "get-resource-reference", "arguments": {"resourceType": "Blob", "resourceId": 1}}'
        _, _, _, _, info = env.step(f"<tool_call>{blob}</tool_call>")
        assert "[resource demo://resource/dynamic/blob/1: text/plain, about " in tool_texts(env)[0]
        assert "images" not in info
        _, _, _, _, info = env.step('<tool_call>{"name": "simulate-research-query", "arguments": {}}</tool_call>')
        assert info["tool_results"][0]["error"] == "unknown_tool"
        env2 = gym.make(ENV, mcp_config=config, tasks=tasks)
        env2.reset(seed=0)
        env2.close()
        assert len([m for m in said if "simulate-research-query" in m]) == 1  # logged once
    finally:
        env.close()


class Viewer(FakeOpenAI):
    """A vision model stand-in: asks for three pictures, then answers with the MIME types of the images it got."""

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        seen = [url.split(";")[0].removeprefix("data:") for m in body["messages"] if isinstance(m["content"], list)
                for url in image_urls(m)]  # fmt: skip
        if seen:
            return {"role": "assistant", "content": f"<answer>{' '.join(seen)}</answer>"}
        if body.get("tools"):
            calls = [{"id": f"c{i}", "type": "function", "function": {"name": "picture", "arguments": json.dumps(a)}}
                     for i, a in enumerate(ARGS)]  # fmt: skip
            return {"role": "assistant", "content": None, "tool_calls": calls}
        return {"role": "assistant", "content": THREE}


@pytest.mark.parametrize("tool_mode", ["text", "native"])
def test_an_openai_compatible_model_receives_the_images(tool_mode):
    env = gym.make(ENV, mcp_config=STDIO, tasks=TASKS)
    try:
        with Viewer() as fake:
            policy = OpenAIPolicy(model="vlm", base_url=fake.url, tool_mode=tool_mode)
            rec = run_episode(env, policy, env_id=ENV, options={"task_id": "p"})
        assert rec["termination"] == "answer" and rec["score"] == 1.0, rec["error"]
        second = fake.requests[1]["body"]["messages"]
        shown = [m for m in second if isinstance(m["content"], list)]
        assert len(shown) == 1 and second[-1] is shown[0] and second[-2]["role"] == "tool"
        received = [base64.b64decode(u.split(",", 1)[1]) for u in image_urls(shown[0])]
        assert received == [RAW["png"], RAW["jpeg"], RAW["gif"]]
    finally:
        env.close()


def test_an_endpoint_without_images_ends_the_episode_as_a_policy_error():
    env = gym.make(ENV, mcp_config=STDIO, tasks=TASKS)
    try:
        with Viewer() as fake:
            fake.fail_first = [200, 400]  # a text-only model answers the request with images 400
            policy = OpenAIPolicy(model="text-only", base_url=fake.url, backoff_s=0.01)
            rec = run_episode(env, policy, env_id=ENV, options={"task_id": "p"})
        assert rec["termination"] == "policy_error" and "400" in rec["error"]
        assert len(fake.requests) == 2  # a 4xx is not retried
    finally:
        env.close()


def test_text_only_consumers_refuse_with_the_fix_and_work_with_tool_images_false():
    pytest.importorskip("transformers")
    from aworld_gym.fixtures.tiny_qwen3 import build_tokenizer
    from aworld_gym.rollout.tokens import ChatTokens
    from aworld_gym.trainers.seam.token_rollout import scripted_episode

    chat = ChatTokens(build_tokenizer())
    env = gym.make(ENV, mcp_config=STDIO, tasks=TASKS, allow_tools=["picture"])
    try:
        actions = [THREE, "<answer>image/png image/jpeg image/gif</answer>"]
        traj = scripted_episode(env, chat, actions, options={"task_id": "p"}, budget=20_000)
        assert traj.termination == "env_error" and "tool_images=False" in traj.error
        assert "token-exact training (a text chat template) takes text messages" in traj.error
        pytest.importorskip("torch")
        from aworld_gym.rollout.policies.hf_policy import HFPolicy

        with pytest.raises(ValueError, match=r"HFPolicy .* tool_images=False"):
            HFPolicy(model="never-loaded").act(env.unwrapped, "", {})
        env.unwrapped.hub.options = replace(env.unwrapped.hub.options, images=False)
        traj = scripted_episode(env, chat, actions, options={"task_id": "p"}, budget=20_000)
        assert traj.termination == "answer" and traj.score == 1.0
    finally:
        env.close()


@pytest.mark.parametrize("setting", [False, {"max_images_per_step": 1}])
def test_the_env_option_sets_the_limits(setting):
    env = gym.make(ENV, mcp_config=STDIO, tasks=TASKS, tool_images=setting)
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step(THREE)
        if setting is False:
            assert "images" not in info and isinstance(env.unwrapped.messages[-1]["content"], str)
        else:
            assert info["images"] == [RAW["png"]]
    finally:
        env.close()
