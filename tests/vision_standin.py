"""A stand-in for a vision-language model behind an OpenAI-compatible endpoint: it reads the latest screenshot of
the request (an image part of the chat history), finds the word the task names with OCR (tesseract), and clicks
its centre by coordinates. Offline; used to run Browser-v0's screenshot mode end to end."""

from __future__ import annotations

import base64
import io
import json
import re
from typing import Any

from tests.fake_openai import FakeOpenAI

INSTRUCTION_BAR = 50  # MiniWoB++'s instruction is in the top 50 pixels: a hit there is the instruction itself


def images_of(messages: list[dict[str, Any]]) -> list[bytes]:
    """Every PNG the request carries, in order (data URIs of image parts)."""
    out = []
    for m in messages:
        if isinstance(m.get("content"), list):
            for part in m["content"]:
                if part.get("type") == "image_url":
                    url = part["image_url"]["url"]
                    assert url.startswith("data:image/png;base64,"), url[:40]
                    out.append(base64.b64decode(url.split(",", 1)[1]))
    return out


def find_word(png: bytes, word: str) -> tuple[float, float] | None:
    """The centre (CSS pixels) of ``word`` below the instruction bar, read by OCR of the 3x enlarged image."""
    import pytesseract
    from PIL import Image

    with Image.open(io.BytesIO(png)) as opened:
        image = opened.convert("L")
    big = image.resize((image.width * 3, image.height * 3))
    data = pytesseract.image_to_data(big, output_type=pytesseract.Output.DICT)
    for i, text in enumerate(data["text"]):
        x, y, w, h = (data[k][i] / 3 for k in ("left", "top", "width", "height"))
        if text.strip('.,:"').lower() == word.lower() and y > INSTRUCTION_BAR:
            return x + w / 2, y + h / 2
    return None


class ScreenClicker(FakeOpenAI):
    """Clicks the button a ``click-button`` task names, seen only in the screenshot; ``seen`` keeps every image."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[bytes] = []

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        images = images_of(messages)
        assert images, "the request carries no screenshot"
        self.seen.append(images[-1])
        first = messages[1]["content"]
        task = first[0]["text"] if isinstance(first, list) else first
        word = re.search(r'"([^"]*)"', task)
        at = find_word(images[-1], word.group(1)) if word else None
        if at is None:
            return {"role": "assistant", "content": "<answer>I cannot find it</answer>"}
        call = {"name": "browser_mouse_click_xy", "arguments": {"x": round(at[0]), "y": round(at[1])}}
        return {"role": "assistant", "content": f"<tool_call>\n{json.dumps(call)}\n</tool_call>"}
