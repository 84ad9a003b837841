"""Browser-v0's observation modes on the real browser: screenshots in the message history and in ``info``,
set-of-marks labels that match the refs, element boxes, coordinate clicks only where the agent sees pixels, tabs
behind the navigation guard, and screenshot trajectories stored as files."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from aworld_gym.base.errors import ConfigError
from aworld_gym.envs.browser.observe import Element, draw_marks, marked, png_size, split_boxes
from tests.envs.browser.test_browser import browser_env, call
from tests.envs.browser.test_browser import pytestmark as needs_browser

pytestmark = needs_browser


def names(info) -> set[str]:
    return {t["function"]["name"] for t in info["tools"]}


def test_screenshot_and_text_mode_adds_the_image_to_the_same_text():
    with (
        browser_env(task="click-checkboxes") as text_env,
        browser_env(task="click-checkboxes", obs_mode="screenshot+text") as env,
    ):
        text_obs, text_info = text_env.reset(seed=3)
        obs, info = env.reset(seed=3)
        assert obs == text_obs and "images" not in text_info and "browser_mouse_click_xy" not in names(text_info)
        (png,) = info["images"]
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and png_size(png) == (640, 480)
        assert "browser_mouse_click_xy" in names(info)
        first = env.unwrapped.messages[1]["content"]
        assert first[0] == {"type": "text", "text": obs} and first[1]["image_url"]["url"].startswith("data:image/png")
        _, _, terminated, _, info = env.step(call("browser_click", target="#subbtn", element="Submit"))
        assert terminated and "images" not in info  # the task ended: no page to show
        env.reset(seed=4)
        _, _, terminated, _, info = env.step(call("browser_hover", target="#subbtn", element="Submit"))
        assert not terminated and len(info["images"]) == 1
        tail = env.unwrapped.messages[-2:]
        assert tail[0]["role"] == "tool" and "The page now:" in tail[0]["content"]  # the snapshot, as in text mode
        assert tail[1]["role"] == "user" and tail[1]["content"][1]["type"] == "image_url"


def test_screenshot_mode_with_marks_and_boxes_solves_by_coordinates_and_by_refs():
    with browser_env(task="click-checkboxes", obs_mode="screenshot", set_of_marks=True, element_boxes=True) as env:
        obs, info = env.reset(seed=1)
        utterance = env.unwrapped.utterance
        assert utterance in obs and "```yaml" not in obs and "[ref=" not in obs  # the page only as an image
        boxes = {e["name"]: e for e in info["elements"] if e["role"] in ("checkbox", "button")}
        wanted = utterance.removeprefix("Select ").removesuffix(" and click Submit.").split(", ")
        wanted = [] if wanted == ["nothing"] else wanted
        plain = Image.open(io.BytesIO(env.unwrapped.hub.run_sync(env.unwrapped._screenshot_png())))
        labelled = Image.open(io.BytesIO(info["images"][0]))
        for e in boxes.values():  # every actionable element is outlined on the image the agent got, not on the page
            x, y, w, h = (int(v) for v in e["box"])
            assert labelled.getpixel((x, y + h - 1)) != plain.getpixel((x, y + h - 1)), e
        for name in wanted:  # tick by coordinates, the centre of the box from info["elements"]
            x, y, w, h = boxes[name]["box"]
            _, _, terminated, _, info = env.step(call("browser_mouse_click_xy", x=x + w / 2, y=y + h / 2))
            assert not terminated and info["tool_results"][0]["error"] is None
            checked = {e["name"]: e for e in info["elements"]}
            assert checked[name]["ref"] == boxes[name]["ref"]
        # submit by the ref its label shows
        _, reward, terminated, _, info = env.step(
            call("browser_click", target=boxes["Submit"]["ref"], element="Submit")
        )
        assert terminated and info["score"] == 1.0


def test_set_of_marks_labels_each_actionable_element_with_its_ref():
    snapshot = (
        "- generic [ref=e2] [box=0,0,160,210]:\n"
        '  - checkbox "A \\"b\\"" [ref=e7] [box=6,55,20,13]\n'
        "  - text: A\n"
        '  - button "Submit" [ref=e10] [box=2,101,95,31]\n'
        '  - link "hidden" [ref=e11] [box=0,0,0,0]'
    )
    text, elements = split_boxes(snapshot)
    assert "[box=" not in text and "[ref=e7]" in text
    assert [e.ref for e in elements] == ["e2", "e7", "e10", "e11"] and elements[1].name == 'A "b"'
    assert elements[2].to_dict() == {"ref": "e10", "role": "button", "name": "Submit", "box": [2.0, 101.0, 95.0, 31.0]}
    assert [e.ref for e in marked(elements)] == ["e7", "e10"]  # no container, no invisible element
    blank = io.BytesIO()
    Image.new("RGB", (200, 200), "white").save(blank, format="PNG")
    out = draw_marks(blank.getvalue(), elements)
    assert out == draw_marks(blank.getvalue(), elements)  # deterministic
    image = Image.open(io.BytesIO(out))
    assert image.getpixel((2, 131)) != (255, 255, 255)  # Submit's outline (bottom-left corner)
    assert image.getpixel((150, 190)) == (255, 255, 255)  # the container e2 is not outlined
    assert image.getpixel((4, 95)) != (255, 255, 255)  # Submit's label sits above its box


def test_bad_mode_options_are_refused():
    with pytest.raises(ConfigError, match="obs_mode must be one of"):
        browser_env(obs_mode="pixels").__enter__()
    with pytest.raises(ConfigError, match="set_of_marks labels a screenshot"):
        browser_env(set_of_marks=True).__enter__()


def test_element_boxes_in_text_mode_and_the_boxes_argument_is_not_the_agents():
    with browser_env(task="click-button", element_boxes=True) as env:
        obs, info = env.reset(seed=0)
        assert "[box=" not in obs and info["elements"] and all(len(e["box"]) == 4 for e in info["elements"])
        snapshot = next(t for t in info["tools"] if t["function"]["name"] == "browser_snapshot")
        assert "boxes" not in snapshot["function"]["parameters"].get("properties", {})
        _, _, _, _, info = env.step(call("browser_snapshot", boxes=True))
        assert info["tool_results"][0]["error"] is not None


def test_tabs_open_only_the_task_site_and_the_task_goes_on_in_its_tab():
    with browser_env(task="click-test", tabs=True) as env:
        _, info = env.reset(seed=0)
        assert "browser_tabs" in names(info)
        _, _, _, _, info = env.step(call("browser_tabs", action="new", url="http://example.com/"))
        assert info["tool_results"][0]["error"] == "refused"
        obs, _, terminated, truncated, info = env.step(call("browser_tabs", action="new"))
        assert not (terminated or truncated) and "the task goes on in its own tab" in obs
        obs, _, terminated, truncated, info = env.step(call("browser_tabs", action="select", index=0))
        assert not (terminated or truncated) and "The page now:" in obs
        _, _, terminated, _, info = env.step(call("browser_click", target="#subbtn", element="Click Me!"))
        assert terminated and info["score"] == 1.0
    with browser_env(task="click-test") as env:
        _, info = env.reset(seed=0)
        assert "browser_tabs" not in names(info)


def test_a_vision_model_solves_by_coordinates_and_its_screenshots_are_files(tmp_path):
    """OpenAIPolicy sends the screenshots as image parts; a stand-in vision model (OCR) clicks by coordinates; the
    trajectory names PNG files holding exactly the images the model got, and carries no image inline."""
    from aworld_gym.rollout.driver import run_episode
    from aworld_gym.rollout.policies.openai_policy import OpenAIPolicy
    from tests.vision_standin import ScreenClicker

    with ScreenClicker() as model, browser_env(task="click-button", obs_mode="screenshot", max_turns=3) as env:
        policy = OpenAIPolicy(model="vision", base_url=model.url, retries=0)
        records = [run_episode(env, policy, env_id="AWorld/Browser-v0", seed=s, screenshots=tmp_path)
                   for s in (0, 1, 4, 5)]  # fmt: skip
        assert [r["score"] for r in records] == [1.0] * 4, [r["turns"][-1]["observation"][:300] for r in records]
        files = [Path(r["screenshot"]).read_bytes() for r in records]
        assert files == model.seen  # one turn each: the image of the first observation is what the model saw
        assert all("data:image" not in json.dumps(r.to_record()) for r in records)
        calls = [t["tool_calls"][0]["name"] for r in records for t in r["turns"]]
        assert calls == ["browser_mouse_click_xy"] * 4


def test_text_only_consumers_refuse_image_histories_loudly():
    from aworld_gym.core.episode import image_content, require_text

    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": image_content("t", [b"png"])}]
    with pytest.raises(ValueError, match="image parts"):
        require_text(messages, "token-exact training")
    require_text([{"role": "user", "content": "t"}, {"role": "assistant", "content": None}], "x")
    assert image_content("t", []) == "t"
    assert Element("e1", "button", "b", (0, 0, 1, 1)).to_dict()["box"] == [0, 0, 1, 1]


def test_cli_rollout_in_a_screenshot_mode_keeps_the_images_as_files(tmp_path):
    from aworld_gym.cli import main

    out = tmp_path / "r.jsonl"
    argv = ["rollout", "--env", "AWorld/Browser-v0", "--policy", "reference", "--episodes", "2", "--out", str(out),
            "--env-kwargs", json.dumps({"tasks": ["click-checkboxes"], "obs_mode": "screenshot+text"}),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    for rec in map(json.loads, out.read_text().splitlines()):
        assert rec["score"] == 1.0 and "data:image" not in json.dumps(rec)
        shots = [rec["screenshot"]] + [t["screenshot"] for t in rec["turns"][:-1]]  # the last step ended the task
        assert all(Path(p).parent.parent == out.with_suffix(".screenshots") for p in shots)
        assert all(png_size(Path(p).read_bytes()) == (640, 480) for p in shots)


def test_cli_rollout_in_a_screenshot_mode_on_ray_runs_without_keeping_images(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "r.jsonl"  # a process of its own: Ray stays initialised in the process that ran it
    argv = [str(Path(sys.executable).parent / "aworld-gym"), "rollout", "--env", "AWorld/Browser-v0", "--policy", "reference", "--episodes", "2", "--ray",
            "--out", str(out), "--env-kwargs", json.dumps({"tasks": ["click-test"], "obs_mode": "screenshot"}),
            "--no-progress"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["score"] for r in records] == [1.0, 1.0] and "screenshot" not in records[0]
    assert not out.with_suffix(".screenshots").exists()
