"""User passes that did nothing, said out loud: a plugin pass registered in a phase where its target does not
exist yet (a fused-kernel pass under ``fuse``, whose plugins run before FuseOps) changes nothing, and the build
still passes. ``IdlePassWatch`` is a cheap instrument on every build with user passes: it hashes the module
around those passes only and remembers what the module held when each ran, so the check can warn with the
phase and its contents (``describe``)."""

from __future__ import annotations

import dataclasses

import tvm
import tvm_ffi
from tvm import relax

from ..passes.pipeline import PHASE_HOLDS, PHASE_MARKER_PREFIX, relax_passes_by_name


@dataclasses.dataclass(frozen=True)
class ModuleContents:
    """What a module holds at one point of the build, counted: Relax operator calls not yet lowered to TIR,
    PrimFuncs, the fused ones (FuseTIR's), and the scheduled ones."""

    relax_ops: int
    prim_funcs: int
    fused: int
    scheduled: int

    @classmethod
    def of(cls, mod: tvm.IRModule) -> ModuleContents:
        ops, prims, fused, scheduled = 0, 0, 0, 0
        for gv, func in mod.functions_items():
            if isinstance(func, tvm.tirx.PrimFunc):
                attrs = func.attrs or {}
                prims += 1
                fused += gv.name_hint.startswith("fused_")
                scheduled += bool(attrs.get("tirx.is_scheduled", False))
            elif isinstance(func, relax.Function):
                ops += _operator_calls(func)
        return cls(ops, prims, fused, scheduled)

    def __str__(self) -> str:
        return (f"{self.relax_ops} Relax operator call{'s' * (self.relax_ops != 1)} not lowered to TIR, "
                f"{self.prim_funcs} PrimFunc{'s' * (self.prim_funcs != 1)} ({self.fused} fused, "
                f"{self.scheduled} scheduled)")


_NOT_OPERATORS = ("relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed", "relax.call_pure_packed")


def _operator_calls(func: relax.Function) -> int:
    count = [0]

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name not in _NOT_OPERATORS:
            count[0] += 1

    relax.analysis.post_order_visit(func.body, visit)
    return count[0]


@dataclasses.dataclass(frozen=True)
class IdlePass:
    """A user pass that changed nothing in any function, every time it ran in ``phase``."""

    name: str
    phase: str
    runs: int
    holds: ModuleContents  # the module entering its first run

    def describe(self, who: str) -> str:
        return (f"{who}: pass {self.name!r} changed nothing in any function (phase {self.phase!r}, "
                f"{self.runs} run{'s' * (self.runs != 1)}); at that point the module holds {self.holds}: "
                f"{PHASE_HOLDS[self.phase]}")


@tvm.instrument.pass_instrument
class IdlePassWatch:
    """Watches the passes named per phase (``{phase: names}``, the user's): whether any run changed the module."""

    def __init__(self, names_by_phase: dict[str, list[str]]):
        self.watched = {phase: frozenset(names) for phase, names in names_by_phase.items()}
        self.phase = "input"
        self._open: list[tuple[str, object] | None] = []
        self._seen: dict[tuple[str, str], list] = {}  # (phase, name) -> [runs, changed, contents at first run]

    def run_before_pass(self, mod, info):
        name = info.name
        if name in self.watched.get(self.phase, ()):
            self._open.append((name, tvm_ffi.structural_hash(mod)))
            self._seen.setdefault((self.phase, name), [0, False, ModuleContents.of(mod)])
        else:
            self._open.append(None)

    def run_after_pass(self, mod, info):
        opened = self._open.pop()
        if info.name.startswith(PHASE_MARKER_PREFIX):
            self.phase = info.name[len(PHASE_MARKER_PREFIX):]
        if opened is not None:
            seen = self._seen[(self.phase, opened[0])]
            seen[0] += 1
            seen[1] = seen[1] or tvm_ffi.structural_hash(mod) != opened[1]

    def idle(self) -> list[IdlePass]:
        """The watched passes that ran and never changed the module, in the order they first ran."""
        return [IdlePass(name, phase, runs, holds) for (phase, name), (runs, changed, holds) in self._seen.items()
                if runs and not changed]


def idle_disabled(disabled_inputs: dict[str, list], target) -> list[str]:
    """The ``--disable-pass`` names whose pass, run on every module it was skipped on, changes nothing: disabling
    it made no difference. Judged for the Relax phases' passes (the TIR pipeline's are TVM's, not ours to run)."""
    passes, out = relax_passes_by_name(target), []
    for name, mods in disabled_inputs.items():
        if name not in passes:
            continue
        with target, tvm.transform.PassContext(opt_level=3):
            changed = any(tvm_ffi.structural_hash(passes[name](m)) != tvm_ffi.structural_hash(m) for m in mods)
        if not changed:
            out.append(f"--disable-pass {name}: the pass changes nothing in any function where it was skipped "
                       f"({len(mods)} place{'s' * (len(mods) != 1)}): disabling it made no difference")
    return out
