"""The compile flow as named phases, in the style of TVM's ``relax/pipeline.py``: each phase is a function
returning a pass list, and a no-op marker pass named ``mtp.phase.<name>`` opens it, so instruments (dumps,
timing, bisect) can attribute every pass to its phase by name.

Relax phases (ours): ``legalize`` -> ``fuse`` -> ``schedule`` -> ``lower-dataflow`` -> ``finalize``.
TIR phases (TVM's ``s_tir`` passes, wrapped in the registered TIR pipeline ``mtp``): ``tir-lower``, then
``tir-host`` / ``tir-device`` after the host/device split.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import tvm
import tvm_ffi
from tvm import relax
from tvm.target import Target

from ..ir.op_coverage import DISPATCHED_OPS
from .kernel_blocks import kernel_blocks
from .register_tiles import register_tiles_on_stack
from .target import is_gpu
from .vectorizable import mark_vectorizable

PHASE_MARKER_PREFIX = "mtp.phase."
# The passes that only run others: the instrument skips them when it numbers passes, so their names are shared.
RELAX_SEQUENCE = "mtp.relax"
RELAX_PIPELINE = "mtp.relax_pipeline"
TIR_SEQUENCE = "mtp.tir"
LIBRARY_DISPATCH = "mtp.library_dispatch"
MTP_CONTAINER_PASSES = (RELAX_SEQUENCE, RELAX_PIPELINE, TIR_SEQUENCE, LIBRARY_DISPATCH)


TIR_PIPELINE = "mtp"


def phase_marker(name: str, on_enter: Callable[[str, tvm.IRModule], None] | None = None) -> tvm.transform.Pass:
    """A pass that does nothing but tell instruments (and ``on_enter``) that phase ``name`` begins."""

    def enter(mod, _ctx):
        if on_enter is not None:
            on_enter(name, mod)
        return mod

    return tvm.transform.module_pass(enter, opt_level=0, name=PHASE_MARKER_PREFIX + name)


def legalize_passes(_target: Target) -> list:
    """Relax operators -> TIR PrimFuncs (a no-op for calls that already are ``call_tir``), after the library
    dispatch (``library_dispatch``)."""
    return [library_dispatch(), relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant()]


def library_dispatch() -> tvm.transform.Pass:
    """TVM's ``DispatchSampling`` and ``DispatchSortScan``, which its default pipelines run before ``LegalizeOps``:
    sort, scan and sampling operators (``DISPATCHED_OPS``) become TVM's kernels for the target (without them a
    TVMScript module file with a ``cumsum`` built on no target). They run only on a module that calls one, inside
    a container the dumps do not number, so every other build keeps its pass numbers."""
    dispatch = [relax.backend.DispatchSampling(), relax.backend.DispatchSortScan()]

    @tvm.transform.module_pass(opt_level=0, name=LIBRARY_DISPATCH)
    def _dispatch(mod, _ctx):
        if not _calls_any(mod, DISPATCHED_OPS):
            return mod
        for p in dispatch:
            mod = p(mod)
        return mod

    return _dispatch


def _calls_any(mod: tvm.IRModule, ops: frozenset[str]) -> bool:
    found = []

    def visit(node) -> None:
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op) and node.op.name in ops:
            found.append(node.op.name)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return bool(found)


def fuse_passes(_target: Target) -> list:
    """Group elementwise/injective PrimFuncs with their producers."""
    return [relax.transform.FuseOps(), relax.transform.FuseTIR()]


def schedule_passes(_target: Target, applier: tvm.transform.Pass) -> list:
    """Give every PrimFunc its schedule (``applier``: the schedule layer's ``ApplySchedules``, whose traces the
    caller reads afterwards), then move weight packing out of the per-call path (``lift_weight_packing``)."""
    return [applier, lift_weight_packing(applier)]


# TVM's block annotation that ``SplitLayoutRewritePreproc`` splits a PrimFunc at (the schedules' weight packing)
PREPACK_ANNOTATION = "meta_schedule.layout_rewrite_preproc"


def packs_weight(func) -> bool:
    """Whether ``func`` is a PrimFunc holding a weight-packing block (``PREPACK_ANNOTATION``)."""
    return isinstance(func, tvm.tirx.PrimFunc) and any(PREPACK_ANNOTATION in b.annotations for b in kernel_blocks(func))


def lift_weight_packing(applier) -> tvm.transform.Pass:
    """``SplitLayoutRewritePreproc`` + ``LiftTransformParams``, only when ``applier`` packed a weight (the lift
    would otherwise also hoist unrelated weight ops, and it cannot copy some Relax frontend shapes). The split sees
    only the Relax functions and the kernels that pack: it fails on a PrimFunc without a compute block under its
    root, which TVM's own kernels for sorts and scans (``library_dispatch``) are. The kernels it replaced are
    dropped once no Relax function calls them (its own clean-up keeps them in a module that lacks the others)."""
    split, lift = relax.transform.SplitLayoutRewritePreproc(), relax.transform.LiftTransformParams()

    @tvm.transform.module_pass(opt_level=0, name="LiftWeightPacking")
    def _lift(mod, _ctx):
        if not applier.packs_weights:
            return mod
        others = {gv: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and not packs_weight(f)}
        packing = mod.clone()
        for gv in others:
            del packing[gv]
        out = split(packing)
        for gv, func in others.items():
            out[gv] = func
        called = {gv for f in out.functions.values() if isinstance(f, relax.Function)
                  for gv in relax.analysis.all_global_vars(f)}
        for gv, func in packing.functions_items():
            if isinstance(func, tvm.tirx.PrimFunc) and gv not in called:
                del out[gv]
        return lift(out)

    return _lift


def lower_dataflow_passes(_target: Target) -> list:
    return [relax.transform.RewriteDataflowReshape(), relax.transform.ToNonDataflow(),
            relax.transform.RemovePurityChecking(), relax.transform.CallTIRRewrite()]


USE_CUDA_GRAPH = "relax.backend.use_cuda_graph"  # the PassContext option RewriteCUDAGraph acts on


def plan_graph_capture(mod: tvm.IRModule, max_rows: int) -> tvm.IRModule:
    """``main`` made capturable as CUDA graphs (``BuildSpec.cuda_graph``): its symbolic sizes (``tokens``,
    ``rows``) bounded by ``max_rows``, so ``StaticPlanBlockMemory`` gives every intermediate a fixed-size buffer,
    and named as sizes a graph may depend on, so ``RewriteCUDAGraph`` lifts the kernels that read only weights
    and those buffers into functions the runtime captures once per size (``vm.builtin.cuda_graph``)."""
    main = mod["main"]
    names = sorted({v.name for p in main.params for v in relax.analysis.definable_tir_vars_in_type(p.ty)})
    mod["main"] = main.with_attrs({"relax.rewrite_cuda_graph.capture_symbolic_vars": names,
                                   "tir_var_upper_bound": {n: max_rows for n in names}})
    return mod


def graph_config(cuda_graph: bool | None) -> dict:
    """The PassContext options of a build: ``USE_CUDA_GRAPH`` when it captures graphs."""
    return {USE_CUDA_GRAPH: True} if cuda_graph else {}


def finalize_passes(target: Target) -> list:
    """Memory planning and VM lowering."""
    cuda_graph = [relax.transform.RewriteCUDAGraph()] if is_gpu(target) else []
    return [relax.transform.StaticPlanBlockMemory(), *cuda_graph, relax.transform.LowerAllocTensor(),
            relax.transform.KillAfterLastUse(), relax.transform.LowerRuntimeBuiltin(),
            relax.transform.ComputePrimValue(), relax.transform.VMShapeLower(), relax.transform.AttachGlobalSymbol()]


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    passes: Callable[..., list]  # (target) -> passes; (target, applier) where ``takes_applier``
    optional_on: frozenset[str] = frozenset()  # target kinds on which the whole phase may be skipped (bisect)
    takes_applier: bool = False  # the schedule phase: its passes need the build's ``ApplySchedules``


RELAX_PHASES: tuple[Phase, ...] = (
    Phase("legalize", legalize_passes),
    Phase("fuse", fuse_passes),
    # CPU kernels lower unscheduled; GPU ones need thread bindings
    Phase("schedule", schedule_passes, optional_on=frozenset({"llvm"}), takes_applier=True),
    Phase("lower-dataflow", lower_dataflow_passes),
    Phase("finalize", finalize_passes),
)


def relax_passes_by_name(target: Target) -> dict[str, tvm.transform.Pass]:
    """The Relax phases' passes by name (not the schedule phase's, which need the build's applier): what a
    skipped ``--disable-pass`` would have run (``instrument.idle_passes``)."""
    return {p.info.name: p for phase in RELAX_PHASES if not phase.takes_applier for p in phase.passes(target)}


TIR_PHASES = ("tir-lower", "tir-host", "tir-device")


# Phases that rewrite the dataflow program; user passes (``extra_passes``) may join them. The module leaving
# them is what a reproducer stores: everything after is mechanical lowering.
OPTIMIZING_PHASES = ("legalize", "fuse", "schedule")


FIRST_LOWERING_PHASE = "lower-dataflow"


# What a user pass (which runs first in its phase) finds there: the table of docs/guides/writing-a-pass.md, and
# the reason given when one changed nothing (instrument.idle_passes).
PHASE_HOLDS = {
    "legalize": "unfused Relax operators (R.matmul, R.nn.softmax...), before LegalizeOps turns them into PrimFuncs",
    "fuse": "one unscheduled PrimFunc per operator, before FuseOps/FuseTIR: no fused kernels yet (a pass on "
            "fused kernels belongs under 'schedule')",
    "schedule": "the fused PrimFuncs, before the hand schedules (a pass on scheduled TIR belongs in a TIR "
                "pipeline, see docs/guides/writing-a-pass.md)",
}


# LLVM's "optional" passes (``-opt-bisect-limit``): the build stays correct without them, so a bisect may skip
# them. A group is skipped or applied as a whole (FuseTIR only makes sense after FuseOps). Required passes
# (legalisation, lowering, codegen preparation) always run.
OPTIONAL_PASS_GROUPS: tuple[tuple[str, ...], ...] = (
    ("FoldConstant",),
    ("FuseOps", "FuseTIR"),
    ("s_tir.LoopPartition",),
    ("s_tir.HoistIfThenElse",),
    ("tirx.UnrollLoop",),
    ("tirx.CommonSubexprElim",),
    ("s_tir.RenormalizeSplitPattern",),
)


def relax_pipeline(target: Target, applier: tvm.transform.Pass | None, extra_passes: dict[str, list] | None = None,
                   first_phase: str = RELAX_PHASES[0].name, on_phase=None,
                   passes_seen: dict | None = None) -> tvm.transform.Pass:
    """Every Relax phase from ``first_phase`` on, each opened by its marker, as one pass for
    ``tvm.compile(relax_pipeline=...)``. ``extra_passes`` (phase name -> passes) run first in their phase;
    ``on_phase(name, mod)`` sees the module entering each phase; ``applier`` is the schedule phase's pass;
    ``passes_seen`` gets every pass by name (a failure's pass run again to narrow it)."""
    extra_passes = extra_passes or {}
    names = [ph.name for ph in RELAX_PHASES]
    passes = []
    for phase in RELAX_PHASES[names.index(first_phase):]:
        if phase.takes_applier and applier is None:
            raise ValueError("a pipeline that runs the schedule phase needs its schedule applier")
        phase_passes = phase.passes(target, applier) if phase.takes_applier else phase.passes(target)
        passes += [phase_marker(phase.name, on_phase), *extra_passes.get(phase.name, ()), *phase_passes]
    if passes_seen is not None:
        passes_seen.update((p.info.name, p) for p in passes)
    seq = tvm.transform.Sequential(passes, name=RELAX_SEQUENCE)

    @tvm.transform.module_pass(opt_level=0, name=RELAX_PIPELINE)
    def _pipeline(mod, _ctx):
        with target:  # dlight rules read the target from the context
            return seq(mod)

    return _pipeline


def _tir_pipeline():
    """TVM's ``s_tir`` lowering with phase markers, then ``RegisterTilesOnStack`` (before the host passes'
    ``LowerTVMBuiltin`` decides stack or workspace); registered under the name ``mtp``."""
    lower, host, device = tvm.tirx.get_tir_pipeline("s_tir")
    return (tvm.transform.Sequential([phase_marker("tir-lower"), lower, register_tiles_on_stack], name=TIR_SEQUENCE),
            lambda: tvm.transform.Sequential([phase_marker("tir-host"), host()]),
            lambda: tvm.transform.Sequential([phase_marker("tir-device"), device()]))


@functools.cache
def register_with_tvm() -> None:
    """Once per process, before the first build: our TIR pipeline under its name, and ``KeyboardInterrupt``
    with tvm-ffi. Ctrl-C during a build lands in a Python callback TVM runs (a pass, an instrument); tvm-ffi
    carries the exception back through C++ by its registered name, so an unregistered ``KeyboardInterrupt``
    came back as an empty ``RuntimeError``: a "build failed" (exit 3) instead of an interrupt (exit 130).
    ``SystemExit`` (a user pass calling ``sys.exit``) likewise, so the driver can name it. And the intrinsics
    TVM's vectoriser would scalarise (``vectorizable.py``)."""
    tvm.tirx.register_tir_pipeline(TIR_PIPELINE, _tir_pipeline)
    mark_vectorizable()
    tvm_ffi.error.register_error("KeyboardInterrupt", KeyboardInterrupt)
    tvm_ffi.error.register_error("SystemExit", SystemExit)


def compile_through_phases(mod: tvm.IRModule, target: Target, applier: tvm.transform.Pass | None,
                           extra_passes: dict[str, list] | None = None, first_phase: str = RELAX_PHASES[0].name,
                           on_phase=None, passes_seen: dict | None = None):
    """``tvm.compile`` through our named phases (from ``first_phase`` on, for a module that already went through
    the earlier ones, e.g. a reproducer's: then ``applier`` is None); ``applier`` schedules the kernels
    (``schedule.apply``); ``passes_seen`` as ``relax_pipeline``'s."""
    register_with_tvm()
    return tvm.compile(mod, target=target,
                       relax_pipeline=relax_pipeline(target, applier, extra_passes, first_phase, on_phase, passes_seen),
                       tir_pipeline=TIR_PIPELINE)
