"""The ``dumps compare`` report as one comparison-contained page (``--html``): the aligned table with its verdicts
coloured and the divergence marked, every row linking to the A-vs-B diff after that pass and to each run's dump
file, the diff at the divergence side by side, and the generated code; and ``compare_command``, the command's
text and page."""

from __future__ import annotations

import os
from pathlib import Path

from ...instrument.ir_text import DIFFERENT, IDENTICAL, NAMES, REORDERED
from ...instrument.side_by_side import side_by_side_html, side_by_side_style
from ...support import atomic_file
from ...support.errors import UsageError
from ...support.html_page import Markup, escape, render, template
from .compare import UNKNOWN, RunComparison, compare_runs, describe_run, function_diff


def comparison_page(comparison: RunComparison, at: Path | None = None) -> str:
    """The comparison as one comparison-contained page: the same table (verdicts coloured, the divergence marked),
    every row linking to the A-vs-B diff after that pass (one per distinct pair of modules) and to each run's
    dump file (relative to ``at``, the page's folder), the diff at the divergence side by side, and the
    generated code."""
    esc = escape
    links, diffs = _row_links(comparison, at)
    both, only_a, only_b = comparison.counts()
    head = [f"<tr><th>A</th><td>{esc(str(comparison.a))}</td><td>{esc(describe_run(comparison.a_index))}</td></tr>",
            f"<tr><th>B</th><td>{esc(str(comparison.b))}</td><td>{esc(describe_run(comparison.b_index))}</td></tr>"]
    settings = "".join(f"<li>{esc(k)}: {esc(a)} / {esc(b)}</li>" for k, a, b in comparison.settings())
    rows, nested, shown = [], comparison.nested(), set(comparison.visible())
    for k, p in enumerate(comparison.pairs):
        cls = {IDENTICAL: "same", NAMES: "names", REORDERED: "names", DIFFERENT: "diff"}.get(p.verdict, "unknown")
        cls += "" if k in shown else " nested-pass"  # folded: shown by the page's "nested passes" box
        mark = ' id="divergence"' if k == comparison.divergence else ""
        inside = f" [+{nested[k]} nested]" if k in nested else ""
        rows.append(f'<tr class="pair {cls}"{mark}><td class="num">{"" if p.a is None else f"{p.a:03d}"}</td>'
                    f'<td class="num">{"" if p.b is None else f"{p.b:03d}"}</td><td>{esc(p.phase)}</td>'
                    f'<td style="padding-left:{0.5 + 1.2 * p.depth:.1f}em">{esc(p.name)}{inside}</td>'
                    f"<td>{esc(p.a_state)}</td><td>{esc(p.b_state)}</td><td>{esc(p.verdict)}</td>"
                    f"<td>{esc(p.summary())}</td><td>{links[k]}</td></tr>")
    diff = ""
    if comparison.divergence is not None and comparison.diff:
        p = comparison.pairs[comparison.divergence]
        diff = (f"<h2 id='diff'>Diff at {esc(p.label)}</h2><p>A: {esc(p.a_file or '-')} (left), "
                f"B: {esc(p.b_file or '-')} (right)</p>" + side_by_side_html(comparison.diff))
    code = []
    for c in comparison.code:
        code.append(f"<tr><td>{esc(c.name)}</td><td class='num'>{'-' if c.a_bytes is None else c.a_bytes}</td>"
                    f"<td class='num'>{'-' if c.b_bytes is None else c.b_bytes}</td><td>{esc(c.verdict)}</td></tr>")
    kernels = "".join(f"<pre>{esc(c.table())}</pre>" for c in comparison.code if c.kernels and c.verdict != IDENTICAL)
    return render(template(__package__, "compare.html"), side_by_side_style=side_by_side_style(),
                  title=esc(f"{comparison.a.name} vs {comparison.b.name}"), head=Markup("".join(head)),
                  settings=Markup(f"<ul>{settings}</ul>" if settings else "<p>same settings</p>"),
                  counts=esc(f"{both} aligned, {only_a} only in A, {only_b} only in B"),
                  verdict=Markup(esc(comparison.verdict()) + (
                      ' (<a href="#divergence">row</a>, <a href="#diff">diff</a>)'
                      if comparison.divergence is not None else "")),
                  rows=Markup("\n".join(rows)), diff=Markup(diff + diffs), code=Markup("".join(code)),
                  kernels=Markup(kernels))

def _row_links(comparison: RunComparison, at: Path | None) -> tuple[list[str], str]:
    """Per row the links cell (A-vs-B diff, A's file, B's file) and the diff sections they point to: one per
    distinct pair of files that differ, so a run of rows where neither module changed shares one."""
    esc, sections, anchors, links = escape, [], {}, []
    for k, p in enumerate(comparison.pairs):
        cells = []
        if p.verdict not in (IDENTICAL, UNKNOWN):
            key = (p.a_file, p.b_file)
            if key not in anchors:
                anchors[key] = f"pair-{k}"
                fa, fb = comparison.functions(*key)
                diff = side_by_side_html(tuple(function_diff(fa, fb, p)))
                sections.append(f"<details id='{anchors[key]}'><summary>A vs B after {esc(p.label)} "
                                f"({esc(p.verdict)})</summary>{diff}"
                                "</details>")
            cells.append(f"<a href='#{anchors[key]}'>A vs B</a>")
        for side, run, name in (("A", comparison.a, p.a_file), ("B", comparison.b, p.b_file)):
            if name:
                target = run / name if at is None else Path(os.path.relpath(run / name, at))
                cells.append(f"<a href='{esc(target.as_posix())}'>{side}</a>")
        links.append(" ".join(cells))
    return links, ("<h2>Every pass: A vs B</h2>" + "\n".join(sections)) if sections else ""


def compare_command(run_a: Path, run_b: Path, html_out: str | None = None) -> str:
    """``mtp-tvm dumps compare``: the report's text, and with ``html_out`` the page written atomically (a
    failed write leaves no file; it is a one-line ``UsageError``)."""
    comparison = compare_runs(run_a, run_b)
    text = comparison.text()
    if html_out is not None:
        try:
            atomic_file.write_text(Path(html_out), comparison_page(comparison, Path(html_out).resolve().parent))
        except OSError as e:
            raise UsageError(f"cannot write --html {html_out}: {e.strerror or e}") from None
        text += f"html: {html_out}\n"
    return text
