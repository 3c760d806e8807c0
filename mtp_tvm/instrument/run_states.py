"""Which file of a run folder holds the module before and after each pass, also where the pass has no file.

A run does not write a file for a skipped pass, nor for an unchanged one under ``--dump-only-changed``; their
module is their input's. The recorder names each pass's input file (``input_state`` in ``index.json``: the
chain branches where TVM splits host and device code, the host passes read the module before the device
``Filter``). Where it does not (a run made before it did, a pass that did not run), a pass's input is the
output of the last pass at its own depth that started before it (a sibling, finished before it started), or,
for the first pass inside another (FuseTIR's helpers), the input of that parent. Reading back a run (compare,
kernel history) needs exactly this, from ``index.json``.
"""

from __future__ import annotations


def _unchanged(p: dict) -> bool:
    return bool(p.get("skipped")) or not p.get("changed")


def state_files(index: dict) -> tuple[list[str | None], list[str | None]]:
    """``(before, after)``: for each entry of ``index["passes"]`` the file holding its input and its output
    module, None where the run cannot tell (a changed pass filtered out by ``--dump-filter``)."""
    passes = index["passes"]
    before: list[str | None] = []
    after: list[str | None] = []
    for i, p in enumerate(passes):
        j = i - 1
        while j >= 0 and passes[j].get("depth", 0) > p.get("depth", 0):
            j -= 1
        if p.get("input_state"):
            inp = p["input_state"]
        elif j < 0:
            inp = index.get("input")
        elif passes[j].get("depth", 0) == p.get("depth", 0):
            inp = after[j]
        else:  # the first pass run inside passes[j]
            inp = before[j]
        before.append(inp)
        after.append(p.get("file") or (inp if _unchanged(p) else None))
    return before, after


def finish_order(passes: list[dict]) -> list[int]:
    """Positions of ``passes`` in the order they finished: a pass that runs others after all of them."""
    order: list[int] = []
    stack: list[int] = []
    for i, p in enumerate(passes):
        while stack and passes[stack[-1]].get("depth", 0) >= p.get("depth", 0):
            order.append(stack.pop())
        stack.append(i)
    order.extend(reversed(stack))
    return order
