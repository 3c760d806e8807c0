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


def schedule_passes(target: Target) -> list:
    """Give every PrimFunc a schedule: dlight's GPU rules on CUDA (kernels need thread bindings there); CPU
    kernels lower as written."""
    if target.kind.name != "cuda":
        return []
    from tvm.s_tir import dlight as dl

    return [dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
                                    dl.gpu.Fallback())]


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
    Phase("schedule", schedule_passes, "schedules (dlight on CUDA)"),
    Phase("lower-dataflow", lower_dataflow_passes, "dataflow -> VM calls"),
    Phase("finalize", finalize_passes, "memory planning, VM shape lowering"),
)
TIR_PHASES = ("tir-lower", "tir-host", "tir-device")


def relax_pipeline(target: Target) -> tvm.transform.Pass:
    """Every Relax phase, each opened by its marker, as one pass for ``tvm.compile(relax_pipeline=...)``."""
    passes = []
    for phase in RELAX_PHASES:
        passes += [phase_marker(phase.name), *phase.passes(target)]
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


def compile_module(mod: tvm.IRModule, target: Target):
    """``tvm.compile`` through our named phases."""
    return tvm.compile(mod, target=target, relax_pipeline=relax_pipeline(target), tir_pipeline=TIR_PIPELINE)
