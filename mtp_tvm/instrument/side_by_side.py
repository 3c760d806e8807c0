"""A unified diff side by side, old (left) and new (right), as an HTML table: the one renderer of both pages
that show one (a run's kernel history in ``index.html``, ``dumps compare --html``), with its style
(``templates/side_by_side.css``).

Removed and added runs of lines are paired row by row, so a changed line sits beside its new version; a hunk
header, a ``---``/``+++`` pair and any other line (a note such as "... N more lines") span the row. The cells
hold escaped text; a page may highlight the code cells (``td.old``, ``td.new``, ``td.ctx``) afterwards.
"""

from __future__ import annotations

import re

from ..support.html_page import Markup, escape, template

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_CELL_CLASS = {"del": "old d-del", "add": "new d-add", "": "ctx", None: "empty"}


def side_by_side(diff: list[str] | tuple[str, ...]) -> list[tuple]:
    """A unified diff as rows ``(old no, old text, old kind, new no, new text, new kind)``, kind ``""`` (context),
    ``"del"``, ``"add"`` or ``None`` (an empty cell); a row ``("hunk", header)`` at each hunk, ``("file", text)``
    for a file header pair or another line; empty lines are skipped."""
    rows: list[tuple] = []
    old = new = 0
    dels: list[tuple[int, str]] = []
    adds: list[tuple[int, str]] = []

    def flush():
        for k in range(max(len(dels), len(adds))):
            d = dels[k] if k < len(dels) else (None, "")
            a = adds[k] if k < len(adds) else (None, "")
            rows.append((d[0], d[1], "del" if k < len(dels) else None, a[0], a[1], "add" if k < len(adds) else None))
        dels.clear()
        adds.clear()

    lines = list(diff)
    skip = False
    for i, ln in enumerate(lines):
        m = _HUNK.match(ln)
        if skip or not ln:
            skip = False
        elif m:
            flush()
            old, new = int(m.group(1)), int(m.group(2))
            rows.append(("hunk", ln))
        elif ln.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            flush()
            rows.append(("file", f"{ln[4:]}  |  {lines[i + 1][4:]}"))
            skip = True
        elif ln.startswith("-"):
            if adds:
                flush()
            dels.append((old, ln[1:]))
            old += 1
        elif ln.startswith("+"):
            adds.append((new, ln[1:]))
            new += 1
        elif ln.startswith(" "):
            flush()
            rows.append((old, ln[1:], "", new, ln[1:], ""))
            old += 1
            new += 1
        else:
            flush()
            rows.append(("file", ln))
    flush()
    return rows


def side_by_side_html(diff: list[str] | tuple[str, ...]) -> Markup:
    """``diff`` as ``<table class="sbs">`` (see the module docstring)."""
    out = ['<table class="sbs"><colgroup><col class="lnc"><col><col class="lnc"><col></colgroup>']
    for r in side_by_side(diff):
        if r[0] in ("hunk", "file"):
            out.append(f'<tr class="{r[0]}"><td colspan="4">{escape(r[1])}</td></tr>')
            continue
        cells = []
        for no, text, kind in ((r[0], r[1], r[2]), (r[3], r[4], r[5])):
            cells.append(f'<td class="ln">{"" if no is None else no}</td>'
                         f'<td class="{_CELL_CLASS[kind]}">{escape(text)}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return Markup("\n".join(out))


def side_by_side_style() -> Markup:
    """The tables' CSS, for a page's ``<style>``."""
    return template(__package__, "side_by_side.css")
