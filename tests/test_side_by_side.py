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


def test_tables_as_data_share_each_text_and_hold_the_rows_of_the_renderer():
    """A page's script makes the cells from these (index.html's kernel history): every text stored once."""
    from mtp_tvm.instrument.side_by_side import CELL_CLASSES, ROW_CLASSES, SideBySideData

    tables = SideBySideData()
    first = tables.add(["@@ -3,2 +3,2 @@", " a", "-b", "+B"])
    second = tables.add(["@@ -7,1 +7,2 @@", " a", "+C"])
    data = tables.as_dict()
    texts = data["texts"]
    assert sorted(texts) == sorted({"@@ -3,2 +3,2 @@", "@@ -7,1 +7,2 @@", "a", "b", "B", "C", ""})
    assert data["cell_classes"] == CELL_CLASSES and data["row_classes"] == ROW_CLASSES

    def shown(rows):  # the rows with their indices resolved: side_by_side's, classes for kinds
        return [(ROW_CLASSES[r[0]], texts[r[1]]) if len(r) == 2 else
                (r[0], texts[r[2]], CELL_CLASSES[r[1]], r[3], texts[r[5]], CELL_CLASSES[r[4]]) for r in rows]

    assert shown(first) == [("hunk", "@@ -3,2 +3,2 @@"), (3, "a", "ctx", 3, "a", "ctx"),
                            (4, "b", "old d-del", 4, "B", "new d-add")]
    assert shown(second) == [("hunk", "@@ -7,1 +7,2 @@"), (7, "a", "ctx", 7, "a", "ctx"),
                             (None, "", "empty", 8, "C", "new d-add")]
    assert first[1][2] == second[1][2]  # "a": one text for both tables
