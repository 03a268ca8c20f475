// Oloproof run report. Every recorded value is rendered with textContent: a tool result
// holding markup shows as text, never as markup. Data arrive lazily as script files
// (data/*.js), which works from a static folder (file://) as well as from a server.
"use strict";
(function () {
  var state = { summary: null, index: null, chunks: {}, pending: {}, shown: null };
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

  window.OLOPROOF = {
    summary: function (data) { state.summary = data; render(); },
    index: function (data) { state.index = data; render(); },
    chunk: function (n, cases) { state.chunks[n] = cases; render(); }
  };

  function params() {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      if (!kv) return;
      var i = kv.indexOf("=");
      out[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1));
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

  function renderSummary(root) {
    var s = state.summary;
    document.getElementById("title").textContent = "run " + s.run_id + " · " + s.system.name + " " + s.system.version;
    var banner = incompleteBanner(s);
    if (banner) root.appendChild(banner);
    var rows = s.criteria.map(function (r) {
      return [td(r.criterion), td(pct(r.rate), "num"), td(outward(r.low, r.high)), bar(r), td(evidence(r))];
    });
    root.appendChild(el("section", { id: "criteria" }, [el("h2", { text: "Criteria" }),
      table(["criterion", "rate", "interval", "", "evidence"], rows)]));
    if (s.metrics.length) {
      root.appendChild(el("section", { id: "metrics" }, [el("h2", { text: "Metrics" }), table(["metric", "value", "interval", "evidence"],
        s.metrics.map(function (m) {
          var nb = function (x) { return x === null ? "no bound" : String(x); };
          return [td(m.id), td(nb(m.value) + " " + m.unit, "num"), td("[" + nb(m.low) + ", " + nb(m.high) + "] " + m.unit),
                  td("p" + Math.round(m.quantile * 100) + " of " + m.observed + " observed · " + m.missing + " missing · " + m.excluded + " excluded")];
        }))]));
    }
    if (s.slices.length) {
      root.appendChild(el("section", { id: "slices" }, [el("h2", { text: "Slices (descriptive; slices never gate)" }),
        table(["slice", "criterion", "rate", "interval", "evidence"], s.slices.map(function (r) {
          return [td(r.slice), td(r.criterion), td(pct(r.rate), "num"), td(outward(r.low, r.high)),
                  td(evidence(r) + (r.low_support ? " · low support" : ""))];
        }))]));
    }
    var g = s.gate;
    var gate = el("section", { id: "gate" }, [el("h2", null, [document.createTextNode("Gate: "),
      el("span", { text: g.decision || "none", cls: g.decision || "", id: "decision" })])]);
    if (g.rules.length) gate.appendChild(table(["rule", "criterion", "status", "reason"], g.rules.map(function (r) {
      return [td(r.name), td(r.criterion), td(r.status, r.status), td(r.reason || "")];
    })));
    root.appendChild(gate);
  }

  function filtered(p) {
    var idx = state.index, ci = idx.criteria.indexOf(p.criterion);
    return idx.cases.filter(function (c) {
      if (ci < 0 || !p.verdict) return true;
      return c[2][ci] === p.verdict;
    });
  }

  function renderCases(root, p) {
    var idx = state.index;
    var sel = el("select", { id: "criterion" }, [el("option", { value: "", text: "any criterion" })]
      .concat(idx.criteria.map(function (c) { return el("option", { value: c, text: c }); })));
    sel.value = p.criterion || "";
    var ver = el("select", { id: "verdict" }, ["", "pass", "fail", "missing", "excluded"].map(function (v) {
      return el("option", { value: v, text: v || "any verdict" });
    }));
    ver.value = p.verdict || "";
    function change() { setParams({ criterion: sel.value, verdict: ver.value, page: 1 }); }
    sel.onchange = change; ver.onchange = change;
    var list = filtered(p);
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

  function renderPanel(root, c) {
    var panel = el("section", { id: "panel" }, [el("h2", { text: "Case " + c.case_id })]);
    panel.appendChild(table(["", ""], [
      [td("input"), tdPre(c.input)], [td("expected"), tdPre(c.expected)],
      [td(c.error ? "error" : "output"), tdPre(c.error || c.output)]]));
    panel.appendChild(el("h3", { text: "Verdicts" }));
    panel.appendChild(table(["criterion", "verdict", "reason"], state.index.criteria.map(function (k) {
      var v = c.verdicts[k]; return [td(k), td(v[0], v[0]), td(v[1] || "")];
    })));
    if (c.paths && c.paths.length) {
      panel.appendChild(el("h3", { text: "Compared state paths" }));
      panel.appendChild(table(["criterion", "path", "initial", "expected", "recorded", "verdict"], c.paths.map(function (p) {
        return [td(p.criterion), td(p.path, "path"), tdPre(txt(p.initial)), tdPre(txt(p.expected)), tdPre(txt(p.recorded)),
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
  function reveal(panel, caseId) {
    if (state.shown === caseId) return;
    state.shown = caseId;
    panel.scrollIntoView({ block: "start" });
  }

  function render() {
    var root = document.getElementById("root");
    if (!state.summary || !state.index) return;
    var p = params();
    root.textContent = "";
    renderSummary(root);
    renderCases(root, p);
    if (p.case) {
      var pos = state.index.position[p.case];
      if (pos === undefined) reveal(root.appendChild(el("p", { id: "panel", text: "no case " + p.case })), p.case);
      else {
        var n = Math.floor(pos / state.index.chunk_size);
        if (state.chunks[n]) reveal(renderPanel(root, state.chunks[n][pos % state.index.chunk_size]), p.case);
        else { root.appendChild(el("p", { id: "panel-loading", text: "loading case…" })); load("data/cases-" + n + ".js"); }
      }
    } else state.shown = null;
    if (!document.body.dataset.firstPaint) document.body.dataset.firstPaint = String(Math.round(performance.now() - t0));
    document.body.dataset.ready = "1";
  }
  window.addEventListener("hashchange", render);
  load("data/summary.js");
  load("data/index.js");
})();
