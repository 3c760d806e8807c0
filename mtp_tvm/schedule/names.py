"""The names a schedule file gives (blocks, buffers), checked against the kernel it schedules before a rule runs.

Schedule files are data a user edits, and the kernels are code: a block renamed in ``ir/tir_kernels.py`` or
mistyped in a file would otherwise surface as a TVM error from deep inside a rule. The knob fields that name
something are marked in ``knobs.py`` (``BLOCKS``, ``BUFFERS``); ``missing_names`` lists those a kernel lacks.
"""

from __future__ import annotations

import dataclasses

from tvm import tirx

from ..passes.kernel_blocks import kernel_blocks


@dataclasses.dataclass(frozen=True)
class Names:
    blocks: frozenset[str]
    buffers: frozenset[str]


def knob_names(knobs) -> Names:
    """Every block and buffer name a knob dataclass (and the knob dataclasses in it) gives."""
    blocks, buffers = set(), set()

    def visit(obj) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            kind = f.metadata.get("names")
            if kind is not None:
                named = [value] if isinstance(value, str) else list(value)  # a dict names its keys
                (blocks if kind == "block" else buffers).update(named)
            for inner in value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else [value]:
                if dataclasses.is_dataclass(inner):
                    visit(inner)

    visit(knobs)
    return Names(frozenset(blocks), frozenset(buffers))


def kernel_names(func: tirx.PrimFunc) -> Names:
    """The blocks of a PrimFunc and the buffers they read, write, allocate or match."""
    blocks, buffers = set(), set()
    for block in kernel_blocks(func):
        blocks.add(block.name_hint)
        buffers.update(r.source.name for r in (*block.reads, *block.writes))
        buffers.update(b.name for b in block.alloc_buffers)
        buffers.update(m.buffer.name for m in block.match_buffers)
    return Names(frozenset(blocks), frozenset(buffers))


def missing_names(knobs, func: tirx.PrimFunc) -> str | None:
    """What the knobs name that ``func`` does not have, as one phrase, or None."""
    given, have = knob_names(knobs), kernel_names(func)
    for kind, want, there in (("block", given.blocks, have.blocks), ("buffer", given.buffers, have.buffers)):
        missing = sorted(want - there)
        if missing:
            return (f"no {kind} named {', '.join(map(repr, missing))} in the kernel "
                    f"(its {kind}s: {', '.join(sorted(there))})")
    return None
