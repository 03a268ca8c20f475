// Oloproof run report. Every recorded value is rendered with textContent: a tool result
// holding markup shows as text, never as markup. Data arrive lazily as script files
// (data/*.js), which works from a static folder (file://) as well as from a server.
//
// A comparison report (<body data-mode="compare">) holds two runs, "base" and "candidate"
// (data/base/*.js, data/candidate/*.js: each call names its run) and data/diff.js. It opens on
// the comparison; #view=base / #view=candidate show a run's ordinary report; #case=ID opens the
// case's base and candidate panels side by side.
"use strict";
(function () {
  var COMPARE = document.body.getAttribute("data-mode") === "compare";
  var ROLES = COMPARE ? ["base", "candidate"] : [""];
  var state = { runs: {}, diff: null, page: null, pending: {}, shown: null };
  ROLES.forEach(function (r) { state.runs[r] = { role: r, summary: null, index: null, chunks: {}, search: null }; });
  var t0 = performance.now();
  var PAGE = 100;

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) { if (c) e.appendChild(c); });
    return e;
  }
  function txt(v) { return v === undefined ? "(absent)" : (typeof v === "string" ? v : JSON.stringify(v)); }
  function pct(x) { return x === null || x === undefined ? "–" : (x * 100).toFixed(1) + "%"; }
  function outward(lo, hi) {
    if (lo === null || hi === null) return "no observations";
    var l = Math.floor(lo * 1000 + 1e-9) / 10, h = Math.ceil(hi * 1000 - 1e-9) / 10;
    return "[" + l.toFixed(1) + "%, " + Math.min(h, 100).toFixed(1) + "%]";
  }
  function table(head, rows) {
    var t = el("table", null, [el("thead", null, [el("tr", null, head.map(function (h) { return el("th", { text: h }); }))])]);
    var tb = el("tbody");
    rows.forEach(function (r) { tb.appendChild(el("tr", null, r)); });
    t.appendChild(tb);
    return t;
  }
  function td(text, cls) { return el("td", { text: text, cls: cls || "" }); }
  function tdPre(v) { return el("td", null, [el("pre", { text: v === null || v === undefined ? "" : txt(v) })]); }
  function bar(row) {
    var b = el("div", { cls: "bar" });
    if (row.low !== null && row.high !== null) {
      var iv = el("div", { cls: "iv" });
      iv.style.left = (row.low * 100) + "%"; iv.style.width = Math.max(0.5, (row.high - row.low) * 100) + "%";
      b.appendChild(iv);
    }
    if (row.rate !== null) { var p = el("div", { cls: "pt" }); p.style.left = (row.rate * 100) + "%"; b.appendChild(p); }
    return el("td", null, [b]);
  }
  function evidence(r) {
    var s = r.passed + " / " + r.observed + " observed · " + r.missing + " missing · " + r.excluded + " excluded";
    if (r.method !== "clopper_pearson") s += " · ≈ " + r.clusters + " clusters";
    return s;
  }
  function load(src) {
    if (state.pending[src]) return;
    state.pending[src] = true;
    document.body.appendChild(el("script", { src: src }));
  }

  function runOf(role) {
    role = role || "";
    return Object.prototype.hasOwnProperty.call(state.runs, role) ? state.runs[role] : null;
  }
  function dataPath(role, file) { return "data/" + (role ? role + "/" : "") + file; }
  // where a case sits in its run (undefined: no such case); an own property only, so that a
  // case id such as "constructor" is looked up like any other
  function positionOf(R, caseId) {
    var pos = R.index.position;
    return Object.prototype.hasOwnProperty.call(pos, caseId) ? pos[caseId] : undefined;
  }

  window.OLOPROOF = {
    summary: function (data, role) { var R = runOf(role); if (R) { R.summary = data; render(); } },
    index: function (data, role) { var R = runOf(role); if (R) { R.index = data; render(); } },
    chunk: function (n, cases, role) { var R = runOf(role); if (R) { R.chunks[n] = cases; render(); } },
    search: function (rows, role) { var R = runOf(role); if (R) { R.search = rows; render(); } },
    diff: function (data, page) { state.diff = data; state.page = page; render(); }
  };

  function params() {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      if (!kv) return;
      var i = kv.indexOf("=");
      try { out[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1)); }
      catch (e) { /* a malformed link (#q=%): that part is ignored */ }
    });
    return out;
  }
  function setParams(p) {
    var parts = [];
    for (var k in p) if (p[k] !== "" && p[k] !== undefined && p[k] !== null) parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(p[k]));
    location.hash = parts.join("&");
  }

  // A run that is not sealed (interrupted, or still running) can never pass its gate: say so
  // first. The fields come with the run's data; a bundle without them shows no banner.
  function incompleteBanner(s) {
    var run = s.complete === undefined && s.run ? s.run : s;
    if (run.complete !== false) return null;
    var n = run.cases_committed, m = run.cases_expected;
    var count = (typeof n === "number" ? n : "?") + (typeof m === "number" ? " of " + m : "") + " cases recorded";
    return el("div", { id: "incomplete", cls: "banner", role: "alert",
      text: "Incomplete run: " + count + "; the gate cannot pass" });
  }

  // oloproof.yaml's kind: what the suite is for, said above its criteria
  var SUITE_KINDS = {
    regression: "Regression suite: a high expected pass rate — a criterion no release rule names is gated by its default rule, max_failures: 0 (regression:<criterion>).",
    capability: "Capability suite: a hard suite that may start low — its rates report progress; it has no default rules."
  };

  function renderSummary(root, R) {
    var s = R.summary;
    document.getElementById("title").textContent = (R.role ? R.role + " " : "") + "run " + s.run_id + " · " +
      s.system.name + " " + s.system.version;
    var banner = incompleteBanner(s);
    if (banner) root.appendChild(banner);
    if (s.kind) root.appendChild(el("p", { id: "suite-kind", cls: "kind-" + s.kind, text: SUITE_KINDS[s.kind] || s.kind }));
    var rows = s.criteria.map(function (r) {
      return [td(r.criterion), td(pct(r.rate), "num"), td(outward(r.low, r.high)), bar(r), td(evidence(r))];
    });
    root.appendChild(el("section", { id: "criteria" }, [el("h2", { text: "Criteria" }),
      table(["criterion", "rate", "interval", "", "evidence"], rows)]));
    var trials = s.criteria.filter(function (r) { return r.k; });
    if (trials.length) {  // trials: k — pass^k beside the rate, and how many trials each case passed
      root.appendChild(el("section", { id: "pass-hat-k" }, [el("h2", { text: "pass^" + trials[0].k + " (every trial of a case passes)" }),
        table(["criterion", "pass^k", "interval", "cases by trials passed (0…k)"], trials.map(function (r) {
          return [td(r.criterion), td(pct(r.pass_hat_k), "num"), td(outward(r.pass_hat_k_low, r.pass_hat_k_high) + " · " + r.pass_hat_k_method),
                  td((r.passing_trials || []).map(function (n, i) { return i + ":" + n; }).join(" "))];
        }))]));
    }
    var judged = s.criteria.filter(function (r) { return r.judge; });
    if (judged.length) {  // model judges: the labels' measure of each judge, and the corrected rate
      root.appendChild(el("section", { id: "judges" }, [el("h2", { text: "Model judges (calibrated against people's labels)" }),
        table(["criterion", "judge-corrected rate", "interval", "calibration"], judged.map(function (r) {
          var j = r.judge, c = r.corrected;
          var measure = function (name, v, lo, hi) { return v === null ? name + " –" : name + " " + pct(v) + " " + outward(lo, hi); };
          var said = [j.labels + " labels compared", measure("agreement", j.agreement, j.agreement_low, j.agreement_high),
                      measure("sensitivity", j.sensitivity, j.sensitivity_low, j.sensitivity_high),
                      measure("specificity", j.specificity, j.specificity_low, j.specificity_high)];
          if (j.stale) said.push(j.stale + " stale");
          said.push(j.calibrated ? "calibrated" : "not calibrated: " + j.problem);
          return [td(r.criterion), td(c ? pct(c.rate) : "–", "num"), td(c ? outward(c.low, c.high) + " · " + c.method : "not calibrated"),
                  td(said.join(" · "))];
        }))]));
    }
    if (s.metrics.length) {
      root.appendChild(el("section", { id: "metrics" }, [el("h2", { text: "Metrics" }), table(["metric", "value", "interval", "evidence"],
        s.metrics.map(function (m) {
          var nb = function (x) { return x === null ? "no bound" : String(x); };
          var unit = m.value === 1 && /s$/.test(m.unit || "") ? m.unit.slice(0, -1) : m.unit;  // 1 call, 2 calls
          return [td(m.id), td(nb(m.value) + " " + unit, "num"), td("[" + nb(m.low) + ", " + nb(m.high) + "] " + m.unit),
                  td("p" + Math.round(m.quantile * 100) + " of " + m.observed + " observed · " + m.missing + " missing · " + m.excluded + " excluded")];
        }))]));
    }
    if (s.release) {
      var classes = s.release.classes, hints = s.release.repair_hints || {};
      root.appendChild(el("section", { id: "release" }, [el("h2", { text: "Release classes (the environment's evidence, not the transcript)" }),
        table(["release class", "trials", "repair"], Object.keys(classes).map(function (k) {
          return [td(k, k.indexOf("FAIL_") === 0 ? "fail" : "pass"), td(String(classes[k]), "num"),
                  td(Object.prototype.hasOwnProperty.call(hints, k) ? hints[k] : "")];
        })),
        el("p", { id: "false-passes", text: "response_only_false_passes: " + s.release.response_only_false_passes +
          " (the agent claimed success; the environment says FAIL)" })]));
    }
    if (s.slices.length) {
      root.appendChild(el("section", { id: "slices" }, [el("h2", { text: "Slices (descriptive; slices never gate)" }),
        table(["slice", "criterion", "rate", "interval", "evidence"], s.slices.map(function (r) {
          return [td(r.slice), td(r.criterion), td(pct(r.rate), "num"), td(outward(r.low, r.high)),
                  td(evidence(r) + (r.low_support ? " · low support" : ""))];
        }))]));
    }
    var g = s.gate;
    var gateTitle = s.kind === "capability" ? "Gate on a capability suite (a bar for a hard suite, not a regression gate): " :
      s.kind === "regression" ? "Gate (regression suite): " : "Gate: ";
    var gate = el("section", { id: "gate" }, [el("h2", null, [document.createTextNode(gateTitle),
      el("span", { text: g.decision || "none", cls: g.decision || "", id: "decision" })])]);
    if (g.rules.length) gate.appendChild(table(["rule", "criterion", "status", "reason", "decided by"], g.rules.map(function (r) {
      return [td(r.name), td(r.criterion), td(r.status, r.status), td(r.reason || ""), td(r.detail || "")];
    })));
    root.appendChild(gate);
  }

  function filtered(R, p) {
    var idx = R.index, ci = idx.criteria.indexOf(p.criterion);
    return idx.cases.filter(function (c) {
      if (ci < 0 || !p.verdict) return true;
      return c[2][ci] === p.verdict;
    });
  }

  function renderCases(root, p, R) {
    var idx = R.index;
    var sel = el("select", { id: "criterion" }, [el("option", { value: "", text: "any criterion" })]
      .concat(idx.criteria.map(function (c) { return el("option", { value: c, text: c }); })));
    sel.value = p.criterion || "";
    var ver = el("select", { id: "verdict" }, ["", "pass", "fail", "missing", "excluded"].map(function (v) {
      return el("option", { value: v, text: v || "any verdict" });
    }));
    ver.value = p.verdict || "";
    function change() { setParams({ view: p.view, criterion: sel.value, verdict: ver.value, page: 1 }); }
    sel.onchange = change; ver.onchange = change;
    var list = filtered(R, p);
    var page = Math.max(1, parseInt(p.page || "1", 10)), pages = Math.max(1, Math.ceil(list.length / PAGE));
    page = Math.min(page, pages);
    var shown = list.slice((page - 1) * PAGE, page * PAGE);
    var rows = shown.map(function (c) {
      var a = el("a", { cls: "case", text: c[0], "data-case": c[0] });
      a.onclick = function () { var q = params(); q.case = c[0]; setParams(q); };
      return [el("td", null, [a])].concat(c[2].map(function (v) { return td(v, v); }));
    });
    var nav = el("div", { cls: "controls" });
    if (page > 1) { var prev = el("button", { text: "← previous", id: "prev" }); prev.onclick = function () { var q = params(); q.page = page - 1; setParams(q); }; nav.appendChild(prev); }
    nav.appendChild(el("span", { id: "count", text: list.length + " cases · page " + page + " of " + pages }));
    if (page < pages) { var next = el("button", { text: "next →", id: "next" }); next.onclick = function () { var q = params(); q.page = page + 1; setParams(q); }; nav.appendChild(next); }
    root.appendChild(el("section", { id: "cases" }, [el("h2", { text: "Cases" }), el("div", { cls: "controls" }, [sel, ver]), nav,
      table(["case"].concat(idx.criteria), rows)]));
  }

  function stepsTable(t) {
    var cps = {};
    (t.checkpoints || []).forEach(function (c) { cps[c.step_index] = c; });
    var rows = [];
    t.steps.forEach(function (s) {
      if (cps[s.index]) rows.push([td(""), td("checkpoint"), td(""), td(cps[s.index].id || ""), td(""), td("")]);
      var kind = s.kind === "handoff" ? "handoff → " + s.to_agent : s.kind;
      rows.push([td(String(s.index)), td(kind), td(s.agent || ""), td(s.tool_name || ""), tdPre(s.arguments), tdPre(s.result)]);
    });
    return table(["#", "kind", "agent", "tool", "arguments", "result"], rows);
  }

  // The three kinds of evidence side by side, never folded into one score: what the agent
  // said (transcript), what changed downstream (effects), what the user gets (outcome).
  function releaseSection(c) {
    var r = c.release, t = c.trajectory;
    var transcript = el("div", { cls: "evidence-col" }, [el("h4", { text: "Transcript" }),
      el("p", { text: t ? "terminal status: " + t.terminal_status + " · " + t.steps.length + " steps" : "no trajectory" }),
      el("pre", { text: txt(c.output) })]);
    var ops = Object.keys(r.effects.per_operation).map(function (op) {
      var n = r.effects.per_operation[op];
      return [td(op), td(String(n.effect_attempts)), td(String(n.effect_count), n.effect_count > 1 ? "fail" : "")];
    });
    var effects = el("div", { cls: "evidence-col" }, [el("h4", { text: "Effects" }),
      table(["operation", "attempts", "effects"], ops),
      table(["operation", "idempotency key", "applied"], r.effects.attempts.map(function (a) {
        return [td(a.operation), td(a.idempotency_key), td(a.applied ? "yes" : "no")];
      }))]);
    var outcome = el("div", { cls: "evidence-col" }, [el("h4", { text: "Outcome" }),
      table(["kind", "evidence"], r.evidence.map(function (e) {
        var fields = {};
        Object.keys(e).forEach(function (k) { if (k !== "kind" && k !== "after_step") fields[k] = e[k]; });
        return [td(e.kind), tdPre(txt(fields))];
      }))]);
    if (r["class"]) {
      outcome.appendChild(el("p", { cls: "release-class", text: "release class: " + r["class"] }));
      if (r.repair_hint) outcome.appendChild(el("p", { text: "repair: " + r.repair_hint }));
    }
    return el("div", null, [el("h3", { text: "Evidence: transcript · effects · outcome" }),
                            el("div", { cls: "evidence" }, [transcript, effects, outcome])]);
  }

  // A case panel; ``marked`` (optional): criteria whose verdict rows are highlighted.
  function renderPanel(root, c, criteria, id, marked) {
    var panel = el("section", { id: id || "panel", cls: "panel" }, [el("h2", { text: "Case " + c.case_id })]);
    var head = [[td("input"), tdPre(c.input)], [td("expected"), tdPre(c.expected)]];
    if (c.fault) head.push([td("fault"), td(c.fault)]);
    head.push([td(c.error ? "error" : "output"), tdPre(c.error || c.output)]);
    if (c.traceback) head.push([td("traceback"), el("td", null, [el("pre", { cls: "traceback", text: c.traceback })])]);
    if (c.attempts && c.attempts.length) {  // retries: earlier attempts; the verdict is the last one's
      var n = c.attempts.length + 1;
      head.push([td("attempts"), el("td", { cls: "attempts" }, [
        el("p", { text: n + " attempts; the verdicts are attempt " + n + "'s" }),
        table(["attempt", "ended with", "error"], c.attempts.map(function (a) {
          return [td(String(a.attempt)), td(a.error_kind || "error"), tdPre(a.error || "")];
        }))])]);
    }
    panel.appendChild(table(["", ""], head));
    panel.appendChild(el("h3", { text: "Verdicts" }));
    var verdicts = table(["criterion", "verdict", "reason"], criteria.map(function (k) {
      var v = c.verdicts[k] || ["(not judged)", null];
      return [td(k), td(v[0], v[0]), td(v[1] || "")];
    }));
    criteria.forEach(function (k, i) {
      var tr = verdicts.tBodies[0].rows[i];
      tr.setAttribute("data-criterion", k);
      if (marked && marked.indexOf(k) >= 0) tr.className = "flipped";
    });
    panel.appendChild(verdicts);
    if (c.judgements && c.judgements.length) {  // each judgement: rubric, prompt, raw response, label side by side
      panel.appendChild(el("h3", { text: "Model judges" }));
      c.judgements.forEach(function (j) {
        var said = j.criterion + ": " + j.verdict + " by " + j.judge + " (" + j.model + ")" + (j.cached ? " · from the cache" : "") +
          " — " + (j.verdict === "error" ? j.error : j.explanation);
        var box = el("div", { cls: "judgement" }, [el("p", { cls: "judgement-verdict", text: said })]);
        var grid = table(["rubric", "prompt", "judge's raw response", "human label"],
          [[tdPre(j.rubric), tdPre(j.prompt), tdPre(j.raw_response === null ? "(none)" : j.raw_response),
            td(j.label ? j.label + (j.label_stale ? " (given for another output)" : "") : "(not labelled)")]]);
        grid.className = "judgement-grid";
        box.appendChild(grid);
        panel.appendChild(box);
      });
    }
    if (c.paths && c.paths.length) {
      panel.appendChild(el("h3", { text: "Compared state paths" }));
      panel.appendChild(table(["criterion", "path", "initial", "expected", "recorded", "verdict"], c.paths.map(function (p) {
        return [td(p.criterion), td(p.path, "path"), tdPre(txt(p.initial)),
                tdPre((p.op ? p.op + " " : "") + txt(p.expected)), tdPre(txt(p.recorded)),
                td(p.verdict + (p.note ? " (" + p.note + ")" : ""), p.verdict)];
      })));
    }
    // agent_tool_calls: each expected call beside the recorded one, argument by argument
    if (c.tool_calls && c.tool_calls.length) {
      panel.appendChild(el("h3", { text: "Expected tool calls beside the recorded ones" }));
      panel.appendChild(table(["criterion", "expected call / argument", "expected", "recorded", "verdict"],
        c.tool_calls.map(function (p) {
          return [td(p.criterion), td(p.path, "path"), tdPre(txt(p.expected)), tdPre(txt(p.recorded)),
                  td(p.verdict + (p.note ? " (" + p.note + ")" : ""), p.verdict)];
        })));
    }
    if (c.trajectory) {
      var t = c.trajectory;
      panel.appendChild(el("h3", { text: "Trajectory: " + t.steps.length + " steps · " + t.terminal_status +
        (t.truncated ? " · truncated at " + t.step_limit : "") + (c.route ? " · route " + c.route.join(" > ") : "") }));
      panel.appendChild(stepsTable(t));
      if (t.constraints.length) panel.appendChild(table(["constraint", "passed", "step"], t.constraints.map(function (k) {
        return [td(k.name), td(k.passed ? "yes" : "NO", k.passed ? "pass" : "fail"), td(String(k.step_index))];
      })));
    } else panel.appendChild(el("p", { text: "no trajectory recorded" }));
    if (c.release) panel.appendChild(releaseSection(c));
    if (c.state !== undefined) { panel.appendChild(el("h3", { text: "Final state" })); panel.appendChild(el("pre", { text: txt(c.state) })); }
    if (c.replays && c.replays.length) {
      panel.appendChild(el("h3", { text: "Replays" }));
      panel.appendChild(table(["replay", "version", "checkpoint", "change", "fidelity / after the change"], c.replays.map(function (r) {
        return [td(r.kind), td(r.version), td("before step " + r.checkpoint), td(r.change || "none (control)"), tdPre(r.detail)];
      })));
    }
    (c.pairs || []).forEach(function (pr) {
      panel.appendChild(el("h3", { text: "Metamorphic pair under '" + pr.transform + "'" }));
      var rows = pr.rows.map(function (r) { return [td(r[0]), tdPre(r[1]), tdPre(r[2])]; });
      panel.appendChild(table(["", pr.source, pr.derived], rows));
    });
    root.appendChild(panel);
    return panel;
  }

  // Opening a case (a click on its row, or a #case= link) brings its panel into view, once:
  // later re-renders (paging, data arriving) leave the scroll position alone.
  function reveal(node, key) {
    if (state.shown === key) return;
    state.shown = key;
    node.scrollIntoView({ block: "start" });
  }

  // One case of run R, or undefined while its chunk loads (loading it), or null: no such case.
  function caseOf(R, caseId) {
    var pos = positionOf(R, caseId);
    if (pos === undefined) return null;
    var n = Math.floor(pos / R.index.chunk_size);
    if (!R.chunks[n]) { load(dataPath(R.role, "cases-" + n + ".js")); return undefined; }
    return R.chunks[n][pos % R.index.chunk_size];
  }

  // A run's ordinary report: summary, filterable cases, the open case's panel.
  // ---- the search box: every step's text (data/search.js, loaded on the first search),
  // matched here, offline. A hit links to its case panel. Text is shown with textContent and
  // the matches wrapped in <mark> elements: recorded markup stays text.
  var SEARCH_SHOWN = 200;
  function words(q) { return q.toLowerCase().split(/\s+/).filter(function (w) { return w; }); }
  function snippet(text, ws) {
    var low = text.toLowerCase(), spans = [];
    ws.forEach(function (w) {
      for (var i = low.indexOf(w); i >= 0; i = low.indexOf(w, i + w.length)) spans.push([i, i + w.length]);
    });
    spans.sort(function (a, b) { return a[0] - b[0]; });
    var first = spans.length ? spans[0][0] : 0, from = Math.max(0, first - 60), to = Math.min(text.length, first + 160);
    var out = el("span", { cls: "snippet" }), at = from;
    if (from > 0) out.appendChild(document.createTextNode("…"));
    spans.forEach(function (sp) {
      if (sp[0] < at || sp[1] > to) return;
      out.appendChild(document.createTextNode(text.slice(at, sp[0])));
      out.appendChild(el("mark", { text: text.slice(sp[0], sp[1]) }));
      at = sp[1];
    });
    out.appendChild(document.createTextNode(text.slice(at, to) + (to < text.length ? "…" : "")));
    return out;
  }
  function renderSearch(root, p, R) {
    var input = el("input", { id: "search", type: "search", placeholder: "search every step: tool, arguments, results, messages",
                              size: "48" });
    input.value = p.q || "";
    var go = el("button", { id: "search-go", type: "submit", text: "search" });
    var form = el("form", { cls: "controls", id: "search-form" }, [input, go]);
    form.onsubmit = function (e) { e.preventDefault(); var q = params(); q.q = input.value; delete q.case; setParams(q); };
    var section = el("section", { id: "search-section" }, [el("h2", { text: "Search" }), form]);
    root.appendChild(section);
    var ws = words(p.q || "");
    if (!ws.length) return;
    if (!R.search) { load(dataPath(R.role, "search.js")); section.appendChild(el("p", { cls: "loading", text: "loading…" })); return; }
    var hits = R.search.filter(function (r) {
      var hay = ((r[3] || "") + " " + r[4]).toLowerCase();
      return ws.every(function (w) { return hay.indexOf(w) >= 0; });
    });
    var cases = {};
    hits.forEach(function (r) { cases[r[0]] = true; });
    var nc = Object.keys(cases).length;
    section.appendChild(el("p", { id: "search-count", text: hits.length + (hits.length === 1 ? " step in " : " steps in ") +
      nc + (nc === 1 ? " case" : " cases") + (hits.length === 1 ? " matches" : " match") +
      (hits.length > SEARCH_SHOWN ? " (the first " + SEARCH_SHOWN + " shown)" : "") }));
    if (!hits.length) return;
    section.appendChild(table(["case", "step", "kind", "tool", "text"], hits.slice(0, SEARCH_SHOWN).map(function (r) {
      var a = el("a", { cls: "case hit", text: r[0], "data-case": r[0] });
      a.onclick = function () { var q = params(); q.case = r[0]; setParams(q); };
      return [el("td", null, [a]), td(r[1] === null ? "end" : String(r[1])), td(r[2]), td(r[3] || "–"),
              el("td", null, [snippet(r[4], ws)])];
    })));
  }

  function renderRun(root, p, R) {
    renderSummary(root, R);
    renderSearch(root, p, R);
    renderCases(root, p, R);
    if (p.case) {
      var key = (p.view || "") + "\u0000" + p.case;
      var c = caseOf(R, p.case);
      if (c === null) reveal(root.appendChild(el("p", { id: "panel", text: "no case " + p.case })), key);
      else if (c) reveal(renderPanel(root, c, R.index.criteria), key);
      else root.appendChild(el("p", { id: "panel-loading", text: "loading case…" }));
    } else state.shown = null;
  }

  // ---- the comparison (a bundle of two runs) ----

  function runLine(d, role) {
    var r = d[role];
    return r.run_id + " · " + r.system.name + " " + r.system.version;
  }
  function openPair(caseId) { setParams({ "case": caseId }); }
  function caseLink(caseId) {
    var a = el("a", { cls: "case", text: caseId, "data-case": caseId });
    a.onclick = function () { openPair(caseId); };
    return a;
  }
  function caseLinks(ids) {
    var span = el("span", { cls: "ids" });
    ids.forEach(function (id, i) {
      if (i) span.appendChild(document.createTextNode(", "));
      span.appendChild(caseLink(id));
    });
    return span;
  }
  function tdNodes(nodes, cls) { return el("td", { cls: cls || "" }, nodes); }
  function num(x) { return x === null || x === undefined ? "–" : String(x); }

  function renderTabs(root, p) {
    var d = state.diff, current = p.view === "base" || p.view === "candidate" ? p.view : "";
    var tabs = [["", "Comparison", "#", "tab-compare"],
                ["base", "Base run " + d.base.run_id, "#view=base", "tab-base"],
                ["candidate", "Candidate run " + d.candidate.run_id, "#view=candidate", "tab-candidate"]];
    root.appendChild(el("nav", { id: "tabs", cls: "tabs" }, tabs.map(function (t) {
      var a = el("a", { id: t[3], href: t[2], text: t[1], cls: t[0] === current ? "tab active" : "tab" });
      a.onclick = function () { window.scrollTo(0, 0); };  // another page: start at its top
      return a;
    })));
  }

  function compareBanners(root) {
    var d = state.diff, runs = state.page.runs;
    ROLES.forEach(function (role) {
      var r = runs[role];
      if (r.complete !== false) return;
      root.appendChild(el("div", { id: "incomplete-" + role, cls: "banner", role: "alert",
        text: "Incomplete " + role + " run " + d[role].run_id + ": " + r.cases_committed + " of " + r.cases_expected +
              " cases recorded; its unrecorded cases count as missing" }));
    });
  }

  function renderComparison(root, p) {
    var d = state.diff, pg = state.page;
    document.getElementById("title").textContent = "base " + runLine(d, "base") + "  →  candidate " + runLine(d, "candidate");
    compareBanners(root);
    root.appendChild(el("section", { id: "runs" }, [el("h2", { text: "Runs" }),
      table(["", "run", "system", "version", "recorded", "report"], ROLES.map(function (role) {
        var r = d[role], n = pg.runs[role];
        var recorded = r.complete ? "complete · " + n.cases_committed + " cases"
          : "incomplete · " + n.cases_committed + " of " + n.cases_expected + " cases";
        return [td(role), td(r.run_id), td(r.system.name), td(r.system.version),
                td(recorded, r.complete ? "" : "fail"),
                tdNodes([el("a", { href: "#view=" + role, cls: "open-run", text: "open the " + role + " report" })])];
      }))]));
    var c = d.cases;
    root.appendChild(el("section", { id: "pairing" }, [el("h2", { text: "Cases" }),
      table(["", "cases", "ids"], [
        [td("paired (same id and fingerprint)"), td(String(c.paired), "num"), td("")],
        [td("fingerprint changed (another question: not paired)"), td(String(c.fingerprint_changed.length), "num"),
         tdNodes([caseLinks(c.fingerprint_changed)])],
        [td("only in base (missing in the candidate)"), td(String(c.only_base.length), "num"), tdNodes([caseLinks(c.only_base)])],
        [td("only in candidate"), td(String(c.only_candidate.length), "num"), tdNodes([caseLinks(c.only_candidate)])]
      ])]));
    var rows = {};
    d.criteria.forEach(function (r) { rows["\u0000" + r.criterion] = r; });
    var crit = el("section", { id: "compare-criteria" }, [el("h2", { text: "Criteria" }),
      table(["criterion", "base", "base interval", "candidate", "candidate interval", "pass→fail", "fail→pass",
             "→ missing", "missing →", "p", "method"], pg.criteria_order.map(function (k) {
        var r = rows["\u0000" + k];
        return [td(r.criterion), td(pct(r.base.rate), "num"), td(outward(r.base.low, r.base.high)),
                td(pct(r.candidate.rate), "num"), td(outward(r.candidate.low, r.candidate.high)),
                td(String(r.regressions.length), "num" + (r.regressions.length ? " fail" : "")),
                td(String(r.fixes.length), "num" + (r.fixes.length ? " pass" : "")),
                td(String(r.to_missing.length), "num"), td(String(r.from_missing.length), "num"),
                td(String(Number(r.p_value.toPrecision(3))), "num"), td(r.method)];
      }))]);
    var only = [];
    if (d.criteria_only_in_base.length) only.push("only in base: " + d.criteria_only_in_base.join(", "));
    if (d.criteria_only_in_candidate.length) only.push("only in candidate: " + d.criteria_only_in_candidate.join(", "));
    if (only.length) crit.appendChild(el("p", { cls: "note", text: "not compared: " + only.join("; ") }));
    crit.appendChild(el("p", { cls: "note", text: "p: McNemar's exact test (two-sided) on pass→fail vs fail→pass; " +
      "moves into or out of missing or excluded are counted apart and kept out of the test." }));
    root.appendChild(crit);
    var flipped = el("section", { id: "flipped" }, [el("h2", { text: "Flipped cases (regressions first)" })]);
    if (!pg.flipped.length) flipped.appendChild(el("p", { id: "no-flips", text: "no case changed its verdict" }));
    pg.flipped.forEach(function (g) {
      // a flipped case known to be flaky (oloproof flaky): its flip may be noise
      var known = {};
      d.criteria.forEach(function (r) { if (r.criterion === g.criterion && r.known_flaky) known = r.known_flaky; });
      var list = el("ul", { cls: "cases" }, g.cases.map(function (id) {
        var f = Object.prototype.hasOwnProperty.call(known, id) ? known[id] : null;
        return el("li", f ? { cls: "known-flaky" } : null, [caseLink(id), f ? el("span", { cls: "flaky",
          text: " known flaky (" + f.pass + " pass, " + f.fail + " fail in runs of " + f.version + ")" }) : null]);
      }));
      flipped.appendChild(el("div", { cls: "group " + g.move, "data-criterion": g.criterion, "data-move": g.move }, [
        el("h3", { text: g.criterion + " · " + g.label + " (" + g.cases.length + ")" }), list]));
    });
    root.appendChild(flipped);
    if (d.metrics.length) {
      root.appendChild(el("section", { id: "compare-metrics" }, [el("h2", { text: "Metrics" }),
        table(["metric", "base", "candidate", "median per-case difference"], d.metrics.map(function (m) {
          var unit = m.unit ? " " + m.unit : "";
          var v = function (x) { return num(x.value) + " [" + num(x.low) + ", " + num(x.high) + "]" + unit; };
          return [td(m.id), td(v(m.base)), td(v(m.candidate)),
                  td(m.median_difference === null ? "–" : (m.median_difference > 0 ? "+" : "") + m.median_difference + unit +
                     " over " + m.pairs + " pairs")];
        }))]));
    }
    if (d.slices.length) {
      root.appendChild(el("section", { id: "compare-slices" }, [el("h2", { text: "By slice (descriptive; slices never gate)" }),
        table(["slice", "criterion", "pass→fail", "fail→pass", "→ missing", "missing →"], d.slices.map(function (s) {
          return [td(s.slice), td(s.criterion), td(String(s.regressions.length), "num"), td(String(s.fixes.length), "num"),
                  td(String(s.to_missing.length), "num"), td(String(s.from_missing.length), "num")];
        }))]));
    }
    if (p.case) renderPair(root, p.case);
    else state.shown = null;
  }

  // The case's base panel on the left, its candidate panel on the right, brought into view
  // once both are drawn.
  function renderPair(root, caseId) {
    var d = state.diff, moves = [], marked = [];
    state.page.flipped.forEach(function (g) {
      if (g.cases.indexOf(caseId) >= 0) { moves.push(g.criterion + ": " + g.label); marked.push(g.criterion); }
    });
    var c = d.cases, apart = c.fingerprint_changed.indexOf(caseId) >= 0
      ? "its fingerprint changed (input, initial state or expected): another question, never paired"
      : c.only_base.indexOf(caseId) >= 0 ? "only in the base run (missing in the candidate)"
      : c.only_candidate.indexOf(caseId) >= 0 ? "only in the candidate run" : "";
    var note = (moves.length ? "flipped: " + moves.join(" · ") : apart ? "" : "no verdict flipped") +
      (moves.length && apart ? " · " : "") + apart;
    var section = el("section", { id: "pair" }, [el("h2", { text: "Case " + caseId + ": base and candidate side by side" }),
      el("p", { id: "pair-moves", cls: "note", text: note })]);
    var sides = el("div", { cls: "sides" }), drawn = true;
    ROLES.forEach(function (role) {
      var R = state.runs[role];
      var side = el("div", { cls: "side", id: "side-" + role }, [el("h3", { text: role + " · run " + runLine(d, role) })]);
      var c = R.index ? caseOf(R, caseId) : undefined;
      if (c) {
        var open = el("a", { cls: "open-case", text: "open in the " + role + " report",
                             href: "#view=" + role + "&case=" + encodeURIComponent(caseId) });
        open.onclick = function () { window.scrollTo(0, 0); };
        side.appendChild(el("p", { cls: "note" }, [open]));
      }
      if (c === null) side.appendChild(el("p", { id: "panel-" + role, cls: "panel absent", text: "no case " + caseId + " in the " + role + " run" }));
      else if (c) renderPanel(side, c, R.index.criteria, "panel-" + role, marked);
      else { side.appendChild(el("p", { cls: "loading", text: "loading case…" })); drawn = false; }
      sides.appendChild(side);
    });
    section.appendChild(sides);
    root.appendChild(section);
    if (drawn) reveal(section, "pair\u0000" + caseId);
  }

  function renderCompare(root, p) {
    if (!state.diff) return false;
    root.textContent = "";
    renderTabs(root, p);
    if (p.view === "base" || p.view === "candidate") {
      var R = state.runs[p.view];
      if (!R.summary || !R.index) root.appendChild(el("p", { text: "loading the " + p.view + " run…" }));
      else renderRun(root, p, R);
    } else renderComparison(root, p);
    return true;
  }

  function render() {
    var root = document.getElementById("root");
    var p = params();
    if (COMPARE) {
      if (!renderCompare(root, p)) return;
    } else {
      var R = state.runs[""];
      if (!R.summary || !R.index) return;
      root.textContent = "";
      renderRun(root, p, R);
    }
    if (!document.body.dataset.firstPaint) document.body.dataset.firstPaint = String(Math.round(performance.now() - t0));
    document.body.dataset.ready = "1";
  }
  window.addEventListener("hashchange", render);
  if (COMPARE) {
    load("data/diff.js");
    ROLES.forEach(function (role) { load(dataPath(role, "summary.js")); load(dataPath(role, "index.js")); });
  } else {
    load("data/summary.js");
    load("data/index.js");
  }
})();
