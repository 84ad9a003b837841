"""describe_image and transcribe_audio against local stand-in endpoints that check what they receive (the image's
bytes as a data URI, the audio file as multipart, the model, the key) and answer; their refusals (outside the
attachments, wrong kind, no endpoint configured, a failing endpoint) are readable tool errors."""

from __future__ import annotations

import base64
import json
import re
from http.server import BaseHTTPRequestHandler

import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.envs.gaia.files_server import build_server
from aworld_gym.mcp.hub import ToolHub
from tests.media_standins import send_json, serve_v1

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
AUDIO = b"ID3\x03\x00fake-mp3-frames" * 10


class StandIn:
    """An OpenAI-compatible vision + transcription stand-in that checks each request."""

    def __init__(self, fail: int | None = None) -> None:
        self.seen: list[dict] = []
        self.fail = fail
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                stand_in.seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
                if stand_in.fail:
                    return self._send(stand_in.fail, {"error": {"message": "overloaded"}})
                if self.path == "/v1/chat/completions":
                    req = json.loads(body)
                    parts = req["messages"][0]["content"]
                    uri = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
                    question = next(p["text"] for p in parts if p["type"] == "text")
                    ok = uri == "data:image/png;base64," + base64.b64encode(PNG).decode() and req["model"] == "vlm"
                    text = f"A single red pixel. (asked: {question})" if ok else "WRONG REQUEST"
                    return self._send(200, {"choices": [{"message": {"role": "assistant", "content": text}}]})
                if self.path == "/v1/audio/transcriptions":
                    ok = AUDIO in body and re.search(rb'name="model"\r\n\r\nwhisper', body) is not None
                    ok = ok and b'filename="talk.mp3"' in body
                    return self._send(200, {"text": "the meeting is at noon" if ok else "WRONG REQUEST"})
                self._send(404, {})

            def _send(self, status, payload):
                send_json(self, status, payload)

        self.server, self.url = serve_v1(Handler)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def files(tmp_path):
    (tmp_path / "pixel.png").write_bytes(PNG)
    (tmp_path / "talk.mp3").write_bytes(AUDIO)
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "secret.png").write_bytes(PNG)
    return tmp_path


def call(hub, tool, **args):
    return hub.call([ToolCall(tool, args)])[0]


def test_images_and_audio_go_to_the_configured_endpoints(files):
    stand_in = StandIn()
    try:
        server = build_server(vision_model={"base_url": stand_in.url, "model": "vlm", "api_key": "sk-v"},
                              audio_model={"base_url": stand_in.url, "model": "whisper"})  # fmt: skip
        with ToolHub(servers={"files": server}) as hub:
            hub.begin_episode(files=[str(files / "pixel.png"), str(files / "talk.mp3"), str(files / "notes.txt")])
            r = call(hub, "describe_image", path="pixel.png", question="What color is it?")
            assert r.error is None and r.text == "A single red pixel. (asked: What color is it?)", r.text
            r = call(hub, "transcribe_audio", path="talk.mp3")
            assert r.error is None and r.text == "the meeting is at noon", r.text
            assert [s["auth"] for s in stand_in.seen] == ["Bearer sk-v", "Bearer EMPTY"]
            # Refusals: outside the attachments, the wrong kind of file; nothing is sent.
            sent = len(stand_in.seen)
            r = call(hub, "describe_image", path=str(files / "secret.png"))
            assert r.error == "tool_error" and "access denied" in r.text
            r = call(hub, "describe_image", path="notes.txt")
            assert r.error == "tool_error" and "is not an image" in r.text
            r = call(hub, "transcribe_audio", path="pixel.png")
            assert r.error == "tool_error" and "is not an audio file" in r.text
            assert len(stand_in.seen) == sent
            assert "OCR" in call(hub, "read_file", path="pixel.png").text  # read_file keeps its offline reading
    finally:
        stand_in.close()


def test_without_an_endpoint_the_tools_say_how_to_configure_one(files, monkeypatch):
    for var in ("AWORLD_GYM_VISION_BASE_URL", "AWORLD_GYM_VISION_MODEL", "AWORLD_GYM_AUDIO_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    with ToolHub(servers={"files": build_server()}) as hub:
        hub.begin_episode(files=[str(files / "pixel.png"), str(files / "talk.mp3")])
        r = call(hub, "describe_image", path="pixel.png")
        assert r.error == "tool_error" and "vision_model={'base_url': ..., 'model': ...}" in r.text
        assert "AWORLD_GYM_VISION_BASE_URL" in r.text
        r = call(hub, "transcribe_audio", path="talk.mp3")
        assert r.error == "tool_error" and "AWORLD_GYM_AUDIO_MODEL" in r.text


def test_the_environment_configures_them_and_a_failing_endpoint_is_a_readable_error(files, monkeypatch):
    stand_in = StandIn(fail=503)
    try:
        monkeypatch.setenv("AWORLD_GYM_VISION_BASE_URL", stand_in.url)
        monkeypatch.setenv("AWORLD_GYM_VISION_MODEL", "vlm")
        with ToolHub(servers={"files": build_server()}) as hub:
            hub.begin_episode(files=[str(files / "pixel.png")])
            r = call(hub, "describe_image", path="pixel.png")
            assert r.error == "tool_error" and r.text.startswith("Error: the vision model endpoint failed: HTTP 503")
            assert len(r.text.splitlines()) == 1
    finally:
        stand_in.close()
    from aworld_gym.base.errors import ConfigError

    with pytest.raises(ConfigError, match="needs 'base_url' and 'model'"):
        build_server(audio_model={"url": "http://x"})
