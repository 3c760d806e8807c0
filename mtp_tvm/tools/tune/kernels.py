"""What ``tune`` hands MetaSchedule: the kernels of a case or a Relax module as tile workloads, only the target's
own tensor intrinsics (TVM's ``TuneContext`` would import every one it ships: ~30-60 s for CUDA alone), and a
candidate builder that skips that import in its workers (MetaSchedule's default timed out at 30 s)."""

from __future__ import annotations

import importlib.util
import sys
import types

import tvm
from tvm import relax, tirx
from tvm.target import Target

from ...compiler.options import BuildSpec
from ...passes.target import is_gpu
from ...schedule.tuned import called_kernels, tile_workload

_INTRINSICS = "tvm.s_tir.tensor_intrin"


def load_tensor_intrinsics(target: Target) -> None:
    """Register only ``target``'s tensor intrinsics, and make ``import tvm.s_tir.tensor_intrin`` a no-op."""
    if _INTRINSICS not in sys.modules:
        spec = importlib.util.find_spec(_INTRINSICS)
        shell = types.ModuleType(_INTRINSICS)
        shell.__path__ = list(spec.submodule_search_locations)
        shell.__package__ = _INTRINSICS
        sys.modules[_INTRINSICS] = shell
    importlib.import_module(f"{_INTRINSICS}.{'cuda' if is_gpu(target) else 'x86'}")


def fast_build(mod: tvm.IRModule, target: Target, _params):
    """MetaSchedule builder function: ``tvm.compile`` through our TIR pipeline, as our builds lower (it links
    imported LLVM IR and keeps register tiles on the stack: ``passes.register_tiles``); no tensor-intrinsic
    import in the worker."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from ...passes.pipeline import TIR_PIPELINE, register_with_tvm

    register_with_tvm()
    return tvm.compile(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target,
                       tir_pipeline=TIR_PIPELINE).mod


def case_kernels(spec: BuildSpec, target: Target) -> dict[str, tirx.PrimFunc]:
    """The kernels ``main`` calls per call (parameter-only work lifted out), as tile workloads, by name."""
    from ...contract.cases import get_case
    from ...ir.model import build_relax_module

    return relax_kernels(build_relax_module(get_case(spec.case), spec.shapes(), spec.frontend), target)


def relax_kernels(mod: tvm.IRModule, target: Target) -> dict[str, tirx.PrimFunc]:
    """The kernels of a Relax module's ``main`` per call (parameter-only work lifted out), as tile workloads, by
    name: a case's (``case_kernels``) or a user's module file's."""
    from ...passes.pipeline import fuse_passes, legalize_passes
    from ...schedule.apply import ApplySchedules

    with target:
        mod = tvm.transform.Sequential(legalize_passes(target) + fuse_passes(target)
                                       + [relax.transform.LiftTransformParams()])(mod)
    rows = ApplySchedules(target).tuned_rows  # each GEMM's rows as a tuned build cuts them
    return {gv.name_hint: tile_workload(rows(gv.name_hint, mod[gv])) for gv in called_kernels(mod)}
