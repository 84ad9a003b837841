"""Every headline figure in README.md is the number its benchmark wrote to benchmarks/results/: a figure changes with
its JSON or this test fails (the README names the JSON of each row)."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import ROOT

RESULTS = ROOT / "benchmarks" / "results"
GYM_DEFAULT, GYM_POOLED = "aworld-gym default (1 server per env)", 'aworld-gym opt-in "pool": 2'
AWORLD_EACH, AWORLD_LIST = "aworld: Agent+Task per episode", "aworld: Runners.run_task(list of C), shared Sandbox"
# Which of a throughput row's two clocks (benchmarks/clocks.py) README quotes: "_whole", the whole run a user waits for,
# start-up and teardown included ("" would be the steady window; issue 47).
CLOCK = "_whole"


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def headline_rows() -> dict[str, str]:
    """README's headline table: JSON file named in the row -> the row's text."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Headline figures") : text.index("## Documentation")]
    rows = {}
    for line in table.splitlines():
        m = re.search(r"\(`([\w.]+\.json)`\)", line)
        if line.startswith("|") and m:
            rows[m.group(1)] = line
    return rows


def rate(row: dict, key: str = "episodes_per_s", clock: str | None = None) -> float:
    """A throughput row's rate on README's clock (:data:`CLOCK`), or on ``clock`` ("" window, "_whole" whole run)."""
    name = key + (CLOCK if clock is None else clock)
    assert name in row, f"{row.get('framework') or row.get('way') or row} has no {name}: re-run its benchmark"
    return row[name]


def whole_run(row: dict, key: str = "episodes_per_s") -> str:
    """The whole-run figure of a row, as README would print it, with what the window leaves out: ``4.95 (whole run
    44.2 s: 32.0 s start-up + 11.9 s window + 0.3 s teardown)``."""
    parts = (f"{row['startup_s']:.1f} s start-up + {row['window_s']:.1f} s window + {row['teardown_s']:.1f} s teardown"
             if row.get("startup_s") is not None else f"{row['window_s']:.1f} s window + {row['outside_window_s']:.1f} s outside it")  # fmt: skip
    return f"{rate(row, key, '_whole'):.2f} (whole run {row['whole_s']:.1f} s: {parts})"


def expected() -> dict[str, list[str]]:
    """What each row must say, formatted from its JSON."""
    scaling = load("rollout_scaling.json")["whole_command"]
    steps = [r["ratio_vs_sync_bare"] for r in load("step_overhead.json")["rows"]]
    sandbox = load("sandbox.json")
    by_way = {(r["way"], r["code"]): r for r in sandbox["rows"]}
    side = {(r["framework"], r["mode"]): r for r in load("peers_browser.json")["rows"]}
    shared, own, gym = side[("aworld-gym", "shared")], side[("aworld-gym", "own")], side[("browsergym", "own-browser")]
    peers = {(r["framework"], r["concurrency"], r["latency_s"]): r for r in load("peers.json")["rows"]}
    gym_default, gym_pool = peers[(GYM_DEFAULT, 64, 1.0)], peers[(GYM_POOLED, 64, 1.0)]
    aworld_each, aworld_list = peers[(AWORLD_EACH, 64, 1.0)], peers[(AWORLD_LIST, 64, 1.0)]
    ours = {(r["framework"], r["concurrency"], r["latency_s"]): r for r in load("peers_ours.json")["rows"]}
    ours_default, ours_pool = ours[(GYM_DEFAULT, 64, 1.0)], ours[(GYM_POOLED, 64, 1.0)]
    soak = load("soak.json")
    grpo = load("grpo_tool_choice.json")
    seeds = grpo["seeds"]
    ray = load("ray_pool.json")
    warm, loss = ray["warm_pool"], ray["node_loss"]["check"]
    scale = {(r["row"], r["envs"]): r for r in load("browser_scale.json")["rows"]}
    big, faults = scale[("ramp", 128)], next(r for r in scale.values() if r["row"] == "faults")
    return {
        "browser_scale.json": [f"Browser-v0 at {big['envs']} concurrent envs", f"{big['browsers']} shared browsers",
                               f"{big['solved']}/{big['episodes']} solved",
                               f"{big['pss_mb_per_env']:.1f} MB PSS per env", f"{big['orphans']} orphans",
                               f"at {faults['envs']} envs", f"{faults['faults']['hit']} episodes the faults reached",
                               f"{faults['faults']['hit_status']['failed']} scored 0"],
        "ray_pool.json": [f"efficiency {warm['later_efficiency']:.2f} after the first call",
                          f"one-shot: {warm['rows'][0]['efficiency']:.2f}",
                          f"{loss['distinct_jobs']:,} jobs recorded exactly once",
                          f"the lost node's {loss['jobs_on_lost_node_rerun']} re-run",
                          f"concurrency {warm['rows'][0]['concurrency']}"],
        "rollout_scaling.json": [f"**{scaling['ratio']:.0f}x**", f"{scaling['parallel']['episodes']} episodes",
                                 f"concurrency {scaling['parallel']['concurrency']}"],
        "step_overhead.json": [f"{min(steps):.2f}-{max(steps):.2f}x"],
        "sandbox.json": [f"{by_way[('warm', 'print(1)')]['p50_ms']:.1f} ms median",
                         f"{rate(by_way[('warm', 'print(1)')], 'exec_per_s_8'):.0f}/s from 8 callers",
                         f"{by_way[('cold', 'print(1)')]['p50_ms']:.0f} ms cold"],
        "peers_browser.json": [f"{shared['pss_mb_per_env']:.0f} MB PSS per env sharing a browser",
                               f"{own['pss_mb_per_env']:.0f} MB with one each", f"BrowserGym: {gym['pss_mb_per_env']:.0f}",
                               f"at {shared['envs']} envs", f"BrowserGym {gym['versions']['browsergym-core']}",
                               f"Episodes/s: {rate(shared):.2f} shared, {rate(own):.2f} own; "
                               f"BrowserGym {rate(gym):.2f}"],
        "peers.json": [f"aworld-gym {rate(gym_default):.1f} episodes/s by default",
                       f"{rate(gym_pool):.1f} with `\"pool\": 2`",
                       f"AWorld 0.3.2: {rate(aworld_each):.1f} (an agent per episode), "
                       f"{rate(aworld_list):.1f} (`Runners.run_task` over lists)",
                       f"verifiers 0.4.0: {rate(peers[('verifiers', 16, 1.0)]):.2f} at concurrency 16",
                       f"{gym_default['episodes_planned']} episodes at concurrency 64"],
        "peers_ours.json": [f"{rate(ours_pool):.1f} episodes/s with `\"pool\": 2`",
                            f"{100 * rate(ours_pool) / 32:.0f}% of the ideal 32",
                            f"the model's share of C x wall: {100 * ours_pool['breakdown']['share']['model']:.0f}%",
                            f"{rate(ours_default):.1f} by default"],
        "soak.json": [f"{soak['episodes'] + sum(soak[k]['episodes'] for k in ('code', 'gaia', 'mixed')):,} episodes"],
        "grpo_tool_choice.json": [
            f"{grpo['split']} split", f"seeds {', '.join(str(r['seed']) for r in seeds)}",
            f"{grpo['before']}/{grpo['episodes']} -> {', '.join(str(r['trained']['after']) for r in seeds)} solved",
            f"p <= {max(r['trained']['p'] for r in seeds):.1g}",
            f"shuffled rewards: {', '.join(str(r['shuffled']['after']) for r in seeds)}",
            f"learning rate 0: {', '.join(str(r['lr0']['after']) for r in seeds)}"],
    }  # fmt: skip


def test_every_headline_figure_is_its_jsons_number():
    rows, want = headline_rows(), expected()
    assert set(rows) == set(want), "every headline row names its JSON, and every named JSON is checked here"
    for name, texts in want.items():
        for text in texts:
            assert text in rows[name], f"README's {name} row should say {text!r}: {rows[name]}"


def test_soak_grpo_and_node_loss_claims_hold_in_their_json():
    soak = load("soak.json")
    for name, part in {"MCP-v0": soak, **{k: soak[k] for k in ("code", "gaia", "mixed")}}.items():
        # a part without a key has nothing to show: it fails, where .get() passed (the code and GAIA parts had none)
        missing = {"records", "episodes", "lost", "doubled", "orphans"} - part.keys()
        assert not missing, f"soak.json's {name} part has no {sorted(missing)}: re-run benchmarks/soak.py"
        assert part["records"] == part["episodes"], f"soak.json's {name} part: {part['records']} of {part['episodes']}"
        for key in ("lost", "doubled", "orphans"):
            assert part[key] == [], f"soak.json's {name} part: {key} {part[key][:5]}"
    # the frozen experiments (aworld_gym/fixtures/learning.py, rllib_learning.py): on the test split, every seed of
    # the recipe learned by the criterion and neither control did, on the pinned kernels
    for name in ("grpo_tool_choice.json", "rllib_tool_choice.json"):  # TRL's GRPO and RLlib's PPO, as docs say
        run = load(name)
        assert run["passed"] and run["split"] == "test" and run["kernels"]["torch_cpu_capability"] == "AVX2", name
        assert [r["seed"] for r in run["seeds"]] == list(run["recipe"]["seeds"]), name
        for r in run["seeds"]:
            assert r["trained"]["passed"] and r["trained"]["p"] <= run["recipe"]["alpha"], (name, r["seed"])
            assert not r["shuffled"]["passed"] and not r["lr0"]["passed"], (name, r["seed"])
    loss = load("ray_pool.json")["node_loss"]["check"]
    assert loss["exactly_once"] and not loss["duplicates_dropped"] and not loss["gave_up"]
    assert loss["records"] == loss["distinct_jobs"] and not loss["lost_node_processes_left"]
    scale = load("browser_scale.json")
    assert scale["machine"]["quiet"] and all(not r["busy"] and not r["orphans"] for r in scale["rows"])
    faults = next(r for r in scale["rows"] if r["row"] == "faults")
    assert faults["faults"]["never_scored_0"] and not faults["failed"]


def test_side_by_side_runs_say_they_were_quiet():
    """README calls the peers runs quiet: no row shared the CPUs with other work (``other_cpus``), none was cut."""
    side = load("peers_browser.json")
    assert side["provenance"]["quiet"] and side["machine"]["quiet"]
    assert all(not r["busy"] for r in side["rows"])
    peers = load("peers.json")
    assert peers["provenance"]["quiet"] and not peers["quick"]
    ran = [r for r in peers["rows"] if r.get("episodes")]
    assert all(not r["busy"] and not r["truncated"] and r["correct"] == r["episodes"] for r in ran)
    ours = load("peers_ours.json")
    assert ours["provenance"]["quiet"] and all(not r["busy"] and r["correct"] == r["episodes"] for r in ours["rows"])
    assert all(r["breakdown"]["unaccounted_slot_s"] == 0 for r in ours["rows"])  # the parts add up to C x wall


RATE = re.compile(r"\d[\d.,]*\s*(?:episodes/s|eps/s|episodes per second)")
JSON_NAME = re.compile(r"\b([A-Za-z0-9_]+)\.json\b")
# docs/training.md quotes the GRPO example's outcomes, which are checked in its own tests, not here
FIGURE_PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
FIGURE_PAGES.remove("docs/training.md")


def sections(text: str) -> list[tuple[str, str]]:
    """A page cut at its Markdown headings (lines starting with ``#`` outside code fences): (heading, body)."""
    out, heading, body, fenced = [], "(top)", [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if line.startswith("#") and not fenced:
            out.append((heading, "\n".join(body)))
            heading, body = line, []
        else:
            body.append(line)
    out.append((heading, "\n".join(body)))
    return out


def test_every_section_quoting_a_rate_names_a_committed_json():
    """A section of README or docs that quotes a measured rate (N episodes/s) names a JSON under benchmarks/results/
    that exists: a figure comes from a JSON in the tree or is not given (issue 47). Coarse on purpose: it holds per
    section, so a figure added to a section that already names its JSON passes; a new section of figures without
    one, or one naming a JSON that is not committed, fails."""
    results = {p.stem for p in RESULTS.glob("*.json")}
    bad = []
    for page in FIGURE_PAGES:
        for heading, body in sections((ROOT / page).read_text()):
            if not RATE.search(body):
                continue
            named = set(JSON_NAME.findall(body))
            if not named & results:
                bad.append(f"{page} {heading!r}: {RATE.search(body).group(0)!r}, no benchmarks/results/*.json named")
    assert not bad, bad


def test_every_results_json_the_docs_name_is_committed():
    """Every ``benchmarks/results/X.json`` the pages name exists (a renamed or dropped JSON leaves no dangling
    figure behind)."""
    missing = []
    for page in [*FIGURE_PAGES, "docs/training.md"]:
        for name in re.findall(r"benchmarks/results/([A-Za-z0-9_]+\.json)", (ROOT / page).read_text()):
            if not (RESULTS / name).exists():
                missing.append(f"{page}: {name}")
    assert not missing, missing


def test_whole_run_figures_hold_where_the_json_has_them():
    """Every throughput row that carries both clocks (benchmarks/clocks.py): the whole run holds the window, the
    parts add up, and the whole-run rate is the row's count over the whole run. (The committed JSONs from before issue
    47 carry none; each re-run adds its rows here.)"""
    rows = [*load("peers.json")["rows"], *load("peers_ours.json")["rows"], *load("peers_browser.json")["rows"],
            *load("browser_scale.json")["rows"], *load("rollout_scaling.json")["rows"],
            *load("sandbox.json")["rows"]]  # fmt: skip
    for row in (r for r in rows if r.get("whole_s") is not None and r.get("window_s") is not None):
        key = "exec_per_s_8" if "way" in row else "episodes_per_s"
        count = row.get("executions", row.get("episodes"))
        assert row["whole_s"] >= row["window_s"], row
        assert row["whole_s"] - row["window_s"] == pytest.approx(row["outside_window_s"], abs=0.002)
        if row.get("startup_s") is not None:
            total = row["startup_s"] + row["window_s"] + row["teardown_s"]
            assert total == pytest.approx(row["whole_s"], abs=0.002), row
        assert rate(row, key, "_whole") == pytest.approx(count / row["whole_s"], rel=0.01, abs=0.001)
        assert whole_run(row, key).startswith(f"{rate(row, key, '_whole'):.2f} (whole run {row['whole_s']:.1f} s")


def test_whole_run_formats_a_row():
    row = {"whole_s": 44.2, "startup_s": 32.0, "window_s": 11.9, "teardown_s": 0.3, "outside_window_s": 32.3,
           "episodes_per_s_whole": 256 / 44.2, "episodes_per_s": 256 / 11.9}  # fmt: skip
    assert whole_run(row) == "5.79 (whole run 44.2 s: 32.0 s start-up + 11.9 s window + 0.3 s teardown)"
    assert rate(row) == row["episodes_per_s" + CLOCK] and rate(row, clock="_whole") == 256 / 44.2


PROVENANCE = ("git", "code_dirty", "cpu_model", "cpu_flags", "cores", "load_avg_start", "load_avg_end", "steal_s")


def headline_provenance() -> dict[str, dict]:
    """The provenance of each JSON a README headline row names (an empty dict where it has none)."""
    return {name: load(name).get("provenance") or {} for name in headline_rows()}


def test_every_headline_json_is_from_one_commit_with_full_provenance():
    """README's headline rows come from JSONs written at one commit, on code with no changes (``code_dirty`` false),
    each saying its CPU model and flags, cores, load before and after and steal time (benchmarks/provenance.py)."""
    prov = headline_provenance()
    missing = {name: [k for k in PROVENANCE if p.get(k) is None] for name, p in prov.items()}
    assert not {n: m for n, m in missing.items() if m}, missing
    assert len({p["git"] for p in prov.values()}) == 1, {n: p["git"] for n, p in prov.items()}
    assert not any(p["code_dirty"] for p in prov.values()), {n: p["code_dirty"] for n, p in prov.items()}
