"""Reports over pass records: the terminal tables (timing top-N, a run's passes) and a run's ``index.html``.

``index.html`` is one self-contained file (no network, no external script): the index and the diffs are
embedded as JSON, a small script renders the pass table, filters it by phase / changed / name (the filter
state lives in the URL fragment, e.g. ``index.html#phase=fuse&changed=1``, so a view can be linked), links
every dump and diff, and shows a pass's diff syntax-highlighted below the table. Its kernel history
(``index.html#func=NAME``) follows one function through every pass that changed it, old and new side by side
(``kernel_history``; the same as ``mtp-tvm dumps show RUN --func NAME --history``). The page is rendered
by ``support.html_page``: its data never becomes markup. A run profiled with
``--profile`` (``profile.json`` in the folder) also gets a table of ``main``'s kernels: time, share of ``main``,
GB/s, GFLOP/s, roofline fraction. A run that ``localize`` compared (``index.json``'s ``localize``) gets the
per-call table, the first differing call highlighted and linked to its kernel history.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..instrument.kernel_history import histories
from ..support import atomic_file
from ..support.html_page import Markup, escape, json_script, render
from ..support.text_table import text_table

HTML_FILE = "index.html"
PROFILE_FILE = "profile.json"  # a --profile run's kernel times (tools/profile.py), shown as the page's kernel table
DIFF_LINES_EMBEDDED = 400  # longer diffs are cut in the page; the .diff file is linked for the rest


def timing_table(records, top: int = 15) -> str:
    """The ``top`` passes by self time, then the total per phase (``records``: ``dumps.PassRecord``s)."""
    ran = [r for r in records if r.skipped is None]
    total = sum(r.self_ms for r in ran) or 1e-9
    rows = [("#", "phase", "pass", "self ms", "incl ms", "self %")]
    for r in sorted(ran, key=lambda r: -r.self_ms)[:top]:
        rows.append((f"{r.index:03d}", r.phase, r.name, f"{r.self_ms:.2f}", f"{r.ms:.2f}",
                     f"{100 * r.self_ms / total:.1f}"))
    phases: dict[str, float] = {}
    for r in ran:
        phases[r.phase] = phases.get(r.phase, 0.0) + r.self_ms
    by_phase = ", ".join(f"{p} {ms:.1f}" for p, ms in phases.items())
    return "\n".join([f"pass timing: top {min(top, len(ran))} of {len(ran)} passes by self time",
                      *text_table(rows, {3, 4, 5}), f"per phase (self ms): {by_phase}; total {total:.1f} ms"])


def pass_table(index: dict, changed: bool = False, phase: str | None = None) -> str:
    """A run's passes, one line each: number, phase, name (indented when run inside another pass), state;
    only those that changed the IR with ``changed``, only one phase with ``phase``."""
    rows = [("#", "phase", "pass", "state", "+", "-", "ms", "file")]
    for p in index["passes"]:
        if (changed and not p["changed"]) or (phase and p["phase"] != phase):
            continue
        state = (f"skipped ({p['skipped']})" if p["skipped"] else "FAILED" if p["error"]
                 else "changed" if p["changed"] else "unchanged")
        rows.append((f"{p['index']:03d}", p["phase"], "  " * p["depth"] + p["name"], state,
                     "" if p["lines_added"] is None else p["lines_added"],
                     "" if p["lines_removed"] is None else p["lines_removed"], f"{p['ms']:.2f}", p["file"] or ""))
    return "\n".join(text_table(rows, {4, 5, 6}))


def _embedded_diffs(run: Path, index: dict) -> dict[str, str]:
    diffs = {}
    for p in index["passes"]:
        if p["diff"]:
            lines = (run / p["diff"]).read_text().splitlines()
            cut = len(lines) - DIFF_LINES_EMBEDDED
            diffs[str(p["index"])] = "\n".join(lines[:DIFF_LINES_EMBEDDED]) + (
                f"\n... {cut} more lines in {p['diff']}" if cut > 0 else "")
    return diffs


def _embedded_histories(run: Path, index: dict) -> dict[str, list[dict]]:
    """Each function's history (``kernel_history.histories``), each step's diff cut like the pass diffs."""
    out = histories(run, index)
    for steps in out.values():
        for step in steps:
            lines = step["diff"].splitlines()
            if len(lines) > DIFF_LINES_EMBEDDED:
                step["diff"] = "\n".join(lines[:DIFF_LINES_EMBEDDED] + [
                    f"... {len(lines) - DIFF_LINES_EMBEDDED} more lines: mtp-tvm dumps show RUN --func NAME --history"])
    return out


def history_script(run: Path, index: dict) -> Markup:
    """The page's embedded kernel history, made from the run's pass files (the recorder makes it while the
    assembly is still being generated, and passes it to ``write_html``)."""
    return json_script("history-data", _embedded_histories(run, index))


def _history_script(run: Path, index: dict) -> Markup:
    """The pass files never change after the build, so a re-render (``run_folder.update_index`` after the
    golden check) reuses the history the page already holds (parsed and embedded anew, never copied as text)."""
    try:
        m = _HISTORY_SCRIPT.search((run / HTML_FILE).read_text())
        return json_script("history-data", json.loads(m.group(1))) if m else history_script(run, index)
    except (OSError, UnicodeDecodeError, ValueError):
        return history_script(run, index)


_HISTORY_SCRIPT = re.compile(r'<script type="application/json" id="history-data">(.*?)</script>', re.S)


def write_html(run: Path, index: dict, history: Markup | None = None) -> Path:
    """Render ``index.html`` for a run folder from its index (atomically); ``history``: ``history_script``'s,
    when the caller made it already."""
    title = f"{index['case']} on {index['target']['kind']}"
    profile = json.loads((run / PROFILE_FILE).read_text()) if (run / PROFILE_FILE).is_file() else None
    page = render(_PAGE, title=escape(title),
                  data=Markup(json_script("index-data", index) + json_script("diff-data", _embedded_diffs(run, index))
                              + json_script("profile-data", profile)),
                  history=history if history is not None else _history_script(run, index))
    path = run / HTML_FILE
    atomic_file.write_text(path, page)
    return path


_PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mtp_tvm passes: {{title}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em; } #summary { color: #555; margin: 0 0 1em; }
nav { display: flex; gap: 1.2em; align-items: center; margin-bottom: .6em; }
table { border-collapse: collapse; width: 100%; } th, td { padding: 2px 8px; text-align: left; }
th { border-bottom: 2px solid #999; position: sticky; top: 0; background: #fff; }
tr.pass:nth-child(even) { background: #f5f5f5; } tr.pass.selected { background: #ffe9a8; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.changed { color: #0a6; } .unchanged { color: #999; } .skipped { color: #b60; }
.failed { color: #c00; font-weight: bold; }
.nested { padding-left: 1.5em; } a { color: #05c; }
pre#diff { background: #fafafa; border: 1px solid #ddd; padding: .6em; overflow-x: auto; font-size: 12.5px; }
.d-add { background: #e6ffec; } .d-del { background: #ffebe9; } .d-hunk { color: #6f42c1; }
.d-head { font-weight: bold; }
table.sbs { width: 100%; table-layout: fixed; font: 12.5px/1.35 monospace; border: 1px solid #ddd; margin-bottom: 1em; }
table.sbs td { white-space: pre-wrap; word-break: break-all; vertical-align: top; padding: 0 6px; }
table.sbs col.lnc { width: 3.5em; } table.sbs td.ln { color: #999; text-align: right; }
table.sbs tr.hunk td { color: #6f42c1; background: #f6f6f6; }
td.empty { background: #f6f6f6; } #history h3 { font-size: 1em; margin: 1em 0 .3em; }
.t-kw { color: #a626a4; } .t-str { color: #50a14f; } .t-num { color: #986801; }
.t-com { color: #a0a1a7; font-style: italic; }
.t-ns { color: #4078f2; }
span.bar { display: inline-block; height: .7em; background: #4a8; margin-left: .4em; vertical-align: middle; }
#calls { width: auto; margin-bottom: .5em; } tr.call-first { background: #ffd6d6; font-weight: bold; }
tr.call-diff { color: #c00; } pre#localize-first { background: #fafafa; border: 1px solid #ddd; padding: .6em; }
#kernels { width: auto; margin-bottom: 1em; } tr.kernel:nth-child(even) { background: #f5f5f5; } tr.other { color: #777; } tr.total { border-top: 2px solid #999; }
</style></head>
<body>
<h1>{{title}}</h1><p id="summary"></p>
<section id="profile" hidden><h2>Kernels of main (--profile)</h2><p id="profile-summary"></p>
<table id="kernels"><thead><tr><th>kernel</th><th>ms</th><th>share of main</th><th>GB/s</th><th>GFLOP/s</th>
<th>roofline</th></tr></thead><tbody></tbody></table></section>
<section id="localize" hidden><h2>Kernel calls against a reference build (localize)</h2>
<p id="localize-summary"></p>
<table id="calls"><thead><tr><th>test call</th><th>reference call</th><th>out</th><th>shape</th><th>max |diff|</th>
<th>mismatches</th><th>inputs</th><th>result</th></tr></thead><tbody></tbody></table>
<pre id="localize-first"></pre></section>
<nav>
 <label>phase <select id="phase"><option value="">all</option></select></label>
 <label><input type="checkbox" id="changed"> changed only</label>
 <label>pass <input id="q" placeholder="regex"></label>
 <span id="count"></span>
</nav>
<table id="passes"><thead><tr><th>#</th><th>phase</th><th>pass</th><th>state</th><th>+</th><th>&minus;</th>
<th>self ms</th><th>ms</th><th>dump</th><th>diff</th></tr></thead><tbody></tbody></table>
<section id="viewer" hidden><h2 id="diff-title"></h2><pre id="diff"></pre></section>
<section id="history"><h2>Kernel history</h2>
<nav><label>function <select id="func"><option value="">choose one</option></select></label>
<span id="func-count"></span></nav>
<div id="func-steps"></div></section>
{{history}}
<h2>Files</h2><ul id="files"></ul>
{{data}}
<script>
"use strict";
const index = JSON.parse(document.getElementById("index-data").textContent);
const diffs = JSON.parse(document.getElementById("diff-data").textContent);
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
  .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
// only files of the run folder are linked: no scheme (javascript:, http:), no absolute path
const link = (href, text) => href && !/^([a-z][a-z0-9+.-]*:|[\\/])/i.test(href) ?
  `<a href="${encodeURI(href)}">${esc(text)}</a>` : (href ? esc(text) : "");

function stateOf(p) {
  if (p.skipped) return ["skipped", "skipped (" + p.skipped + ")"];
  if (p.error) return ["failed", "FAILED: " + p.error];
  return p.changed ? ["changed", "changed"] : ["unchanged", "unchanged"];
}

const KEYWORDS = "def|class|for|in|with|if|elif|else|return|assert|and|or|not|lambda|True|False|None";
const TOKEN = new RegExp('(#.*$)|("(?:[^"\\\\]|\\\\.)*")|\\b(' + KEYWORDS + ')\\b|\\b([TRI])\\.|' +
                         '\\b(\\d+(?:\\.\\d+)?(?:e[-+]?\\d+)?)\\b', "g");
function highlight(code) {
  let out = "", last = 0;
  code.replace(TOKEN, (m, com, str, kw, ns, num, at) => {
    out += esc(code.slice(last, at));
    const cls = com ? "t-com" : str ? "t-str" : kw ? "t-kw" : ns ? "t-ns" : "t-num";
    out += `<span class="${cls}">${esc(m)}</span>`;
    last = at + m.length;
    return m;
  });
  return out + esc(code.slice(last));
}
function renderDiff(text) {
  return text.split("\n").map((line) => {
    if (line.startsWith("+++") || line.startsWith("---")) return `<span class="d-head">${esc(line)}</span>`;
    if (line.startsWith("@@")) return `<span class="d-hunk">${esc(line)}</span>`;
    const cls = line.startsWith("+") ? "d-add" : line.startsWith("-") ? "d-del" : "";
    const body = line.slice(0, 1) + highlight(line.slice(1));
    return cls ? `<span class="${cls}">${body}</span>` : body;
  }).join("\n");
}

function readState() {
  const s = new URLSearchParams(location.hash.slice(1));
  return {phase: s.get("phase") || "", changed: s.get("changed") === "1", q: s.get("q") || "", show: s.get("show"),
          func: s.get("func")};
}
function writeState(st) {
  const s = new URLSearchParams();
  if (st.phase) s.set("phase", st.phase);
  if (st.changed) s.set("changed", "1");
  if (st.q) s.set("q", st.q);
  if (st.show) s.set("show", st.show);
  if (st.func) s.set("func", st.func);
  history.replaceState(null, "", "#" + s.toString());
}
function matches(p, st) {
  if (st.phase && p.phase !== st.phase) return false;
  if (st.changed && !p.changed) return false;
  if (st.q) { try { return new RegExp(st.q).test(p.name); } catch (e) { return p.name.includes(st.q); } }
  return true;
}
function render() {
  const st = readState();
  renderHistory(st.func);
  $("phase").value = st.phase; $("changed").checked = st.changed; $("q").value = st.q;
  const rows = index.passes.filter((p) => matches(p, st)).map((p) => {
    const [cls, text] = stateOf(p);
    const view = diffs[p.index] ? `<a href="#" data-show="${p.index}">view</a> &middot; ${link(p.diff, "file")}` : "";
    return `<tr class="pass" data-index="${p.index}"><td class="num">${String(p.index).padStart(3, "0")}</td>` +
      `<td>${esc(p.phase)}</td><td class="${p.depth ? "nested" : ""}">${esc(p.name)}</td>` +
      `<td class="${cls}">${esc(text)}</td><td class="num">${p.lines_added ?? ""}</td>` +
      `<td class="num">${p.lines_removed ?? ""}</td><td class="num">${p.self_ms.toFixed(2)}</td>` +
      `<td class="num">${p.ms.toFixed(2)}</td>` +
      `<td>${link(p.file, "py")}${p.input_file ? " " + link(p.input_file, "input") : ""}</td>` +
      `<td>${view}</td></tr>`;
  });
  document.querySelector("#passes tbody").innerHTML = rows.join("");
  $("count").textContent = `${rows.length} of ${index.passes.length} passes`;
  const shown = st.show && diffs[st.show];
  $("viewer").hidden = !shown;
  if (shown) {
    const p = index.passes.find((q) => String(q.index) === st.show);
    $("diff-title").textContent = `${String(p.index).padStart(3, "0")} ${p.phase} / ${p.name}`;
    $("diff").innerHTML = renderDiff(diffs[st.show]);
    const row = document.querySelector(`tr.pass[data-index="${st.show}"]`);
    if (row) row.classList.add("selected");
  }
}
function update(change) { writeState({...readState(), ...change}); render(); }

// the kernel history: one function's diffs in pass order, old (left) and new (right) side by side
const kernelHistory = JSON.parse(document.getElementById("history-data").textContent);
const SBS_COLS = '<colgroup><col class="lnc"><col><col class="lnc"><col></colgroup>';
function sideBySide(text) {
  const rows = [];
  let o = 0, n = 0, dels = [], adds = [];
  const cell = (x, cls) => x ? `<td class="ln">${x[0]}</td><td class="${cls}">${highlight(x[1])}</td>`
                             : `<td class="ln"></td><td class="empty"></td>`;
  const flush = () => {
    for (let k = 0; k < Math.max(dels.length, adds.length); k++)
      rows.push(`<tr>${cell(dels[k], "old d-del")}${cell(adds[k], "new d-add")}</tr>`);
    dels = []; adds = [];
  };
  for (const line of text.split("\n")) {
    const m = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(line);
    if (m) { flush(); o = +m[1]; n = +m[2]; rows.push(`<tr class="hunk"><td colspan="4">${esc(line)}</td></tr>`); }
    else if (line.startsWith("-")) { if (adds.length) flush(); dels.push([o++, line.slice(1)]); }
    else if (line.startsWith("+")) adds.push([n++, line.slice(1)]);
    else if (line.startsWith(" ")) {
      flush();
      rows.push(`<tr>${cell([o++, line.slice(1)], "ctx")}${cell([n++, line.slice(1)], "ctx")}</tr>`);
    }
    else if (line) { flush(); rows.push(`<tr class="hunk"><td colspan="4">${esc(line)}</td></tr>`); }
  }
  flush();
  return `<table class="sbs">${SBS_COLS}${rows.join("")}</table>`;
}
function renderHistory(func) {
  const steps = func ? kernelHistory[func] : null;
  $("func").value = steps ? func : "";
  $("func-steps").innerHTML = !steps ? "" : steps.map((s) => {
    const num = String(s.index).padStart(3, "0");
    return `<div class="step" data-step="${s.index}"><h3>${num} ${esc(s.phase)} / ` +
      `<span class="${s.depth ? "nested" : ""}">${esc(s.name)}</span>: ${esc(s.event)} ` +
      `(+${s.added} &minus;${s.removed})</h3>${sideBySide(s.diff)}</div>`;
  }).join("");
  $("func-count").textContent = steps ? ` ${steps.length} of ${index.passes.length} passes changed ${func}` :
    func ? ` no pass changed a function ${func}` : ` ${Object.keys(kernelHistory).length} functions changed`;
}

const phases = [...new Set(index.passes.map((p) => p.phase))];
$("phase").innerHTML += phases.map((p) => `<option value="${esc(p)}">${esc(p)}</option>`).join("");
$("phase").addEventListener("change", (e) => update({phase: e.target.value}));
$("changed").addEventListener("change", (e) => update({changed: e.target.checked}));
$("q").addEventListener("input", (e) => update({q: e.target.value}));
document.querySelector("#passes tbody").addEventListener("click", (e) => {
  const a = e.target.closest("a[data-show]");
  if (a) { e.preventDefault(); update({show: a.dataset.show}); $("viewer").scrollIntoView(); }
});
window.addEventListener("hashchange", render);
$("func").innerHTML += Object.keys(kernelHistory).map((f) => `<option value="${esc(f)}">${esc(f)}</option>`).join("");
$("func").addEventListener("change", (e) => update({func: e.target.value}));

const changed = index.passes.filter((p) => p.changed).length;
const check = index.check ? ` &middot; golden check <b class="${index.check.passed ? "changed" : "failed"}">` +
  `${index.check.passed ? "PASSED" : "FAILED"}</b>` +
  (index.check.repro ? ` (${link(index.check.repro, "reproducer")})` : "") : "";
$("summary").innerHTML = `preset ${esc(index.preset)} &middot; frontend ${esc(index.frontend)} &middot; ` +
  `${index.passes.length} passes, ${changed} changed &middot; status ${esc(index.status)}` +
  (index.build_seconds !== undefined ? ` &middot; build ${index.build_seconds.toFixed(2)} s` : "") + check +
  (index.error ? `<br><span class="failed">${esc(index.error)}</span>` : "");
const profile = JSON.parse(document.getElementById("profile-data").textContent);
if (profile) {
  const num = (v, d) => v === null || v === undefined ? "" : v.toFixed(d);
  const pct = (v) => v === null || v === undefined ? "" : (100 * v).toFixed(1) + "%";
  const bar = (v) => `<span class="bar" style="width:${Math.max(0, Math.min(100, 100 * v)).toFixed(1)}px"></span>`;
  const rows = profile.kernels.map((k) => `<tr class="kernel"><td>${esc(k.name)}</td>` +
    `<td class="num">${num(k.ms, 4)}</td><td class="num share">${pct(k.share)} ${bar(k.share)}</td>` +
    `<td class="num">${num(k.gbs, 1)}</td><td class="num">${num(k.gflops, 1)}</td>` +
    `<td class="num">${pct(k.roofline_fraction)}</td></tr>`);
  rows.push(`<tr class="other"><td>VM/other</td><td class="num">${num(profile.other_ms, 4)}</td>` +
    `<td class="num share">${pct(profile.other_share)}</td><td></td><td></td><td></td></tr>`);
  rows.push(`<tr class="total"><th>main (measured)</th><td class="num">${num(profile.main_ms, 4)}</td>` +
    `<td class="num share">100.0%</td><td></td><td></td><td></td></tr>`);
  document.querySelector("#kernels tbody").innerHTML = rows.join("");
  $("profile-summary").textContent = `${profile.kernels.length} kernel calls, ` +
    `${profile.kernels_ms.toFixed(4)} ms = ${(100 * profile.coverage).toFixed(1)}% of the measured main ` +
    `${profile.main_ms.toFixed(4)} ms; medians of ${profile.rounds} rounds` +
    (profile.peak_gflops ? `; peak ${profile.peak_gflops.toFixed(1)} GFLOP/s, bandwidth ` +
      `${profile.bandwidth_gbs.toFixed(1)} GB/s (measured)` : "");
  $("profile").hidden = false;
}
const loc = index.localize;
if (loc) {  // the first differing call highlighted, each test call linked to its kernel's history
  const callLink = (r) => r.test && kernelHistory[r.kernel] ?
    `<a href="#func=${encodeURIComponent(r.kernel)}">${esc(r.test)}</a>` : esc(r.test);
  $("calls").querySelector("tbody").innerHTML = loc.rows.map((r) =>
    `<tr class="${r.result === "FIRST" ? "call-first" : r.result === "DIFF" ? "call-diff" : ""}">` +
    `<td>${callLink(r)}</td><td>${esc(r.reference)}</td><td class="num">${r.out}</td>` +
    `<td>${esc(r.shape.join("x"))}</td><td class="num">${r.max_abs_diff.toPrecision(3)}</td>` +
    `<td class="num">${r.mismatches}/${r.numel}</td><td>${r.inputs_matched ? "same" : "differ"}</td>` +
    `<td>${esc(r.result)}</td></tr>`).join("");
  const none = (calls) => calls.length ? calls.map(esc).join(", ") : "none";
  $("localize-summary").innerHTML = `test [${esc(loc.test)}] against reference [${esc(loc.reference)}]: ` +
    `<b class="${loc.passed ? "changed" : "failed"}">${loc.passed ? "every call within tolerance" : "differs"}</b>` +
    ` &middot; no partner: test ${none(loc.unpartnered_test)}; reference ${none(loc.unpartnered_reference)}` +
    (loc.kernel_repro ? ` &middot; ${link(loc.kernel_repro + "/repro.py", "kernel reproducer")}` : "");
  $("localize-first").textContent = loc.first;
  $("localize").hidden = false;
}
const files = [["input module", index.input], ...index.codegen.map((f) => ["generated code", f]),
               ...index.attachments.map((f) => ["attachment", f]), ["index (JSON)", "index.json"],
               ...(index.profile ? [["kernel profile (JSON)", index.profile]] : [])];
$("files").innerHTML = files.map(([what, f]) => `<li>${esc(what)}: ${link(f, f)}</li>`).join("");
render();
</script>
</body></html>
"""
