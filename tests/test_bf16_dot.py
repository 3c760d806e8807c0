"""The BF16 pair dot is bitwise the documented rounding order of ``vdpbf16ps`` (odd element of each K pair first,
RNE; DAZ/FTZ on AVX512-BF16 only), on AVX512-BF16 and in its FMA form on AVX2, within the outlier budget of an
FP32 GEMM; each ISA's instructions are emitted (checked in the assembly for CPUs this host may not be), the
accumulator tile stays in registers at 8 x 2 zmm, the weight stream is prefetched; a target or shape that does
not fit is refused before anything is built."""

import re

import ml_dtypes
import numpy as np
import pytest
import tvm
from tvm import s_tir

from helpers import gemm, hot_loop
from mtp_tvm.passes.pipeline import TIR_PIPELINE, register_with_tvm
from mtp_tvm.passes.target import cpu_isa, resolve_target
from mtp_tvm.schedule.bf16_dot import apply_bf16_dot
from mtp_tvm.verify.comparators import ratio_allclose
from mtp_tvm.verify.tolerances import RatioTolerance

HOST = resolve_target("llvm")
RUNS_HERE = bool(tvm.target.codegen.target_has_features("avx512bf16", HOST))
needs_bf16 = pytest.mark.skipif(not RUNS_HERE, reason="this host lacks AVX512-BF16")
AVX2 = resolve_target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
needs_avx2 = pytest.mark.skipif(not tvm.target.codegen.target_has_features(["avx2", "fma"], HOST),
                                reason="this host lacks AVX2/FMA")
BF16 = ml_dtypes.bfloat16
TINY = np.float32(2.0**-126)  # the smallest normal FP32 (and BF16) magnitude


def _scheduled(K, N, isa, rows=4, vectors=2, name="gemm", strip=None):
    sch = s_tir.Schedule(gemm(K, N, name=name))
    apply_bf16_dot(sch, sch.get_sblock("gemm"), isa, register_rows=rows, column_vectors=vectors, strip_vectors=strip)
    return sch.mod["main"].with_attr("global_symbol", name)


def _target(mcpu):
    return resolve_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})


def _run(ex, a, w, blocks=1, fn="gemm"):
    c = tvm.runtime.tensor(np.zeros((a.shape[0], w.shape[0]), np.float32))
    ex[fn](tvm.runtime.tensor(a), tvm.runtime.tensor(w), c, blocks)
    return c.numpy()[:blocks * 8]


def dpbf16ps_reference(a, w, flush_denormals=True):
    """``vdpbf16ps`` in numpy: per K pair, ``acc += a[odd] * w[odd]`` then ``acc += a[even] * w[even]``, each add
    one FP32 RNE rounding of an exact product, denormal inputs and results flushed to zero (``vdpbf16ps``; its
    FMA form keeps them: ``flush_denormals=False``)."""
    def flush(x):
        if not flush_denormals:
            return x.astype(np.float32)
        return np.where(np.abs(x) < TINY, np.copysign(np.float32(0), x), x).astype(np.float32)

    af, wf = flush(a.astype(np.float32)), flush(w.astype(np.float32))
    acc = np.zeros((a.shape[0], w.shape[0]), np.float32)
    for p in range(a.shape[1] // 2):
        for k in (2 * p + 1, 2 * p):
            acc = flush(acc + af[:, k:k + 1] * wf[:, k])
    return acc


@pytest.mark.parametrize("target", [
    pytest.param(HOST, marks=needs_bf16, id="vdpbf16ps"),
    pytest.param(AVX2, marks=needs_avx2, id="avx2-fma"),
])
def test_bitwise_the_instruction_order(target):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 256)).astype(BF16)
    w = rng.standard_normal((256, 256)).astype(BF16)
    a[0, :4] = [1e-39, -1e-39, 1e20, 1.0]  # a BF16 denormal (read as zero by vdpbf16ps); a large value
    isa = cpu_isa(target)
    ex = tvm.compile(_scheduled(256, 256, isa, vectors=2 if isa.bf16_dot else 4), target=target)
    for blocks in (1, 2):
        out = _run(ex, a, w, blocks)
        ref = dpbf16ps_reference(a[:blocks * 8], w, flush_denormals=isa.bf16_dot)
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


def _asm(mcpu: str, rows: int, vectors: int, strip: int | None = None) -> str:
    """The assembly of the GEMM built as our builds lower (``passes.pipeline``'s TIR pipeline)."""
    register_with_tvm()
    target = _target(mcpu)
    return tvm.compile(_scheduled(256, 256, cpu_isa(target), rows, vectors, strip=strip), target=target,
                       tir_pipeline=TIR_PIPELINE).mod.inspect_source("asm")


@pytest.mark.parametrize("mcpu", ["znver4", "znver5", "sapphirerapids"])
def test_an_8_by_2_zmm_tile_stays_in_registers(mcpu):
    """16 ``vdpbf16ps`` per 2 weight loads and 8 broadcasts, no store in the loop (the 1 KiB tile would be a
    heap workspace without ``RegisterTilesOnStack``: a store after every dot), on an Intel core and on Zen 5 one
    prefetch per weight vector of the first row (each a 64-byte line of its stream: the weight packed one vector
    wide, as ``cpu_rules.packed_strip`` packs it), on Zen 4 none (``bf16_dot.weight_prefetch``)."""
    asm = _asm(mcpu, 8, 2, strip=1)
    loop = hot_loop(asm, "vdpbf16ps")
    steps, rest = divmod(len(re.findall(r"vdpbf16ps\s.*%zmm", loop)), 16)  # K pairs per trip (LLVM may unroll)
    assert steps and not rest
    weight_loads = re.findall(r"vmovups\s+-?\d*\(%\w+\), %zmm|vdpbf16ps\s+-?\d*\(%\w+", loop)
    assert len(weight_loads) == 2 * steps and len(re.findall(r"vbroadcastss\s", loop)) == 8 * steps
    assert len(re.findall(r"prefetcht0\s", loop)) == (0 if mcpu == "znver4" else 2 * steps)
    assert not re.search(r"vmov\w*\s+%zmm\d+, ", loop)  # no store, no spill
    sizes = re.findall(r"TVMBackendAllocWorkspace@GOTPCREL\(%rip\), %\w+\n\s*movl\s+\$(\d+), %edx", asm)
    assert "1024" not in sizes  # the workspaces left: the weight packing, here not lifted out of the call


def test_a_zmm_tile_reads_one_line_streams_and_an_avx2_tile_keeps_its_strip():
    """``cpu_rules.packed_strip``: the 8 x 2 zmm tile's weight is packed one vector (64 bytes a K step) wide, so
    the tile reads two one-line streams (SPR, FLASH logits, T = 4: 5.0 -> 3.5-3.9 ms); a ymm vector reads 32
    bytes, so a 2-vector AVX2 strip stays one line; the int8 dot keeps the tile's strip."""
    from mtp_tvm.schedule.cpu_rules import DotPath, packed_strip
    from mtp_tvm.schedule.int8_dot import apply_int8_dot

    zmm = DotPath(apply_bf16_dot, 16, step_bytes=64)
    ymm = DotPath(apply_bf16_dot, 8, 1, 2, step_bytes=32)
    assert [packed_strip(v, zmm) for v in (1, 2, 4)] == [1, 1, 1]
    assert [packed_strip(v, ymm) for v in (1, 2, 4, 6)] == [1, 2, 2, 2]
    assert packed_strip(2, DotPath(apply_int8_dot, 16)) == 2
    isa = cpu_isa(_target("sapphirerapids"))
    assert "(16, 128, 16, 2)" in _scheduled(256, 256, isa, 8, 2, strip=1).script()  # [N / 16, K / 2, 16, 2]
    assert "(8, 128, 32, 2)" in _scheduled(256, 256, isa, 8, 2).script()
    with pytest.raises(ValueError, match="not whole strips"):
        _scheduled(256, 256, isa, 8, 2, strip=4)


@pytest.mark.parametrize("mcpu", ["haswell", "znver3"])
@pytest.mark.parametrize("rows, vectors", [(4, 2), (8, 1)])
def test_avx2_takes_the_fma_form_on_the_packed_pairs(mcpu, rows, vectors):
    """Per K pair and weight vector: one 32-byte load split by one shift and one blend/and into the even and odd
    FP32 vectors (no zero-extension), two FMAs per accumulator, one prefetch (the first row's); per row two
    broadcasts, which the 4 x 2 tile (the AVX2 default) shares between its two vectors."""
    loop = hot_loop(_asm(mcpu, rows, vectors), "vfmadd")
    steps, rest = divmod(len(re.findall(r"vfmadd\d+ps\s.*%ymm", loop)), 16)
    assert steps and not rest
    splits = len(re.findall(r"vpblendw\s|vpand\s|vandps\s", loop))
    assert len(re.findall(r"vpslld\s", loop)) == splits == vectors * steps
    assert len(re.findall(r"vbroadcastss\s", loop)) == 2 * rows * steps
    assert "vpmovzx" not in loop and "vdpbf16ps" not in loop
    assert len(re.findall(r"prefetcht0\s", loop)) == vectors * steps
    assert not re.search(r"vmov\w*\s+%ymm\d+, ", loop)


@pytest.mark.parametrize("mcpu, rows, vectors", [("sapphirerapids", 2, 4), ("haswell", 2, 4), ("znver4", 2, 4),
                                                  ("znver5", 2, 4)])
def test_a_wide_small_t_tile_prefetches_every_vector_of_its_stream(mcpu, rows, vectors):
    """A decode-size tile (few rows, many vectors, as ``side_by_side`` makes it: several packed strips) prefetches
    ahead of every weight vector it loads, not only the first: one stream prefetched left the others to the
    hardware prefetchers (AVX2 FLASH logits, T = 4: 3.86 against 2.85 ms). Not on a Zen core's ``vdpbf16ps``,
    whose prefetchers do better alone in a small tile (Zen 5 prefetches from 8 rows: ``weight_prefetch``)."""
    fma = mcpu == "haswell"  # the FMA form: two per K pair
    loop = hot_loop(_asm(mcpu, rows, vectors), "vfmadd" if fma else "vdpbf16ps")
    fetched = re.findall(r"prefetcht0\s+(-?\d*)\((%\w+)\)", loop)
    steps = len(re.findall(r"vdpbf16ps\s.*%zmm|vfmadd\d+ps\s.*%ymm", loop)) // (rows * vectors * (2 if fma else 1))
    assert steps and len(fetched) == (0 if mcpu.startswith("znver") else vectors * steps)
    assert len({(int(o or 0) - 4096, r) for o, r in fetched}) == len(fetched)  # each ahead of its own vector


@pytest.mark.parametrize("mcpu, K, N, rows, vectors, match", [
    ("nehalem", 256, 256, 4, 2, "neither AVX512-BF16 nor FMA"),
    ("znver4", 48, 256, 4, 2, "K a multiple of 32"),
    ("znver4", 256, 48, 4, 2, "N of 32"),
    ("znver4", 256, 40, 4, 1, "N of 16"),
    ("haswell", 256, 36, 4, 1, "N of 8"),
])
def test_unfit_targets_and_shapes_are_refused(mcpu, K, N, rows, vectors, match):
    with pytest.raises(ValueError, match=match):
        _scheduled(K, N, cpu_isa(_target(mcpu)), rows, vectors)
