"""Reports over pass records: the terminal tables (timing top-N, a run's passes) and a run's ``index.html``.

``index.html`` is one self-contained file (no network, no external script), made from the templates
``templates/run_index.html`` and ``run_index.js`` (package data): the index and the diffs are embedded as JSON,
the script renders the pass table, filters it by phase / changed / name (the filter state lives in the URL
fragment, e.g. ``index.html#phase=fuse&changed=1``, so a view can be linked), links every dump and diff, and
shows a pass's diff syntax-highlighted below the table. Its kernel history (``index.html#func=NAME``) follows
one function through every pass that changed it, old and new side by side (``kernel_history``; each step's
rows computed here by ``side_by_side``, the script only makes the cells; the same as ``mtp-tvm dumps show RUN
--func NAME --history``). The page is rendered by ``support.html_page``: its data never becomes markup. A run
profiled with ``--profile`` (``profile.json`` in the folder) also gets a table of ``main``'s kernels: time, share
of ``main``, GB/s, GFLOP/s, roofline fraction. A run that ``localize`` compared (``index.json``'s ``localize``)
gets the per-call table, the first differing call highlighted and linked to its kernel history.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..instrument.kernel_history import histories
from ..instrument.pass_tree import nested_summary
from ..instrument.side_by_side import SideBySideData, side_by_side_style
from ..support import atomic_file
from ..support.html_page import Markup, escape, json_script, render, template
from ..support.text_table import text_table

HTML_FILE = "index.html"
PROFILE_FILE = "profile.json"  # --profile's kernel times (tools/measure/profile.py), the page's kernel table
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


def pass_table(index: dict, changed: bool = False, phase: str | None = None, nested: bool = False) -> str:
    """A run's passes, one line each: number, phase, name, state; only those that changed the IR with
    ``changed``, only one phase with ``phase``. The passes run inside another are folded into its row (their
    count) unless ``nested``, then indented under it."""
    rows = [("#", "phase", "pass", "state", "+", "-", "ms", "file")]
    inside = nested_summary(index["passes"])
    for p in index["passes"]:
        if (changed and not p["changed"]) or (phase and p["phase"] != phase) or (p["depth"] and not nested):
            continue
        name = p["name"] + (f" [{inside[p['index']]}]" if p["index"] in inside and not nested else "")
        state = (f"skipped ({p['skipped']})" if p["skipped"] else "FAILED" if p["error"]
                 else "changed" if p["changed"] else "unchanged")
        rows.append((f"{p['index']:03d}", p["phase"], "  " * p["depth"] + name, state,
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


def _embedded_histories(run: Path, index: dict) -> dict:
    """Each function's history (``kernel_history.histories``), each step's diff cut like the pass diffs and given
    as side-by-side rows (``rows``, in place of the diff; ``side_by_side.SideBySideData``, whose shared texts
    and legend come along under ``tables``): the page's script makes the cells."""
    tables = SideBySideData()
    functions = histories(run, index)
    for steps in functions.values():
        for step in steps:
            step["rows"] = tables.add(history_step_lines(step.pop("diff")))
    return {"functions": functions, "tables": tables.as_dict()}


def history_step_lines(diff: str) -> list[str]:
    """A history step's diff as the page shows it: cut like the pass diffs, the rest left to the CLI."""
    lines = diff.splitlines()
    if len(lines) > DIFF_LINES_EMBEDDED:
        lines = lines[:DIFF_LINES_EMBEDDED] + [
            f"... {len(lines) - DIFF_LINES_EMBEDDED} more lines: mtp-tvm dumps show RUN --func NAME --history"]
    return lines


def history_script(run: Path, index: dict) -> Markup:
    """The page's embedded kernel history, made from the run's pass files, which never change after the build:
    the recorder makes it while the assembly is still being generated and passes it to ``write_html``; a
    re-render (``run_folder.update_index`` after the golden check) makes it anew, so a page written by an older
    version gets the current history too."""
    return json_script("history-data", _embedded_histories(run, index))


def write_html(run: Path, index: dict, history: Markup | None = None) -> Path:
    """Render ``index.html`` for a run folder from its index (atomically); ``history``: ``history_script``'s,
    when the caller made it already."""
    title = f"{index['case']} on {index['target']['kind']}"
    profile = json.loads((run / PROFILE_FILE).read_text()) if (run / PROFILE_FILE).is_file() else None
    page = render(template(__package__, "run_index.html"), title=escape(title),
                  data=Markup(json_script("index-data", index) + json_script("diff-data", _embedded_diffs(run, index))
                              + json_script("profile-data", profile)),
                  history=history if history is not None else history_script(run, index),
                  side_by_side_style=side_by_side_style(), script=template(__package__, "run_index.js"))
    path = run / HTML_FILE
    atomic_file.write_text(path, page)
    return path
