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
          func: s.get("func"), nested: s.get("nested") === "1", open: (s.get("open") || "").split(",").filter(Boolean)};
}
function writeState(st) {
  const s = new URLSearchParams();
  if (st.phase) s.set("phase", st.phase);
  if (st.changed) s.set("changed", "1");
  if (st.q) s.set("q", st.q);
  if (st.show) s.set("show", st.show);
  if (st.func) s.set("func", st.func);
  if (st.nested) s.set("nested", "1");
  if (st.open.length) s.set("open", st.open.join(","));
  history.replaceState(null, "", "#" + s.toString());
}
// passes run inside another (FoldConstant's TIR pipeline per constant, FuseTIR's helpers) are folded into the
// row of the top-level pass that ran them (instrument/pass_tree.py): counted there, opened by a click
const topOf = {};
const nestedIn = {};
{
  let top = 0;
  for (const p of index.passes) {
    if (!p.depth) top = p.index;
    topOf[p.index] = top;
    if (p.depth) {
      const n = nestedIn[top] || (nestedIn[top] = {count: 0, changed: 0});
      n.count += 1; n.changed += p.changed ? 1 : 0;
    }
  }
}
const nestedTotal = index.passes.filter((p) => p.depth).length;
function matches(p, st) {
  if (p.depth && !st.nested && !st.open.includes(String(topOf[p.index]))) return false;
  if (st.phase && p.phase !== st.phase) return false;
  if (st.changed && !p.changed) return false;
  if (st.q) { try { return new RegExp(st.q).test(p.name); } catch (e) { return p.name.includes(st.q); } }
  return true;
}
function render() {
  const st = readState();
  renderHistory(st.func);
  $("phase").value = st.phase; $("changed").checked = st.changed; $("q").value = st.q; $("nested").checked = st.nested;
  const rows = index.passes.filter((p) => matches(p, st)).map((p) => {
    const [cls, text] = stateOf(p);
    const view = diffs[p.index] ? `<a href="#" data-show="${p.index}">view</a> &middot; ${link(p.diff, "file")}` : "";
    const n = nestedIn[p.index];
    const fold = n && !st.nested ? ` <a href="#" class="fold" data-open="${p.index}">` +
      `[${st.open.includes(String(p.index)) ? "&minus;" : "+"}${n.count} nested, ${n.changed} changed]</a>` : "";
    return `<tr class="pass" data-index="${p.index}"><td class="num">${String(p.index).padStart(3, "0")}</td>` +
      `<td>${esc(p.phase)}</td><td class="${p.depth ? "nested" : ""}">${esc(p.name)}${fold}</td>` +
      `<td class="${cls}">${esc(text)}</td><td class="num">${p.lines_added ?? ""}</td>` +
      `<td class="num">${p.lines_removed ?? ""}</td><td class="num">${p.self_ms.toFixed(2)}</td>` +
      `<td class="num">${p.ms.toFixed(2)}</td>` +
      `<td>${link(p.file, "py")}${p.input_file ? " " + link(p.input_file, "input") : ""}</td>` +
      `<td>${view}</td></tr>`;
  });
  document.querySelector("#passes tbody").innerHTML = rows.join("");
  $("count").textContent = `${rows.length} of ${index.passes.length - nestedTotal} passes` +
    (nestedTotal ? ` (+${nestedTotal} nested, folded)` : "");
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

// the kernel history: one function's diffs in pass order, old (left) and new (right) side by side. The rows
// are the one side-by-side renderer's (instrument/side_by_side.py: SideBySideData, its side_by_side_html's
// markup made here from them); each cell's text and class are indices into the shared texts and classes
const historyData = JSON.parse(document.getElementById("history-data").textContent);
const kernelHistory = historyData.functions;
function sideBySide(rows) {
  const {texts, cell_classes: cellClass, row_classes: rowClass} = historyData.tables;
  const cell = (no, cls, text) =>
    `<td class="ln">${no ?? ""}</td><td class="${cellClass[cls]}">${esc(texts[text])}</td>`;
  return '<table class="sbs"><colgroup><col class="lnc"><col><col class="lnc"><col></colgroup>\n' +
    rows.map((r) => r.length === 2 ? `<tr class="${rowClass[r[0]]}"><td colspan="4">${esc(texts[r[1]])}</td></tr>` :
      `<tr>${cell(r[0], r[1], r[2])}${cell(r[3], r[4], r[5])}</tr>`).join("\n") + "\n</table>";
}
function renderHistory(func) {
  const steps = func ? kernelHistory[func] : null;
  $("func").value = steps ? func : "";
  $("func-steps").innerHTML = !steps ? "" : steps.map((s) => {
    const num = String(s.index).padStart(3, "0");
    return `<div class="step" data-step="${s.index}"><h3>${num} ${esc(s.phase)} / ` +
      `<span class="${s.depth ? "nested" : ""}">${esc(s.name)}</span>: ${esc(s.event)} ` +
      `(+${s.added} &minus;${s.removed})</h3>${sideBySide(s.rows)}</div>`;
  }).join("");
  // the code cells get the same highlighting as the pass diffs
  for (const td of $("func-steps").querySelectorAll("td.old, td.new, td.ctx")) td.innerHTML = highlight(td.textContent);
  $("func-count").textContent = steps ? ` ${steps.length} of ${index.passes.length} passes changed ${func}` :
    func ? ` no pass changed a function ${func}` : ` ${Object.keys(kernelHistory).length} functions changed`;
}

const phases = [...new Set(index.passes.map((p) => p.phase))];
$("phase").innerHTML += phases.map((p) => `<option value="${esc(p)}">${esc(p)}</option>`).join("");
$("phase").addEventListener("change", (e) => update({phase: e.target.value}));
$("changed").addEventListener("change", (e) => update({changed: e.target.checked}));
$("nested").addEventListener("change", (e) => update({nested: e.target.checked}));
$("q").addEventListener("input", (e) => update({q: e.target.value}));
document.querySelector("#passes tbody").addEventListener("click", (e) => {
  const a = e.target.closest("a[data-show]");
  if (a) { e.preventDefault(); update({show: a.dataset.show}); $("viewer").scrollIntoView(); }
  const fold = e.target.closest("a[data-open]");
  if (fold) {
    e.preventDefault();
    const open = readState().open.filter((i) => i !== fold.dataset.open);
    update({open: open.length < readState().open.length ? open : [...open, fold.dataset.open]});
  }
});
window.addEventListener("hashchange", render);
$("func").innerHTML += Object.keys(kernelHistory).map((f) => `<option value="${esc(f)}">${esc(f)}</option>`).join("");
$("func").addEventListener("change", (e) => update({func: e.target.value}));

const changed = index.passes.filter((p) => p.changed).length;
const check = index.check ? ` &middot; golden check <b class="${index.check.passed ? "changed" : "failed"}">` +
  `${index.check.passed ? "PASSED" : "FAILED"}</b>` +
  (index.check.repro ? ` (${link(index.check.repro, "reproducer")})` : "") : "";
$("summary").innerHTML = `preset ${esc(index.preset)} &middot; frontend ${esc(index.frontend)} &middot; ` +
  `${index.passes.length - nestedTotal} passes` + (nestedTotal ? ` (+${nestedTotal} nested)` : "") +
  `, ${changed} changed &middot; status ${esc(index.status)}` +
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
