"""Integer rounding up, written once: token rows to the row tile, column widths to whole vectors. The same
expression serves Python ints and TIR expressions (a symbolic token count inside a TVMScript kernel), so a
kernel's padded extent reads as ``(n + 15) // 16 * 16`` whichever side computed it."""


def ceil_div(value, divisor):
    """``ceil(value / divisor)`` for a positive ``divisor``, in integers (no float rounding for large values)."""
    return (value + divisor - 1) // divisor


def ceil_to(value, multiple):
    """``value`` rounded up to a multiple of ``multiple`` (positive)."""
    return ceil_div(value, multiple) * multiple
