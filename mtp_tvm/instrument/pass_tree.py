"""Passes run inside another, folded under the top-level pass that ran them: FoldConstant builds every folded
constant through a whole TIR pipeline (hundreds of passes for a block with RoPE frequencies), FuseTIR runs
helpers. A run's tables (``dumps show``, ``index.html``, ``dumps compare``) show one row per top-level pass and
count its nested ones apart; ``--nested`` (the page: a click) opens them."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Nested:
    """What ran inside one top-level pass: how many passes, how many of them changed their module."""

    count: int
    changed: int

    def __str__(self) -> str:
        return f"+{self.count} nested, {self.changed} changed"


def top_level_of(passes: list[dict]) -> list[int]:
    """For each entry of ``index["passes"]`` the number of the top-level pass it ran under (its own for a
    top-level pass); by ``depth``, so runs written before ``parent`` was recorded read the same."""
    out, top = [], 0
    for p in passes:
        if not p.get("depth"):
            top = p["index"]
        out.append(top)
    return out


def nested_summary(passes: list[dict]) -> dict[int, Nested]:
    """Top-level pass number -> what ran inside it (only passes that ran others)."""
    counts: dict[int, list[int]] = {}
    for p, top in zip(passes, top_level_of(passes)):
        if p.get("depth"):
            c = counts.setdefault(top, [0, 0])
            c[0] += 1
            c[1] += bool(p.get("changed"))
    return {top: Nested(*c) for top, c in counts.items()}


def count_line(passes: list[dict]) -> str:
    """``N passes`` or ``N passes (+M nested, folded)``."""
    nested = sum(1 for p in passes if p.get("depth"))
    return f"{len(passes) - nested} passes" + (f" (+{nested} nested, folded)" if nested else "")
