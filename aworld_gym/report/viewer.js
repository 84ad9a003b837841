// The aworld-gym report viewer: reads the JSON the report embeds (#data, and one #t<i> per embedded transcript)
// and draws everything lazily: the episode list a page at a time, a transcript only when its episode is opened.
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("data").textContent);
  var runs = DATA.runs, eps = DATA.episodes, PAGE = 100;

  function h(tag, attrs) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else if (k === "cls") node.className = attrs[k];
      else if (k.slice(0, 2) === "on") node.addEventListener(k.slice(2), attrs[k]);
      else node.setAttribute(k, attrs[k]);
    });
    for (var i = 2; i < arguments.length; i++) {
      var kid = arguments[i];
      if (kid == null) continue;
      node.appendChild(typeof kid === "string" ? document.createTextNode(kid) : kid);
    }
    return node;
  }
  // Numbers the report could not write as JSON numbers (NaN, inf, -inf) arrive as those strings and are shown as
  // they are; charts and sums read them as missing (numeric).
  function numeric(v) { return typeof v === "number" && isFinite(v) ? v : null; }
  function pct(v) { return v == null ? "-" : typeof v === "string" ? v : (100 * v).toFixed(1) + "%"; }
  function num(v, d) { return v == null ? "-" : typeof v === "string" ? v : Number(v).toFixed(d == null ? 3 : d); }
  function secs(v) { return v == null ? "-" : typeof v === "string" ? v : (v < 1 ? (v * 1000).toFixed(0) + " ms" : Number(v).toFixed(2) + " s"); }
  function short(name) { return String(name).split("/").pop(); }
  // "1 sample", "2 samples": a count and its noun, plural unless the count is 1.
  function plural(n, one, many) { return n + " " + (n === 1 ? one : many || one + "s"); }
  function $(id) { return document.getElementById(id); }
  // Natural order, as stats.natural_key: runs of digits compare as numbers (HumanEval/2 before HumanEval/10), the
  // text between them by code unit; equal numbers written differently (7, 07) fall back to the whole text.
  function natural(a, b) {
    var x = String(a).split(/([0-9]+)/), y = String(b).split(/([0-9]+)/);
    for (var i = 0; i < Math.min(x.length, y.length); i++) {
      var p = x[i], q = y[i];
      if (i % 2) {  // digits: the number with more digits (leading zeros aside) is larger, else compare as text
        var pn = p.replace(/^0+/, ""), qn = q.replace(/^0+/, "");
        if (pn.length !== qn.length) return pn.length - qn.length;
        p = pn; q = qn;
      }
      if (p !== q) return p < q ? -1 : 1;
    }
    return x.length - y.length || (a < b ? -1 : a > b ? 1 : 0);
  }
  function byTask(a, b) { return a.run - b.run || natural(a.task, b.task) || a.sample - b.sample || a.i - b.i; }

  // ----- summary cards ---------------------------------------------------------------------------------------
  $("subtitle").textContent = runs.map(function (r) { return short(r.run); }).join(" vs ") + " - made " + DATA.generated;
  runs.forEach(function (r, ri) {
    var dl = h("dl");
    function row(k, v) { dl.appendChild(h("dt", {text: k})); dl.appendChild(h("dd", {text: v})); }
    row("episodes", String(r.episodes));
    if (r.positive_score_rate != null && r.positive_score_rate !== r.success_rate) row("score > 0 (BrowserGym's success)", pct(r.positive_score_rate));
    var lo = r.samples_per_task.min, hi = r.samples_per_task.max;
    row("tasks", r.tasks + " (" + (hi !== lo ? lo + "-" + hi + " samples" : plural(lo, "sample")) + " each)");
    Object.keys(r.pass_at_k).forEach(function (k) { row(k, pct(r.pass_at_k[k].value) + " (" + plural(r.pass_at_k[k].tasks, "task") + ")"); });
    row("mean reward", num(r.reward_mean));
    row("mean score", num(r.score_mean));
    Object.keys(r.reward_components).forEach(function (k) { row("reward: " + k, num(r.reward_components[k].mean)); });
    row("turns (mean, p90)", num(r.turns.mean, 2) + ", " + num(r.turns.p90, 1));
    if (r.latency.total_s) row("episode seconds p50 / p90", secs(r.latency.total_s.p50) + " / " + secs(r.latency.total_s.p90));
    Object.keys(r.terminations).forEach(function (k) { row("ended: " + k, String(r.terminations[k])); });
    if (r.malformed && r.malformed.records) row("malformed records skipped", String(r.malformed.records) + " (" +
      Object.keys(r.malformed.reasons).map(function (k) { return k + ": " + r.malformed.reasons[k]; }).join("; ") + ")");
    $("cards").appendChild(h("div", {cls: "card", "data-run": String(ri)},
      h("h3", {text: short(r.run)}),
      h("div", {cls: "big", "data-metric": "success_rate", text: pct(r.success_rate)}),
      h("div", {cls: "meta", text: "success rate (" + r.successes + " of " + r.episodes + ")"}), dl));
  });
  var b = DATA.bound;
  $("bound-note").textContent = "Transcripts embedded for " + b.embedded + " of " + plural(b.episodes, "episode") +
    (b.sampled ? " (a uniform sample: the page keeps at most " + b.max_mb + " MB of transcripts)" : "") +
    "; texts longer than " + b.text_chars + " characters are cut" +
    (b.images_linked ? "; " + plural(b.images_linked, "screenshot") + (b.images_linked === 1 ? " is" : " are") + " linked by path, not embedded" : "") +
    (b.images_refused ? "; " + plural(b.images_refused, "screenshot") + " refused (not an image in the run's screenshots folder)" : "") +
    (b.cut ? "; " + plural(b.cut, "transcript") + " over the budget " + (b.cut === 1 ? "is" : "are") + " cut" : "") +
    (b.malformed ? "; " + plural(b.malformed, "malformed record") + " skipped" : "") + ".";

  // ----- comparison ------------------------------------------------------------------------------------------
  if (DATA.comparison && !DATA.comparison.common_tasks) {
    // Runs with no task in common: a table would hold only dashes and zeros.
    $("comparison-section").hidden = false;
    $("comparison").appendChild(h("p", {cls: "note", id: "comparison-none", text: "These runs have no task in common: there is nothing to compare (the charts and the episode list show each run's own tasks)."}));
  } else if (DATA.comparison) {
    $("comparison-section").hidden = false;
    var ct = h("table", {id: "comparison-table"}, h("thead", {}, h("tr", {},
      h("th", {text: "run"}), h("th", {text: "success"}), h("th", {text: "delta"}), h("th", {text: "tasks solved"}),
      h("th", {text: "gained"}), h("th", {text: "lost"}))));
    var cb = h("tbody");
    DATA.comparison.runs.forEach(function (r) {
      cb.appendChild(h("tr", {}, h("td", {text: short(r.run)}), h("td", {cls: "num", text: pct(r.success_rate)}),
        h("td", {cls: "num", text: r.delta == null ? "-" : (r.delta >= 0 ? "+" : "") + (100 * r.delta).toFixed(1) + " pts"}),
        h("td", {cls: "num", text: String(r.solved)}), h("td", {cls: "num", text: String(r.gained)}),
        h("td", {cls: "num", text: String(r.lost)})));
    });
    ct.appendChild(cb);
    $("comparison").appendChild(h("p", {cls: "note", text: "On the " + plural(DATA.comparison.common_tasks, "task") + " every run has; delta, gained and lost against the first run."}));
    $("comparison").appendChild(ct);
  }

  // ----- charts ----------------------------------------------------------------------------------------------
  // The title sits just above the plot, below the band at the top where Plotly draws its mode bar: the bar shows
  // on hover only, but always where the browser cannot hover (touch screens, headless Chromium), and must never
  // cover the title.
  function chart(title, traces, layout) {
    var div = h("div", {cls: "chart", "data-title": title});
    $("charts").appendChild(div);
    layout = layout || {};
    var base = {title: {text: title, font: {size: 14}, y: 1, yref: "paper", yanchor: "bottom", pad: {b: 10}},
      margin: {l: 50, r: 20, t: 64, b: 40}, barmode: "group", height: 380};
    // Axes make room for their tick labels (task ids turned on their side); the legend (several runs) sits to the
    // right, where it cannot cover them.
    var axes = {xaxis: Object.assign({automargin: true}, layout.xaxis), yaxis: Object.assign({automargin: true}, layout.yaxis)};
    Plotly.newPlot(div, traces, Object.assign(base, layout, axes), {displaylogo: false, responsive: true,
      displayModeBar: "hover", modeBarButtonsToRemove: ["select2d", "lasso2d"]});
  }
  // Every run's tasks, hardest first as the first run that has the task sees it (the comparison's baseline is the
  // first run), then in natural order.
  var taskRate = {};
  runs.forEach(function (r) {
    Object.keys(r.per_task).forEach(function (t) {
      var v = r.per_task[t];
      if (!(t in taskRate)) taskRate[t] = v.samples ? v.successes / v.samples : 0;
    });
  });
  var taskIds = Object.keys(taskRate);
  taskIds.sort(function (a, b) { return taskRate[a] - taskRate[b] || natural(a, b); });
  var shown = taskIds.slice(0, 60);
  chart("Success rate by task" + (taskIds.length > shown.length ? " (the " + shown.length + " hardest of " + taskIds.length + ")" : ""),
    runs.map(function (r) {
      return {type: "bar", name: short(r.run), x: shown, y: shown.map(function (t) { var v = r.per_task[t]; return v ? v.successes / v.samples : null; })};
    }), {xaxis: {type: "category"}, yaxis: {range: [0, 1], tickformat: ".0%"}});
  if (runs[0].groups) {
    var keys = Object.keys(runs[0].groups).sort(natural);
    chart("Success rate by " + DATA.by, runs.map(function (r) {
      return {type: "bar", name: short(r.run), x: keys, y: keys.map(function (k) { return r.groups && r.groups[k] ? r.groups[k].success_rate : null; })};
    }), {xaxis: {type: "category"}, yaxis: {range: [0, 1], tickformat: ".0%"}});
    chart("Mean reward by " + DATA.by, runs.map(function (r) {
      return {type: "bar", name: short(r.run), x: keys, y: keys.map(function (k) { return r.groups && r.groups[k] ? numeric(r.groups[k].reward_mean) : null; })};
    }), {xaxis: {type: "category"}});
  }
  // Terminations: the kinds on the x axis (most episodes first), one bar per run in each, its count on it.
  var kinds = {};
  runs.forEach(function (r) { Object.keys(r.terminations).forEach(function (k) { kinds[k] = (kinds[k] || 0) + r.terminations[k]; }); });
  var kindList = Object.keys(kinds).sort(function (a, b) { return kinds[b] - kinds[a] || natural(a, b); });
  chart("Terminations", runs.map(function (r) {
    var ys = kindList.map(function (k) { return r.terminations[k] || 0; });
    return {type: "bar", name: short(r.run), x: kindList, y: ys, text: ys.map(String), textposition: "auto"};
  }), {xaxis: {type: "category"}, yaxis: {title: {text: "episodes"}}, showlegend: runs.length > 1});
  var maxK = 0;
  runs.forEach(function (r) { maxK = Math.max(maxK, Object.keys(r.pass_at_k).length); });
  if (maxK > 1) {
    chart("pass@k", runs.map(function (r) {
      var ks = Object.keys(r.pass_at_k);
      return {type: "scatter", mode: "lines+markers", cliponaxis: false, name: short(r.run), x: ks, y: ks.map(function (k) { return r.pass_at_k[k].value; })};
    }), {yaxis: {range: [0, 1], tickformat: ".0%"}});
  }
  chart("Turns per episode", runs.map(function (r, ri) {
    return {type: "histogram", name: short(r.run), opacity: 0.7, x: eps.filter(function (e) { return e.run === ri; }).map(function (e) { return e.turns; })};
  }), {barmode: "overlay"});
  chart("Reward per episode", runs.map(function (r, ri) {
    return {type: "histogram", name: short(r.run), opacity: 0.7, x: eps.filter(function (e) { return e.run === ri; }).map(function (e) { return numeric(e.reward); })};
  }), {barmode: "overlay"});

  // Parse health over the run: per slice of consecutive episodes, the share that called a tool and the share of
  // turns that failed to parse; the alarms the run's window raised (tool calls gone, calls malformed) below it.
  var healthy = runs.filter(function (r) { return r.parse_health && r.parse_health.turns; });
  if (healthy.length) {
    var traces = [];
    healthy.forEach(function (r) {
      var t = r.parse_health.timeline;
      traces.push({type: "scatter", mode: "lines+markers", name: short(r.run) + ": episodes with a tool call", x: t.episodes, y: t.tool_call_episodes});
      traces.push({type: "scatter", mode: "lines+markers", line: {dash: "dot"}, name: short(r.run) + ": turns that failed to parse", x: t.episodes, y: t.parse_failure_turns});
    });
    chart("Parse health over the run", traces, {xaxis: {title: {text: "episodes"}}, yaxis: {range: [0, 1], tickformat: ".0%"}});
    healthy.forEach(function (r) {
      (r.parse_health.alarms || []).forEach(function (a) {
        $("charts").appendChild(h("p", {cls: "note alarm", text: short(r.run) + ": " + a}));
      });
    });
  }

  // ----- GRPO groups -----------------------------------------------------------------------------------------
  var groups = {};
  eps.forEach(function (e) { var k = e.run + "\u0000" + e.task; (groups[k] = groups[k] || []).push(e); });
  var multi = Object.keys(groups).filter(function (k) { return groups[k].length > 1; });
  if (multi.length) {
    $("groups-section").hidden = false;
    function mixed(k) { var g = groups[k], s = g.filter(function (e) { return e.ok; }).length; return s > 0 && s < g.length ? 0 : 1; }
    multi.sort(function (a, b) { return mixed(a) - mixed(b) || byTask(groups[a][0], groups[b][0]); });
    var gt = h("table", {id: "groups-table", cls: "list"}, h("thead", {}, h("tr", {}, h("th", {text: "run"}), h("th", {text: "task"}),
      h("th", {text: "samples"}), h("th", {text: "solved"}), h("th", {text: "mean reward"}), h("th", {text: "reward std"}))));
    var gb = h("tbody");
    multi.slice(0, 200).forEach(function (k) {
      var g = groups[k].slice().sort(function (x, y) { return x.sample - y.sample; });
      var rs = g.map(function (e) { return typeof e.reward === "number" ? e.reward : e.reward == null ? 0 : NaN; });
      var mean = rs.reduce(function (a, x) { return a + x; }, 0) / rs.length;
      var std = Math.sqrt(rs.reduce(function (a, x) { return a + (x - mean) * (x - mean); }, 0) / rs.length);
      var squares = h("td");
      g.forEach(function (e) { squares.appendChild(h("span", {cls: "sq" + (e.ok ? " ok" : ""), title: "sample " + e.sample + ": reward " + num(e.reward)})); });
      gb.appendChild(h("tr", {"data-task": g[0].task, onclick: function () { openEpisode(g[0].i, "group"); }},
        h("td", {text: short(runs[g[0].run].run)}), h("td", {text: g[0].task}), squares,
        h("td", {cls: "num", text: g.filter(function (e) { return e.ok; }).length + "/" + g.length}),
        h("td", {cls: "num", text: num(mean)}), h("td", {cls: "num", text: num(std)})));
    });
    gt.appendChild(gb);
    $("groups").appendChild(gt);
    if (multi.length > 200) $("groups").appendChild(h("p", {cls: "note", text: "The first 200 of " + multi.length + " groups (mixed outcomes first)."}));
  }

  // ----- the episode list ------------------------------------------------------------------------------------
  runs.forEach(function (r, ri) { $("f-run").appendChild(h("option", {value: String(ri), text: short(r.run)})); });
  kindList.forEach(function (k) { $("f-termination").appendChild(h("option", {value: k, text: k})); });
  // Listed by run, then task in natural order, then sample (a task's samples together); "#" is the record's index.
  var listed = eps.slice().sort(byTask);
  var haystack = null, filtered = listed, rendered = 0;
  function applyFilters() {
    var run = $("f-run").value, outcome = $("f-outcome").value, term = $("f-termination").value;
    var task = $("f-task").value.trim().toLowerCase(), q = $("f-search").value.trim().toLowerCase();
    if (q && !haystack) haystack = eps.map(function (e) { return [e.task, e.prompt, e.answer, e.error, e.termination].join("\n").toLowerCase(); });
    filtered = listed.filter(function (e) {
      return (run === "" || e.run === Number(run)) && (outcome === "" || (outcome === "success") === e.ok) &&
        (term === "" || e.termination === term) && (!task || e.task.toLowerCase().indexOf(task) >= 0) &&
        (!q || haystack[e.i].indexOf(q) >= 0);
    });
    $("episodes").tBodies[0].textContent = "";
    rendered = 0;
    renderMore();
  }
  function renderMore() {
    var body = $("episodes").tBodies[0];
    filtered.slice(rendered, rendered + PAGE).forEach(function (e) {
      body.appendChild(h("tr", {"data-i": String(e.i), onclick: function () { openEpisode(e.i); }},
        h("td", {cls: "num", text: String(e.i)}), h("td", {text: short(runs[e.run].run)}), h("td", {text: e.task}),
        h("td", {cls: "num", text: String(e.sample)}), h("td", {cls: e.ok ? "ok" : "bad", text: e.ok ? "success" : "failure"}),
        h("td", {cls: "num", text: num(e.reward)}), h("td", {cls: "num", text: String(e.turns)}),
        h("td", {text: e.termination}), h("td", {cls: "num", text: num(e.total_s, 2)}), h("td", {text: e.answer.slice(0, 80)})));
    });
    rendered = Math.min(filtered.length, rendered + PAGE);
    $("count").textContent = filtered.length + " of " + plural(eps.length, "episode") + (filtered.length === 1 ? " matches" : " match") + "; showing " + rendered + ".";
    $("more").hidden = rendered >= filtered.length;
  }
  ["f-run", "f-outcome", "f-termination"].forEach(function (id) { $(id).addEventListener("change", applyFilters); });
  ["f-task", "f-search"].forEach(function (id) { $(id).addEventListener("input", applyFilters); });
  $("more").addEventListener("click", renderMore);
  applyFilters();

  // ----- one episode -----------------------------------------------------------------------------------------
  // A text in a <pre>; one over `limit` characters (600) shows its start, the whole of it folded below.
  function fold(text, cls, limit) {
    text = text || "";
    limit = limit || 600;
    if (text.length <= limit) return h("pre", {cls: cls || ""}, text);
    return h("div", {cls: "folded"}, h("pre", {cls: cls || ""}, text.slice(0, limit) + " ..."),
      h("details", {}, h("summary", {text: "show all " + text.length + " characters"}), h("pre", {cls: cls || ""}, text)));
  }
  function transcriptOf(i) {
    var node = document.getElementById("t" + i);
    return node ? JSON.parse(node.textContent) : null;
  }
  function comps(c) { return Object.keys(c || {}).map(function (k) { return k + " " + num(c[k]); }).join(", "); }
  function renderTranscript(e, t) {
    var box = h("div", {id: "transcript"});
    if (!t) {
      box.appendChild(h("p", {cls: "note", text: "This episode's transcript is not embedded (the page's size bound; see the note at the top)."}));
      return box;
    }
    if (t.prompt) box.appendChild(h("div", {cls: "turn"}, h("h4", {text: "Task"}), fold(t.prompt)));
    if (t.screenshot) box.appendChild(h("img", {cls: "shot", src: t.screenshot, alt: "after reset"}));
    t.turns.forEach(function (turn) {
      var div = h("div", {cls: "turn", "data-turn": String(turn.turn)},
        h("h4", {text: "Turn " + turn.turn}),
        h("div", {cls: "meta", text: "reward " + num(turn.reward) + (comps(turn.components) ? " (" + comps(turn.components) + ")" : "") +
          "; policy " + secs(turn.policy_s) + ", env " + secs(turn.env_s)}));
      if (turn.thinking) div.appendChild(h("details", {cls: "thinking"}, h("summary", {text: "thinking (" + turn.thinking.length + " characters)"}), h("pre", {}, turn.thinking)));
      if (turn.action) div.appendChild(fold(turn.action, "action"));
      turn.calls.forEach(function (c) {
        var box = h("div", {cls: "call"}, h("b", {text: "call " + c.name}));
        if (c.arguments || !(c.code || []).length) box.appendChild(fold(c.arguments));
        // Code arguments (run_python's code) as code: their own newlines, monospace, named by the argument.
        (c.code || []).forEach(function (a) { box.appendChild(h("div", {cls: "arg"}, h("span", {cls: "meta", text: a.name}), fold(a.text, "code"))); });
        div.appendChild(box);
      });
      turn.results.forEach(function (r) {
        var empty = !r.text;
        div.appendChild(h("div", {cls: "result tool" + (r.error ? " err" : "")},
          h("b", {text: "result " + r.name}), h("span", {cls: "meta", text: (r.error ? " error: " + r.error : "") + " (" + secs(r.latency_s) + ")"}),
          empty ? h("p", {cls: "meta empty", text: turn.observation ? "no text of its own: the observation below shows what the agent saw" : "no text"}) : fold(r.text)));
      });
      // What the agent saw next, where it says more than the tool results (a browser's page snapshot, an env's
      // note); a long one folded.
      if (turn.observation) {
        div.appendChild(h("div", {cls: "result obs"}, h("b", {text: "observation"}),
          h("span", {cls: "meta", text: " what the agent saw next"}), fold(turn.observation, "observation", 1200)));
      }
      if (turn.action_error) div.appendChild(h("p", {cls: "bad", text: "action error: " + turn.action_error}));
      if (turn.screenshot) div.appendChild(h("img", {cls: "shot", src: turn.screenshot, alt: "after turn " + turn.turn}));
      box.appendChild(div);
    });
    if (t.cut) box.appendChild(h("p", {cls: "bad cut", text: t.cut}));
    if (t.answer) box.appendChild(h("div", {cls: "turn"}, h("h4", {text: "Answer"}), fold(t.answer)));
    if (t.error) box.appendChild(h("div", {cls: "turn"}, h("h4", {cls: "bad", text: "Error"}), fold(t.error)));
    return box;
  }
  function renderGroup(e) {
    var g = eps.filter(function (x) { return x.run === e.run && x.task === e.task; }).sort(function (x, y) { return x.sample - y.sample; });
    var side = h("div", {cls: "side", id: "group-view"});
    g.forEach(function (x) {
      var t = x.t ? transcriptOf(x.i) : null, last = t && t.turns.length ? t.turns[t.turns.length - 1] : null;
      side.appendChild(h("div", {cls: "sample", "data-i": String(x.i)},
        h("b", {text: "sample " + x.sample}), " ", h("span", {cls: x.ok ? "ok" : "bad", text: x.ok ? "success" : "failure"}),
        h("div", {cls: "meta", text: "reward " + num(x.reward) + ", " + plural(x.turns, "turn") + ", " + x.termination}),
        fold("answer: " + (x.answer || "-")),
        last && last.thinking ? h("details", {}, h("summary", {text: "last thinking"}), h("pre", {}, last.thinking)) : null,
        h("button", {text: "open", onclick: function () { openEpisode(x.i); }})));
    });
    return side;
  }
  function openEpisode(i, view) {
    var e = eps[i];
    $("detail-section").hidden = false;
    $("detail-title").textContent = "Episode #" + i + ": " + e.task + " (sample " + e.sample + ")";
    var d = $("detail");
    d.textContent = "";
    d.appendChild(h("p", {cls: "meta", id: "detail-meta", text: short(runs[e.run].run) + "; " + (e.ok ? "success" : "failure") +
      "; reward " + num(e.reward) + "; score " + num(e.score) + "; " + plural(e.turns, "turn") + "; ended by " + e.termination + "; " + secs(e.total_s)}));
    var siblings = eps.filter(function (x) { return x.run === e.run && x.task === e.task; }).length;
    var body = h("div");
    var t = e.t ? transcriptOf(i) : null;
    function show(which) { body.textContent = ""; body.appendChild(which === "group" ? renderGroup(e) : renderTranscript(e, t)); }
    if (siblings > 1) {
      d.appendChild(h("div", {cls: "tabs"}, h("button", {id: "tab-transcript", text: "transcript", onclick: function () { show("transcript"); }}),
        h("button", {id: "tab-group", text: "group: " + siblings + " samples side by side", onclick: function () { show("group"); }})));
    }
    if (t && Object.keys(t.timings).length) {
      d.appendChild(h("p", {cls: "meta", text: "timings: " + Object.keys(t.timings).map(function (k) { return k + " " + secs(t.timings[k]); }).join(", ") +
        (comps(t.components) ? "; reward components: " + comps(t.components) : "")}));
    }
    d.appendChild(body);
    show(view === "group" && siblings > 1 ? "group" : "transcript");
    if (location.hash !== "#episode-" + i) history.replaceState(null, "", "#episode-" + i);
    $("detail-section").scrollIntoView();
  }
  var m = /^#episode-(\d+)$/.exec(location.hash);
  if (m && eps[Number(m[1])]) openEpisode(Number(m[1]));
  window.aworldReport = {data: DATA, open: openEpisode, filtered: function () { return filtered.length; }, natural: natural};
  performance.mark("aworld-report-ready");
})();
