"""The int8 dot-product GEMM is bit-exact (int8 extremes included) on every x86 path this host can run, and
each target gets its instruction: ``vpmaddwd`` on AVX2 / AVX-512BW, a VNNI ``vpdpwssd`` where the target has
VNNI; shapes it cannot tile are refused before anything is built."""

import re

import numpy as np
import pytest
import tvm
from tvm import s_tir
from tvm.script import tirx as T

from mtp_tvm.passes.target import CpuIsa, cpu_isa, resolve_target
from mtp_tvm.schedule.int8_dot import apply_int8_dot

HOST = resolve_target("llvm")
# mcpu -> (the feature the host needs to run its code, register rows, column vectors)
PATHS = {"haswell": ("avx2", 4, 2), "skylake-avx512": ("avx512bw", 4, 2), "znver4": ("avx512vnni", 4, 2)}


def gemm(K: int, N: int, Q: int = 8, symbolic_rows: bool = False):
    """The production GEMM form: ``blocks * Q`` of A's m rows (m a multiple of 16) run."""

    @T.prim_func(s_tir=True)
    def gemm(a: T.handle, w: T.Buffer((N, K), "int8"), c: T.handle, blocks: T.int64):
        T.func_attr({"tir.noalias": True})
        m = T.int64()
        A = T.match_buffer(a, (m, K), "int8")
        C = T.match_buffer(c, (m, N), "int32")
        for t, n, k in T.grid(m if symbolic_rows else blocks * Q, N, K):
            with T.sblock("gemm"):
                vt, vn, vk = T.axis.remap("SSR", [t, n, k])
                with T.init():
                    C[vt, vn] = 0
                C[vt, vn] = C[vt, vn] + T.Cast("int32", A[vt, vk]) * T.Cast("int32", w[vn, vk])

    return gemm


def _build(K, N, mcpu, rows, vectors, Q=8):
    target = resolve_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    sch = s_tir.Schedule(gemm(K, N, Q))
    apply_int8_dot(sch, sch.get_sblock("gemm"), cpu_isa(target), register_rows=rows, column_vectors=vectors)
    return tvm.compile(sch.mod, target=target)


def _runs_here(mcpu):
    return bool(tvm.target.codegen.target_has_features(PATHS[mcpu][0], HOST))


def _check_exact(ex, a, w, blocks, Q=8):
    c = tvm.runtime.tensor(np.full((a.shape[0], w.shape[0]), -1, np.int32))
    ex["gemm"](tvm.runtime.tensor(a), tvm.runtime.tensor(w), c, blocks)
    rows = blocks * Q
    out = c.numpy()
    np.testing.assert_array_equal(out[:rows], a[:rows].astype(np.int64) @ w.astype(np.int64).T)
    assert (out[rows:] == -1).all()  # rows past blocks * Q are never written


@pytest.mark.parametrize("mcpu", list(PATHS))
def test_bit_exact_with_int8_extremes(mcpu):
    if not _runs_here(mcpu):
        pytest.skip(f"this host lacks {PATHS[mcpu][0]}")
    rng = np.random.default_rng(0)
    a = rng.choice(np.array([-128, 127, -127, 0, 1, -1], np.int8), (32, 256))
    w = rng.choice(np.array([-128, 127, -1], np.int8), (256, 256))
    a[0], w[0], w[1] = -128, -128, 127  # the largest products, in every column
    ex = _build(256, 256, mcpu, *PATHS[mcpu][1:])
    for blocks in (1, 2, 4):  # 8, 16 and 32 rows of one binary
        _check_exact(ex, a, w, blocks)


@pytest.mark.slow  # a 4096^2 GEMM
def test_bit_exact_at_4096():
    isa = cpu_isa(HOST)
    if isa.int8_dot is None:
        pytest.skip(f"{isa.name} has no int8 dot")
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (16, 4096), dtype=np.int8)
    w = rng.integers(-128, 128, (4096, 4096), dtype=np.int8)
    _check_exact(_build(4096, 4096, str(HOST.attrs["mcpu"]), 4, 2), a, w, blocks=1)


@pytest.mark.parametrize("mcpu, instruction, register", [
    ("haswell", "vpmaddwd", "ymm"),
    ("skylake-avx512", "vpmaddwd", "zmm"),
    ("znver4", "vpdpwssd", "zmm"),
    ("sapphirerapids", "vpdpwssd", "zmm"),
    ("alderlake", r"\{vex\}\s+vpdpwssd", "ymm"),  # AVX-VNNI
])
def test_each_target_gets_its_dot_instruction(mcpu, instruction, register):
    asm = _build(256, 256, mcpu, 4, 2).mod.inspect_source("asm")
    assert re.search(instruction + rf"\s.*%{register}", asm)
    assert "vpmulld" not in asm and "vpmaddubsw" not in asm
    assert re.search(r"prefetcht0\s+4096\(", asm)  # the weight stream, once per K step


@pytest.mark.parametrize("K, N, rows, vectors, symbolic, match", [
    (255, 256, 4, 2, False, "K a multiple of 2"),
    (256, 48, 4, 2, False, "N of 32"),
    (256, 256, 4, 2, True, "not provably a multiple"),
])
def test_untileable_shapes_are_refused(K, N, rows, vectors, symbolic, match):
    sch = s_tir.Schedule(gemm(K, N, symbolic_rows=symbolic))
    with pytest.raises(ValueError, match=match):
        apply_int8_dot(sch, sch.get_sblock("gemm"), cpu_isa(resolve_target({"kind": "llvm", "mcpu": "znver4"})),
                       register_rows=rows, column_vectors=vectors)


def test_an_isa_without_an_int8_dot_is_refused():
    sch = s_tir.Schedule(gemm(256, 256))
    with pytest.raises(ValueError, match="no 16-bit multiply-add"):
        apply_int8_dot(sch, sch.get_sblock("gemm"), CpuIsa("sse", 128, 16, False, False, None),
                       register_rows=4, column_vectors=2)
