"""The hand rules as MetaSchedule design spaces: tuning starts from the hand schedules and explores around them.

A kernel's hand space is a ``ScheduleFn`` returning one design space per *structural* choice of its rule's knobs
(``structural_variants``: the column strip, the parallel axis, weight packing, FMA or dot-product path and the
dot-product tile), the shipped knobs first. Inside each, the knobs a split consumes (register rows, K chunk,
vector width) are sampled decisions (the rule's ``Sampler``): MetaSchedule's evolutionary search re-samples them
whenever it replays a design space, and its cost model ranks the results, so it explores the tile without a
rule re-running. With fixed decisions a rule is deterministic: ``--schedule default`` and its trace do not
change (the sampler of a plain build is ``cpu_rules.fixed``).

Every hand-space candidate carries ``SPACE_ANNOTATION`` on its first block (``is_hand``), so the tuner can count
what each space produced; the structural points (``hand_points``), the shipped knobs first, are measured and
committed before the search, so a search never ends slower than the hand schedule it started from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import tvm
from tvm import s_tir, tirx

from ..passes.target import CpuIsa
from .cpu_rules import fixed
from .files import KernelSchedule
from .knobs import CpuGemm, CpuRows
from .rules import RULES
from .steps import fresh_copy
from .tune_space import TuneSpace

SPACE_ANNOTATION = "mtp.space"  # a block annotation (``_mark``): the design space a candidate came from
COLUMN_VECTORS = (1, 2, 4)  # the column strips (in vectors) a GEMM space tries
DOT_TILES = ((8, 2), (4, 2), (8, 1), (4, 1), (2, 4), (4, 3), (2, 2))  # dot-product tiles (rows, vectors) it tries
ROW_KNOBS = ("register_rows",)  # knobs splitting the token-row loop


def structural_variants(knobs, isa: CpuIsa | None) -> list:
    """The knob sets whose schedules differ in structure, not just in a split factor; ``knobs`` first."""
    if isinstance(knobs, CpuGemm) and isa is not None:
        fma = [dataclasses.replace(knobs, dot_products=False, register_rows=None, column_vectors=c, parallel=p)
               for c in COLUMN_VECTORS for p in ("columns", "tokens")]
        unpacked = dataclasses.replace(knobs, dot_products=False, pack_weight=False)
        has_dots = knobs.dot_products and knobs.pack_weight and (
            isa.bf16_dot or isa.int8_dot is not None or (isa.fma and isa.vector_bits in (256, 512)))
        dots = [dataclasses.replace(knobs, dot_rows=r, dot_vectors=c) for r, c in DOT_TILES] if has_dots else []
        variants = [knobs, *dots, *fma, unpacked]
    elif isinstance(knobs, CpuRows):
        variants = [knobs, dataclasses.replace(knobs, parallel="none" if knobs.parallel == "rows" else "rows")]
    else:
        variants = [knobs]  # the TP LM head (bitwise contract) and GPU rules: their hand schedule as is
    return [v for i, v in enumerate(variants) if v not in variants[:i]]  # drop repeats, keep the order


def _mark(sch: s_tir.Schedule) -> None:
    """Mark a scheduled candidate as the hand space's: its *last* step, on a block under the root. (Edited first,
    the root block makes TVM 0.27's ``ScheduleState`` edit the rest of the trace into the module it started from:
    MetaSchedule replays every candidate on one module per thread, so the next replay found the loops the last
    one split, "old_outputs.size() == new_outputs.size()", on every kernel with root-level buffers.)"""
    sch.annotate(sch.get_child_blocks(sch.get_sblock("root"))[0], SPACE_ANNOTATION, TuneSpace.HAND.value)


def is_hand(sch: s_tir.Schedule) -> bool:
    """Whether a candidate came from a hand space (its trace marks it)."""
    return any(inst.kind.name == "Annotate" and inst.attrs[0] == SPACE_ANNOTATION for inst in sch.trace.insts)


def _sampler(sch: s_tir.Schedule):
    """A ``Sampler``: the row loop (static in the tuning workload, symbolic in the build it must replay on) gets a
    categorical draw over the choices; a loop of static extent otherwise a perfect tile, its inner factor up to
    the largest choice (MetaSchedule's tile-size mutator then evolves it); one choice is a constant."""

    def sample(knob: str, loop, choices: list[int], value: int) -> list:
        if knob not in ROW_KNOBS and isinstance(sch.get(loop).extent, tirx.IntImm) and max(choices) > 1:
            return sch.sample_perfect_tile(loop, n=2, max_innermost_factor=max(choices))
        if len(choices) < 2:
            return [None, value]
        return [None, sch.sample_categorical(choices, [1 / len(choices)] * len(choices))]

    return sample


def _apply(sch: s_tir.Schedule, ks: KernelSchedule, knobs, isa: CpuIsa | None, sampled: bool) -> None:
    rule = RULES[ks.rule]
    if rule.samples:
        rule.apply(sch, knobs, isa, sample=_sampler(sch) if sampled else fixed)
    else:
        rule.apply(sch, knobs, isa)


def _scheduled(mod: tvm.IRModule, ks: KernelSchedule, knobs, isa: CpuIsa | None, sampled: bool) -> s_tir.Schedule:
    """``knobs`` applied by the kernel's rule to a copy of ``mod`` (not a copy of a schedule: copies share nodes
    edited in place), marked as a hand-space candidate."""
    sch = s_tir.Schedule(fresh_copy(mod))
    _apply(sch, ks, knobs, isa, sampled)
    _mark(sch)
    return sch


def _variants(mod: tvm.IRModule, ks: KernelSchedule, isa: CpuIsa | None, sampled: bool) -> list[s_tir.Schedule]:
    """Every structural variant of the kernel's shipped knobs scheduled on a copy of ``mod``, shipped first. A
    variant the kernel cannot take (no register tile divides its columns, a dot-product tile on a block without
    one, say) is left out, and so is one that schedules the kernel as an earlier one did; the shipped knobs never
    are."""
    shipped = ks.knobs_for(isa.name if isa else None)
    schedules, seen = [], set()
    for knobs in structural_variants(shipped, isa):
        try:
            sch = _scheduled(mod, ks, knobs, isa, sampled)
        except (RuntimeError, ValueError, TypeError):  # TVM's errors (ScheduleError is a RuntimeError)
            if knobs is shipped:
                raise
            continue
        steps = str(sch.trace)
        if steps not in seen:  # (a dot tile the shipped knobs pick anyway)
            seen.add(steps)
            schedules.append(sch)
    return schedules


def hand_points(mod: tvm.IRModule, ks: KernelSchedule, isa: CpuIsa | None) -> list[s_tir.Schedule]:
    """The hand space's structural points on a tuning workload (``mod``'s ``main``), each at its knobs' own values,
    the shipped knobs first: the tuner measures them before the search, so every structure is tried once (the
    evolutionary search samples design spaces blindly, and one without sampled decisions, a dot-product tile,
    is a single candidate among hundreds)."""
    return _variants(mod, ks, isa, sampled=False)


def default_schedule(mod: tvm.IRModule, ks: KernelSchedule, isa: CpuIsa | None) -> s_tir.Schedule:
    """The shipped knobs on a tuning workload: the first point of the hand space."""
    return _scheduled(mod, ks, ks.knobs_for(isa.name if isa else None), isa, sampled=False)


def hand_space(ks: KernelSchedule, isa: CpuIsa | None) -> Callable[[s_tir.Schedule], list[s_tir.Schedule]]:
    """The ``ScheduleFn`` body of one kernel's hand space (see the module docstring): its structural variants
    with their split factors sampled."""
    return lambda sch: _variants(sch.mod, ks, isa, sampled=True)
