"""The compile flow as named phases, in the style of TVM's ``relax/pipeline.py``: each phase is a function
returning a pass list, and a no-op marker pass named ``mtp.phase.<name>`` opens it, so instruments (dumps,
timing, bisect) can attribute every pass to its phase by name.

Relax phases (ours): ``legalize`` -> ``fuse`` -> ``schedule`` -> ``lower-dataflow`` -> ``finalize``.
TIR phases (TVM's ``s_tir`` passes, wrapped in the registered TIR pipeline ``mtp``): ``tir-lower``, then
``tir-host`` / ``tir-device`` after the host/device split.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import tvm
from tvm import relax
from tvm.target import Target

PHASE_MARKER_PREFIX = "mtp.phase."
TIR_PIPELINE = "mtp"


def phase_marker(name: str) -> tvm.transform.Pass:
    """A pass that does nothing but tell instruments that phase ``name`` begins."""
    return tvm.transform.module_pass(lambda mod, _ctx: mod, opt_level=0, name=PHASE_MARKER_PREFIX + name)


def legalize_passes(_target: Target) -> list:
    """Relax operators -> TIR PrimFuncs (a no-op for calls that already are ``call_tir``)."""
    return [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant()]


def fuse_passes(_target: Target) -> list:
    """Group elementwise/injective PrimFuncs with their producers."""
    return [relax.transform.FuseOps(), relax.transform.FuseTIR()]


def schedule_passes(target: Target, schedule="default") -> list:
    """Give every PrimFunc its schedule (``mtp_tvm/schedule.py``: the declarative ones in ``schedules/``,
    ``none``, or dlight), then move weight packing out of the per-call path (``lift_weight_packing``).

    ``schedule`` is a name or an ``ApplySchedules`` instance (whose ``traces`` the caller then reads)."""
    from .schedule import ApplySchedules

    applier = schedule if isinstance(schedule, ApplySchedules) else ApplySchedules(target, schedule)
    return [applier, lift_weight_packing(applier)]


def lift_weight_packing(applier) -> tvm.transform.Pass:
    """``SplitLayoutRewritePreproc`` + ``LiftTransformParams``, only when ``applier`` packed a weight (the lift
    would otherwise also hoist unrelated weight ops, and it cannot copy some Relax frontend shapes)."""
    split, lift = relax.transform.SplitLayoutRewritePreproc(), relax.transform.LiftTransformParams()

    @tvm.transform.module_pass(opt_level=0, name="LiftWeightPacking")
    def _lift(mod, _ctx):
        return lift(split(mod)) if applier.packs_weights else mod

    return _lift


def lower_dataflow_passes(_target: Target) -> list:
    return [relax.transform.RewriteDataflowReshape(), relax.transform.ToNonDataflow(),
            relax.transform.RemovePurityChecking(), relax.transform.CallTIRRewrite()]


def finalize_passes(target: Target) -> list:
    """Memory planning and VM lowering."""
    cuda_graph = [relax.transform.RewriteCUDAGraph()] if target.kind.name == "cuda" else []
    return [relax.transform.StaticPlanBlockMemory(), *cuda_graph, relax.transform.LowerAllocTensor(),
            relax.transform.KillAfterLastUse(), relax.transform.LowerRuntimeBuiltin(),
            relax.transform.ComputePrimValue(), relax.transform.VMShapeLower(), relax.transform.AttachGlobalSymbol()]


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    passes: Callable[[Target], list]
    doc: str = ""


RELAX_PHASES: tuple[Phase, ...] = (
    Phase("legalize", legalize_passes, "Relax ops -> TIR"),
    Phase("fuse", fuse_passes, "operator fusion"),
    Phase("schedule", schedule_passes, "schedules from schedules/, weight packing lifted"),
    Phase("lower-dataflow", lower_dataflow_passes, "dataflow -> VM calls"),
    Phase("finalize", finalize_passes, "memory planning, VM shape lowering"),
)
TIR_PHASES = ("tir-lower", "tir-host", "tir-device")


def relax_pipeline(target: Target, schedule="default") -> tvm.transform.Pass:
    """Every Relax phase, each opened by its marker, as one pass for ``tvm.compile(relax_pipeline=...)``."""
    passes = []
    for phase in RELAX_PHASES:
        phase_passes = phase.passes(target, schedule) if phase.passes is schedule_passes else phase.passes(target)
        passes += [phase_marker(phase.name), *phase_passes]
    seq = tvm.transform.Sequential(passes, name="mtp.relax")

    @tvm.transform.module_pass(opt_level=0, name="mtp.relax_pipeline")
    def _pipeline(mod, _ctx):
        with target:  # dlight rules read the target from the context
            return seq(mod)

    return _pipeline


def _tir_pipeline():
    """TVM's ``s_tir`` lowering with phase markers; registered under the name ``mtp``."""
    lower, host, device = tvm.tirx.get_tir_pipeline("s_tir")
    return (tvm.transform.Sequential([phase_marker("tir-lower"), lower], name="mtp.tir"),
            lambda: tvm.transform.Sequential([phase_marker("tir-host"), host()]),
            lambda: tvm.transform.Sequential([phase_marker("tir-device"), device()]))


tvm.tirx.register_tir_pipeline(TIR_PIPELINE, _tir_pipeline)


def compile_module(mod: tvm.IRModule, target: Target, schedule="default"):
    """``tvm.compile`` through our named phases."""
    return tvm.compile(mod, target=target, relax_pipeline=relax_pipeline(target, schedule),
                       tir_pipeline=TIR_PIPELINE)
