from mtp_tvm.support.text_table import text_table


def test_columns_line_up_with_a_rule_under_the_header_and_no_trailing_spaces():
    lines = text_table([("name", "ms"), ("FuseTIR", 12.5), ("a", 3)], align_right={1})
    assert lines == ["name       ms", "-------  ----", "FuseTIR  12.5", "a           3"]


def test_without_a_rule_and_left_aligned_last_column_trimmed():
    assert text_table([("run", "status"), ("x", "")], rule=False) == ["run  status", "x"]
