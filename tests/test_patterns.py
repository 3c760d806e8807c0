"""Kernels matched by pattern (``schedule/patterns.py``): the Relax frontend's legalised kernels get the schedule
of their TIR twin (a GEMM) or the generic row schedule, no case leaves a kernel unscheduled, GEMMs run only the
real rows, and a kernel no pattern matches is still named."""

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import relax, tirx
from tvm.script import tirx as T

import mtp_tvm
from helpers import slow_except
from mtp_tvm.compiler.arrays import to_numpy
from mtp_tvm.contract.cases import CASES
from mtp_tvm.contract.presets import make_shapes
from mtp_tvm.ir import tir_kernels
from mtp_tvm.ir.model import build_relax_module
from mtp_tvm.passes.pipeline import fuse_passes, legalize_passes
from mtp_tvm.passes.target import cpu_isa, resolve_target
from mtp_tvm.schedule.apply import ApplySchedules
from mtp_tvm.schedule.files import load_schedules
from mtp_tvm.schedule.patterns import (
    BMM,
    GEMM,
    GEMM_TWINS,
    ROWS,
    match_kernel,
)
from mtp_tvm.schedule.token_rows import trim_token_rows

TARGETS = {"znver4": {"kind": "llvm", "mcpu": "znver4", "num-cores": 2},
           "haswell": {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}}


def _fused(case: str) -> tvm.IRModule:
    """The Relax frontend's module after legalisation and fusion: the kernels the schedule phase sees."""
    target = resolve_target("llvm")
    mod = build_relax_module(CASES[case], make_shapes("tiny"), "relax")
    with target:
        return tvm.transform.Sequential(legalize_passes(target) + fuse_passes(target))(mod)


def _kernels(mod: tvm.IRModule) -> dict[str, tirx.PrimFunc]:
    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}


@pytest.mark.parametrize("mcpu", sorted(TARGETS))
@pytest.mark.parametrize("case, twin", slow_except([("logits", "lm_head_logits"), ("projection", "w8a8_dual_gemm")],
                                                  {("logits", "lm_head_logits")}))  # the Relax projection: seconds
def test_a_relax_gemm_gets_its_tir_twins_schedule_by_pattern(case, twin, mcpu):
    target = resolve_target(TARGETS[mcpu])
    isa = cpu_isa(target)
    gemms = [m for f in _kernels(_fused(case)).values() if (m := match_kernel(f, target, isa)) and m.pattern == GEMM]
    assert gemms and all(m.twin == twin and m.schedule.rule == "cpu_gemm" for m in gemms)
    hand = load_schedules(target)[twin]["default"].knobs_for(isa.name)
    for m in gemms:
        knobs = m.schedule.knobs
        # the twin's knobs, with this kernel's blocks (a Relax matmul reads its weight [K, N]) and epilogue
        assert dataclasses.replace(knobs, blocks=hand.blocks, inline=(), epilogue=hand.epilogue) == hand
        assert [g.k_major for g in m.gemms] == [True] and list(knobs.blocks) == ["matmul"]
        assert m.row_quantum == 8  # ceil(T / 8) * 8 rows run, as the TIR twin's


@pytest.mark.parametrize("kernel, func", [("lm_head_logits", tir_kernels.lm_head_logits(256, 512)),
                                          ("w8a8_dual_gemm", tir_kernels.w8a8_dual_gemm(256))])
def test_the_twin_table_names_the_tir_kernel_of_each_gemm_signature(kernel, func):
    """Matched by pattern, each hand kernel is its own twin, with the operands its schedule file names."""
    target = resolve_target(TARGETS["znver4"])
    m = match_kernel(func, target, cpu_isa(target))
    assert m.pattern == GEMM and m.twin == kernel and GEMM_TWINS[m.gemms[0].signature] == kernel
    hand = load_schedules(target)[kernel]["default"].knobs
    assert {b: (o.activation, o.weight) for b, o in m.schedule.knobs.blocks.items()} == \
        {b: (o.activation, o.weight) for b, o in hand.blocks.items()}
    assert not any(g.k_major for g in m.gemms)


def test_row_kernels_and_copies_get_the_generic_rule():
    target = resolve_target(TARGETS["znver4"])
    found = {name: match_kernel(f, target, cpu_isa(target)) for name, f in _kernels(_fused("projection")).items()}
    assert {name for name, m in found.items() if m.pattern == ROWS} == set(found) - {
        name for name in found if "matmul" in name}
    norm = next(m for name, m in found.items() if "rsqrt" in name).schedule
    assert norm.rule == "cpu_generic" and norm.knobs.inline and norm.knobs.vectorize == norm.knobs.parallel
    transpose = found["transpose"].schedule.knobs  # the weight transpose: parallel rows, vector columns
    assert transpose.vectorize == transpose.parallel == ("T_transpose",)


# the tail and projection Relax builds take seconds each
@pytest.mark.parametrize("case", slow_except(sorted(CASES), {"norm", "logits", "shared-head-logits", "lm-head"}))
def test_no_relax_kernel_is_left_unscheduled(compiled, case):
    m = compiled(case, "relax")
    assert m.unscheduled == [] and m.schedule_traces


@pytest.mark.slow  # the tail's Relax build takes seconds
def test_weight_transposes_and_packing_run_once_per_weight_set_not_per_call(compiled):
    mod = compiled("tail", "relax").optimized_module
    per_call = [str(c.args[0]) for c in _calls(mod["main"])]
    once = [str(c.args[0]) for c in _calls(mod["main_transform_params"])]
    assert not any("transpose" in k or "weight_prepack" in k for k in per_call)
    assert any("transpose" in k for k in once) and any("weight_prepack" in k for k in once)


def _calls(func) -> list:
    out = []
    relax.analysis.post_order_visit(func, lambda e: out.append(e) if isinstance(e, relax.Call)
                                    and e.op.name == "relax.call_tir" else None)
    return out


@pytest.mark.slow  # the tail's Relax build, twice
def test_relax_gemms_run_only_the_real_rows_and_the_outputs_stay_bitwise(compiled, monkeypatch):
    real = compiled("tail", "relax")
    monkeypatch.setattr("mtp_tvm.schedule.patterns.row_variants", lambda func, *_: func)  # the full tile
    full = mtp_tvm.compile(case="tail", preset="tiny", frontend="relax")
    gemm = next(f for gv, f in real.optimized_module.functions_items() if "matmul" in gv.name_hint
                and "weight_prepack" not in gv.name_hint and isinstance(f, tirx.PrimFunc))
    q = 16 if cpu_isa(real.target).int8_tile else 8  # AMX tiles run 16 rows (the first matmul is the int8 one)
    assert f"T.int64({q - 1})) // T.int64({q}) * T.int64({q})" in gemm.script()  # ceil(T / q) * q rows
    for tokens in (1, 5, 8, 17):
        inputs = {k: to_numpy(v) for k, v in real.case.make_inputs(make_shapes("tiny", tokens), 3).items()}
        a, b = real.run(inputs), full.run(inputs)
        for name in a:
            np.testing.assert_array_equal(np.asarray(a[name], np.float32), np.asarray(b[name], np.float32))


def test_trimming_leaves_static_and_full_tile_kernels_alone():
    func = _kernels(_fused("logits"))["matmul"]
    assert trim_token_rows(func, 16) is func
    assert "T.int64(3)) // T.int64(4) * T.int64(4)" in trim_token_rows(func, 4).script()
    static = tir_kernels.lm_head_tp(256, 512, 2, 2, 2)
    assert trim_token_rows(static, 8) is static


@T.prim_func(s_tir=True, private=True)
def _total(x: T.Buffer((T.int64(64), T.int64(16)), "float32"), out: T.Buffer((T.int64(1),), "float32")):
    """A reduction over the outermost loop (the whole tensor to one value): no pattern covers it."""
    for i, j in T.grid(T.int64(64), T.int64(16)):
        with T.sblock("total"):
            vi, vj = T.axis.remap("RR", [i, j])
            with T.init():
                out[0] = T.float32(0)
            out[0] = out[0] + x[vi, vj]


def test_a_kernel_no_pattern_matches_is_still_named_unscheduled():
    target = resolve_target(TARGETS["znver4"])
    assert match_kernel(_total, target, cpu_isa(target)) is None
    applier = ApplySchedules(target)
    applier.transform_module(tvm.IRModule({"total": _total}), None)
    assert applier.unscheduled == ["total"] and "total" not in applier.traces


def _bmm(b_major: bool):
    """Attention's ``scores @ v`` as torch.export gives it (``B[b, k, j]``), or with ``B[b, j, k]``."""
    @T.prim_func(s_tir=True)
    def bmm(A: T.Buffer((8, 32, 64), "float32"), B: T.Buffer((8, 64, 48), "float32"),
            Y: T.Buffer((8, 32, 48), "float32")):
        T.func_attr({"tir.noalias": True})
        for b, i, j, k in T.grid(8, 32, 48, 64):
            with T.sblock("matmul"):
                vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
                with T.init():
                    Y[vb, vi, vj] = T.float32(0)
                Y[vb, vi, vj] = Y[vb, vi, vj] + A[vb, vi, vk] * B[vb, vk, vj]

    @T.prim_func(s_tir=True)
    def bmm_nt(A: T.Buffer((8, 32, 64), "float32"), B: T.Buffer((8, 48, 64), "float32"),
               Y: T.Buffer((8, 32, 48), "float32")):
        T.func_attr({"tir.noalias": True})
        for b, i, j, k in T.grid(8, 32, 48, 64):
            with T.sblock("matmul"):
                vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
                with T.init():
                    Y[vb, vi, vj] = T.float32(0)
                Y[vb, vi, vj] = Y[vb, vi, vj] + A[vb, vi, vk] * B[vb, vj, vk]

    return bmm if b_major else bmm_nt


@pytest.mark.parametrize("mcpu", sorted(TARGETS))
def test_a_batched_matmul_gets_the_batched_gemm_rule_and_computes_it(mcpu):
    """Attention's batched matmuls were left unscheduled (89 % of an own model's time, 8x torch.compile): the
    ``bmm`` pattern gives them a register tile per batch, FMAs on vectors of ``j``, batches in parallel."""
    target = resolve_target(TARGETS[mcpu])
    found = match_kernel(_bmm(True), target, cpu_isa(target))
    assert found.pattern == BMM and found.schedule.rule == "cpu_batched_gemm"
    assert match_kernel(_bmm(False), target, cpu_isa(target)) is None  # B[b, j, k]: another form, said unscheduled
    applier = ApplySchedules(target)
    scheduled = applier.transform_module(tvm.IRModule({"bmm": _bmm(True)}), None)
    assert applier.unscheduled == [] and "bmm" in applier.traces
    asm = tvm.compile(scheduled, target=target).mod.inspect_source("asm")
    assert "vfmadd" in asm and ("%ymm" in asm if mcpu == "haswell" else "%zmm" in asm)
    if mcpu == "haswell":  # runs on any x86 host here
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((8, 32, 64), np.float32), rng.standard_normal((8, 64, 48), np.float32)
        y = tvm.runtime.tensor(np.zeros((8, 32, 48), np.float32))
        tvm.compile(scheduled, target=target)["bmm"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), y)
        np.testing.assert_allclose(y.numpy(), a @ b, rtol=1e-5, atol=1e-4)
