"""The one side-by-side diff renderer of both pages (index.html's kernel history, dumps compare --html)."""

import re

from mtp_tvm.instrument.side_by_side import side_by_side, side_by_side_html, side_by_side_style


def test_side_by_side_pairs_removed_and_added_lines():
    rows = side_by_side(["--- A f", "+++ B f", "@@ -3,3 +3,3 @@", " a", "-b", "+B", "+C", " d"])
    assert rows[0] == ("file", "A f  |  B f") and rows[1][0] == "hunk"
    assert rows[2:] == [(3, "a", "", 3, "a", ""), (4, "b", "del", 4, "B", "add"), (None, "", None, 5, "C", "add"),
                        (5, "d", "", 6, "d", "")]


def test_a_note_spans_the_row_and_empty_lines_are_skipped():
    """A kernel history's removed function ends in a note, and an embedded diff cut short in another."""
    rows = side_by_side(["@@ -4,2 +3,0 @@", "-def f():", "", "... the whole function, 9 lines, removed"])
    assert rows == [("hunk", "@@ -4,2 +3,0 @@"), (4, "def f():", "del", None, "", None),
                    ("file", "... the whole function, 9 lines, removed")]


def test_the_table_holds_escaped_text_old_beside_new():
    table = side_by_side_html(["@@ -1,1 +1,1 @@", "-<b>&", "+</table>"])
    assert table.startswith('<table class="sbs"><colgroup>') and table.endswith("</table>")
    assert re.search(r'<tr><td class="ln">1</td><td class="old d-del">&lt;b&gt;&amp;</td><td class="ln">1</td>'
                     r'<td class="new d-add">&lt;/table&gt;</td></tr>', table)
    assert table.count("<table") == 1 and "table.sbs" in side_by_side_style()
