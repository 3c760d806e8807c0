"""A unified diff side by side, old (left) and new (right), as an HTML table: the one renderer of both pages
that show one (a run's kernel history in ``index.html``, ``dumps compare --html``), with its style
(``templates/side_by_side.css``).

Removed and added runs of lines are paired row by row, so a changed line sits beside its new version; a hunk
header, a ``---``/``+++`` pair and any other line (a note such as "... N more lines") span the row. The cells
hold escaped text; a page may highlight the code cells (``td.old``, ``td.new``, ``td.ctx``) afterwards.

A page that shows many tables (a run's kernel history: hundreds, mostly context lines repeated from step to
step) gets them as data instead (``SideBySideData``): the rows computed here, each cell's text an index into
texts shared by every table, its class an index into ``CELL_CLASSES``; the page's script only makes the cells,
the same markup as ``side_by_side_html`` (a browser test holds the two equal). Escaped markup inside JSON would
be ~2.3x the text it shows.
"""

from __future__ import annotations

import re

from ..support.html_page import Markup, escape, template

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_CELL_CLASS = {"del": "old d-del", "add": "new d-add", "": "ctx", None: "empty"}
CELL_CLASSES = tuple(_CELL_CLASS.values())  # a data row's cell class indices
ROW_CLASSES = ("hunk", "file")  # the rows that span the table
_CELL_INDEX = {kind: k for k, kind in enumerate(_CELL_CLASS)}


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
        if r[0] in ROW_CLASSES:
            out.append(f'<tr class="{r[0]}"><td colspan="4">{escape(r[1])}</td></tr>')
            continue
        cells = []
        for no, text, kind in ((r[0], r[1], r[2]), (r[3], r[4], r[5])):
            cells.append(f'<td class="ln">{"" if no is None else no}</td>'
                         f'<td class="{_CELL_CLASS[kind]}">{escape(text)}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return Markup("\n".join(out))


class SideBySideData:
    """Tables as data for a page's script: ``add`` a diff, get its rows, each ``[class, text]`` for a row that
    spans the table (indices into ``ROW_CLASSES`` and ``texts``) or ``[old no, class, text, new no, class,
    text]`` (no ``None`` for an empty cell; classes index ``CELL_CLASSES``); ``as_dict`` holds the legend and the
    texts every table shares, each stored once."""

    def __init__(self):
        self._texts: dict[str, int] = {}

    def _text(self, text: str) -> int:
        return self._texts.setdefault(text, len(self._texts))

    def add(self, diff: list[str] | tuple[str, ...]) -> list[list]:
        return [[ROW_CLASSES.index(r[0]), self._text(r[1])] if r[0] in ROW_CLASSES else
                [r[0], _CELL_INDEX[r[2]], self._text(r[1]), r[3], _CELL_INDEX[r[5]], self._text(r[4])]
                for r in side_by_side(diff)]

    def as_dict(self) -> dict:
        return {"cell_classes": CELL_CLASSES, "row_classes": ROW_CLASSES, "texts": list(self._texts)}


def side_by_side_style() -> Markup:
    """The tables' CSS, for a page's ``<style>``."""
    return template(__package__, "side_by_side.css")
