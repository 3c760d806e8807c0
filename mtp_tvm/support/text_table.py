"""Fixed-width text tables for the terminal: every report (check, bench, dumps, build) lines up the same way."""

from __future__ import annotations


def text_table(rows: list[tuple], align_right=frozenset(), rule: bool = True) -> list[str]:
    """``rows`` (the first is the header) as lines of columns two spaces apart, trailing spaces cut; columns
    in ``align_right`` are right-aligned; ``rule`` puts a line of dashes under the header."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]

    def line(r: tuple) -> str:
        return "  ".join(str(c).rjust(w) if i in align_right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    lines = [line(r) for r in rows]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
