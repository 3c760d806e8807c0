"""The ``vdpbf16ps`` GEMM is bitwise the instruction's documented rounding order (odd element of each K pair
first, RNE, DAZ/FTZ), within the outlier budget of an FP32 GEMM, emitted for every AVX512-BF16 target, and
refused (before anything is built) where the target or the shape does not fit."""

import re

import ml_dtypes
import numpy as np
import pytest
import tvm
from tvm import s_tir
from tvm.script import tirx as T

from mtp_tvm.passes.target import cpu_isa, resolve_target
from mtp_tvm.schedule.bf16_dot import apply_bf16_dot
from mtp_tvm.verify.comparators import ratio_allclose
from mtp_tvm.verify.tolerances import RatioTolerance

HOST = resolve_target("llvm")
RUNS_HERE = bool(tvm.target.codegen.target_has_features("avx512bf16", HOST))
needs_bf16 = pytest.mark.skipif(not RUNS_HERE, reason="this host lacks AVX512-BF16")
BF16 = ml_dtypes.bfloat16
TINY = np.float32(2.0**-126)  # the smallest normal FP32 (and BF16) magnitude


def gemm(K: int, N: int, Q: int = 8, name: str = "gemm"):
    """The production GEMM form: ``blocks * Q`` of A's m rows (m a multiple of 16) run."""

    @T.prim_func(s_tir=True)
    def gemm(a: T.handle, w: T.Buffer((N, K), "bfloat16"), c: T.handle, blocks: T.int64):
        T.func_attr({"tir.noalias": True, "global_symbol": name})
        m = T.int64()
        A = T.match_buffer(a, (m, K), "bfloat16")
        C = T.match_buffer(c, (m, N), "float32")
        for t, n, k in T.grid(blocks * Q, N, K):
            with T.sblock("gemm"):
                vt, vn, vk = T.axis.remap("SSR", [t, n, k])
                with T.init():
                    C[vt, vn] = T.float32(0)
                C[vt, vn] = C[vt, vn] + T.Cast("float32", A[vt, vk]) * T.Cast("float32", w[vn, vk])

    return gemm


def _scheduled(K, N, isa, rows=4, vectors=2, name="gemm"):
    sch = s_tir.Schedule(gemm(K, N, name=name))
    apply_bf16_dot(sch, sch.get_sblock("gemm"), isa, register_rows=rows, column_vectors=vectors)
    return sch.mod["main"].with_attr("global_symbol", name)


def _target(mcpu):
    return resolve_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})


def _run(ex, a, w, blocks=1, fn="gemm"):
    c = tvm.runtime.tensor(np.zeros((a.shape[0], w.shape[0]), np.float32))
    ex[fn](tvm.runtime.tensor(a), tvm.runtime.tensor(w), c, blocks)
    return c.numpy()[:blocks * 8]


def dpbf16ps_reference(a, w):
    """``vdpbf16ps`` in numpy: per K pair, ``acc += a[odd] * w[odd]`` then ``acc += a[even] * w[even]``, each add
    one FP32 RNE rounding of an exact product, denormal inputs and results flushed to zero."""
    def flush(x):
        return np.where(np.abs(x) < TINY, np.copysign(np.float32(0), x), x).astype(np.float32)

    af, wf = flush(a.astype(np.float32)), flush(w.astype(np.float32))
    acc = np.zeros((a.shape[0], w.shape[0]), np.float32)
    for p in range(a.shape[1] // 2):
        for k in (2 * p + 1, 2 * p):
            acc = flush(acc + af[:, k:k + 1] * wf[:, k])
    return acc


@needs_bf16
def test_bitwise_the_instruction_order():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 256)).astype(BF16)
    w = rng.standard_normal((256, 256)).astype(BF16)
    a[0, :4] = [1e-39, -1e-39, 1e20, 1.0]  # a BF16 denormal (read as zero); a large value absorbing the rest
    ex = tvm.compile(_scheduled(256, 256, cpu_isa(HOST)), target=HOST)
    for blocks in (1, 2):
        out = _run(ex, a, w, blocks)
        ref = dpbf16ps_reference(a[:blocks * 8], w)
        assert out.view(np.uint32).tolist() == ref.view(np.uint32).tolist()
    in_order = a[:8].astype(np.float32) @ w.astype(np.float32).T  # a different order: not bitwise
    assert not np.array_equal(_run(ex, a, w), in_order)


@pytest.mark.slow  # a 4096^2 GEMM
@needs_bf16
def test_within_the_fp32_outlier_budget_at_4096():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 4096)).astype(BF16)
    w = (rng.standard_normal((512, 4096)) * 0.05).astype(BF16)
    out = _run(tvm.compile(_scheduled(4096, 512, cpu_isa(HOST)), target=HOST), a, w)
    check = ratio_allclose(RatioTolerance(atol=1e-2, rtol=1e-2, max_error_ratio=0.02))(
        out, a[:8].astype(np.float32) @ w.astype(np.float32).T)
    assert check.passed, check.detail
    assert np.array_equal(out, dpbf16ps_reference(a[:8], w))


@needs_bf16
def test_two_kernels_in_one_module_share_the_imported_function():
    isa = cpu_isa(HOST)
    ex = tvm.compile(tvm.IRModule({"g1": _scheduled(64, 32, isa, name="g1"),
                                   "g2": _scheduled(64, 64, isa, name="g2")}), target=HOST)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((16, 64)).astype(BF16)
    for fn, n in (("g1", 32), ("g2", 64)):
        w = rng.standard_normal((n, 64)).astype(BF16)
        assert np.array_equal(_run(ex, a, w, fn=fn), dpbf16ps_reference(a[:8], w))


@pytest.mark.parametrize("mcpu", ["znver4", "sapphirerapids"])
def test_vdpbf16ps_is_emitted(mcpu):
    target = _target(mcpu)
    asm = tvm.compile(_scheduled(256, 256, cpu_isa(target)), target=target).mod.inspect_source("asm")
    assert len(re.findall(r"vdpbf16ps\s.*%zmm", asm)) >= 8  # 4 rows x 2 vectors per K pair, unrolled or not


@pytest.mark.parametrize("mcpu, K, N, rows, vectors, match", [
    ("skylake-avx512", 256, 256, 4, 2, "no AVX512-BF16"),
    ("haswell", 256, 256, 4, 2, "no AVX512-BF16"),
    ("znver4", 48, 256, 4, 2, "K a multiple of 32"),
    ("znver4", 256, 48, 4, 2, "N of 32"),
    ("znver4", 256, 40, 4, 1, "N of 16"),
    ("znver4", 256, 256, 8, 2, "1 KiB"),
])
def test_unfit_targets_and_shapes_are_refused(mcpu, K, N, rows, vectors, match):
    with pytest.raises(ValueError, match=match):
        _scheduled(K, N, cpu_isa(_target(mcpu)), rows, vectors)
