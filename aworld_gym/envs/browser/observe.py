"""Browser-v0's observation modes: screenshots, set-of-marks labels and element bounding boxes.

``obs_mode="text"`` shows the accessibility snapshot (refs the tools accept); ``"screenshot"`` shows a PNG of the
viewport instead, ``"screenshot+text"`` both. With ``set_of_marks=True`` every element that has a ref is outlined
on the screenshot and labelled with its ref (``e5``), so a vision model can name it to the same tools. Boxes come
from the same snapshot (``browser_snapshot`` with ``boxes``): viewport CSS pixels, which is also the screenshot's
scale, so labels, ``info["elements"]`` and coordinate clicks agree.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

OBS_MODES = ("text", "screenshot", "screenshot+text")

# The screenshot, taken by Playwright code in the server process: its answer is the PNG as a base64 JSON string.
# (browser_take_screenshot would also write each image to the server's output folder, a file per step.)
SCREENSHOT_CODE = (
    "async (page) => (await page.screenshot({type: 'png', scale: 'css', caret: 'hide', animations: 'disabled'}))"
    ".toString('base64')"
)

_BOX = re.compile(r" \[box=(-?[\d.]+),(-?[\d.]+),(-?[\d.]+),(-?[\d.]+)\]")
_REF_LINE = re.compile(r'^\s*- (?P<role>[\w-]+)(?: "(?P<name>(?:[^"\\]|\\.)*)")?[^\n]*?\[ref=(?P<ref>e\d+)\]')


@dataclass(frozen=True)
class Element:
    """One element of the snapshot that has a ref, with its box (x, y, width, height in viewport CSS pixels)."""

    ref: str
    role: str
    name: str
    box: tuple[float, float, float, float]

    def to_dict(self) -> dict[str, Any]:
        return {"ref": self.ref, "role": self.role, "name": self.name, "box": list(self.box)}


def split_boxes(snapshot: str) -> tuple[str, list[Element]]:
    """The snapshot as text mode shows it (no ``[box=...]``), and its elements with refs and boxes, in order."""
    elements: list[Element] = []
    for line in snapshot.splitlines():
        ref, box = _REF_LINE.match(line), _BOX.search(line)
        if ref is None or box is None:
            continue
        name = ref.group("name") or ""
        x, y, w, h = (float(v) for v in box.groups())
        elements.append(Element(ref.group("ref"), ref.group("role"), name.replace('\\"', '"'), (x, y, w, h)))
    return _BOX.sub("", snapshot), elements


# Set-of-marks: the element's outline and, at its top-left corner, a filled label with the ref. Roles that are
# only containers are left unmarked (they would cover the page in nested boxes).
_CONTAINERS = frozenset({"generic", "group", "list", "listitem", "paragraph", "document", "main", "region", "table",
                         "rowgroup", "row", "cell", "none", "presentation", "text", "img", "figure"})  # fmt: skip
_COLORS = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#008080", "#9a6324", "#800000")


def marked(elements: list[Element]) -> list[Element]:
    """The elements that get set-of-marks labels: what the agent can act on (no layout containers), visible ones."""
    return [e for e in elements if e.role not in _CONTAINERS and e.box[2] > 0 and e.box[3] > 0]


def draw_marks(png: bytes, elements: list[Element]) -> bytes:
    """``png`` with every actionable element outlined and labelled with its ref (deterministic for the same input)."""
    from PIL import Image, ImageDraw, ImageFont

    with Image.open(io.BytesIO(png)) as opened:
        image = opened.convert("RGB")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=11)
    for i, e in enumerate(marked(elements)):
        color = _COLORS[i % len(_COLORS)]
        x, y, w, h = e.box
        draw.rectangle((x, y, x + w - 1, y + h - 1), outline=color, width=1)
        left, top, right, bottom = draw.textbbox((0, 0), e.ref, font=font)
        lw, lh = right - left + 4, bottom - top + 2
        ly = y - lh if y - lh >= 0 else y  # above the box when there is room, else inside it
        draw.rectangle((x, ly, x + lw, ly + lh), fill=color)
        draw.text((x + 2 - left, ly + 1 - top), e.ref, fill="white", font=font)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def png_size(png: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
