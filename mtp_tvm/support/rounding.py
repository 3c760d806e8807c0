"""Integer rounding up, written once: token rows to the row tile, column widths to whole vectors."""


def ceil_div(value: int, divisor: int) -> int:
    """``ceil(value / divisor)`` in integers (no float rounding for large values)."""
    return -(-value // divisor)


def ceil_to(value: int, multiple: int) -> int:
    """``value`` rounded up to a multiple of ``multiple``."""
    return ceil_div(value, multiple) * multiple
