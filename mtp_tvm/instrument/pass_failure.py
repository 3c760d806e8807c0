"""A build that fails names where: the pass (its stable name, ``phase/Name`` as in the dumps, and the pass inside it
that raised), the Relax function and the op call, or the TIR kernel, it was processing. TVM's own message names
none of them (``There should be a compute block``). ``RunningPasses`` watches every build for the passes running
and their input; ``where_it_failed`` narrows a failure by running the failing pass again on copies of its input
cut down to one kernel, one Relax function, one op call."""

from __future__ import annotations

import dataclasses

import tvm
from tvm import relax

from ..passes.pipeline import MTP_CONTAINER_PASSES, PHASE_MARKER_PREFIX, RELAX_PIPELINE

_CONTAINERS = {RELAX_PIPELINE, *MTP_CONTAINER_PASSES, "sequential"}


@dataclasses.dataclass(frozen=True)
class _Running:
    phase: str
    name: str
    mod: tvm.IRModule


@tvm.instrument.pass_instrument
class RunningPasses:
    """The passes running now, outermost first, each with its phase and input (a failing pass never reaches
    ``run_after_pass``: what is left after an error is the failing pass and the passes around it)."""

    def __init__(self):
        self.stack: list[_Running] = []
        self._phase = "-"

    def run_before_pass(self, mod, info):
        if info.name.startswith(PHASE_MARKER_PREFIX):
            self._phase = info.name.removeprefix(PHASE_MARKER_PREFIX)
        self.stack.append(_Running(self._phase, info.name, mod))

    def run_after_pass(self, _mod, _info):
        self.stack.pop()

    def failing(self) -> list[_Running]:
        """The passes that were running when the build failed, containers left out, outermost first."""
        return [r for r in self.stack if r.name not in _CONTAINERS and not r.name.startswith(PHASE_MARKER_PREFIX)]


def _fails(pass_, mod: tvm.IRModule) -> bool:
    try:
        pass_(mod)
    except Exception:  # noqa: BLE001 - any failure of the pass is what is searched for
        return True
    return False


def _only(mod: tvm.IRModule, keep) -> tvm.IRModule:
    return tvm.IRModule({gv: f for gv, f in mod.functions_items() if keep(gv, f)}, attrs=mod.attrs)


def _op_calls(func: relax.Function):
    """Each binding of ``func`` whose value calls a Relax operator (not a kernel): (its variable's name, call)."""
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name != "relax.call_tir":
                yield binding.var.name, value


def _one_call(mod: tvm.IRModule, call: relax.Call) -> tvm.IRModule:
    """A module whose ``main`` is ``call`` alone, its free variables as parameters, beside ``mod``'s kernels."""
    params = list(relax.analysis.free_vars(call))
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        bb.emit_func_output(bb.emit(call))
    out = bb.get()
    for gv, f in mod.functions_items():
        if not isinstance(f, relax.Function):
            out[gv] = f
    return out


def _narrow(pass_, mod: tvm.IRModule) -> str | None:
    """``on Relax function F, op relax.X (binding V)`` or ``on TIR kernel K``: the smallest part of ``mod`` on
    which ``pass_`` still fails; None when no part fails alone."""
    funcs = list(mod.functions_items())
    for gv, f in funcs:
        if isinstance(f, tvm.tirx.PrimFunc) and _fails(pass_, _only(mod, lambda g, _f, gv=gv: g.same_as(gv))):
            return f"on TIR kernel {gv.name_hint}"
    for gv, f in funcs:
        if not isinstance(f, relax.Function):
            continue
        alone = _only(mod, lambda g, other, gv=gv: g.same_as(gv) or not isinstance(other, relax.Function))
        if not _fails(pass_, alone):
            continue
        for var, call in _op_calls(f):
            try:
                if _fails(pass_, _one_call(mod, call)):
                    return f"on Relax function {gv.name_hint}, op {call.op.name} (binding {var})"
            except Exception:  # noqa: BLE001 - a call that cannot stand alone narrows nothing
                continue
        return f"on Relax function {gv.name_hint}"
    return None


def where_it_failed(running: list[_Running], passes: dict[str, tvm.transform.Pass]) -> str:
    """``in pass PHASE/NAME (inside ...)`` and what it was processing, narrowed where ``passes`` (name -> the
    pipeline's pass object) holds one of the running passes to rerun; empty when no pass was running."""
    if not running:
        return ""
    inner, outer = running[-1], running[0]
    where = f"in pass {outer.phase}/{outer.name}" + (f" (inside it, {inner.name})" if inner is not outer else "")
    rerun = next((r for r in reversed(running) if r.name in passes), None)
    if rerun is not None:
        with tvm.transform.PassContext(opt_level=3):
            part = _narrow(passes[rerun.name], rerun.mod)
        if part:
            where += " " + part
    return where
