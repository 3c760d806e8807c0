"""The AMX BF16 block: on a host with AMX-BF16 it meets the FP32 reference and a row's sums do not depend on the
rows beside it (so a kernel's small-T variants stay bitwise its general body); its assembly (checked for a
Sapphire Rapids target on any host) configures the tiles once per block, loads each weight tile once for one
``tdpbf16ps`` and releases the tiles; only targets with AMX-BF16 take it; a trace that names its intrinsic
replays in a fresh process; unfit blocks are refused before anything is built."""

import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tvm
from tvm import s_tir

from helpers import gemm
from mtp_tvm.passes.pipeline import TIR_PIPELINE, register_with_tvm
from mtp_tvm.passes.target import cpu_isa, resolve_target
from mtp_tvm.schedule.amx_dot import apply_amx_dot, intrinsic_name, max_tiles

HOST = resolve_target("llvm")
AMX_HERE = cpu_isa(HOST).bf16_tile
needs_amx = pytest.mark.skipif(not AMX_HERE, reason="this host lacks AMX-BF16 (or LLVM does not see it)")
SPR = resolve_target({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2})
BF16 = ml_dtypes.bfloat16
TESTS = Path(__file__).resolve().parent


def _scheduled(K, N, rows, tiles, target=SPR):
    sch = s_tir.Schedule(gemm(K, N, Q=rows))
    apply_amx_dot(sch, sch.get_sblock("gemm"), cpu_isa(target), register_rows=rows, column_vectors=tiles)
    return sch


def _run(ex, a, w, blocks):
    c = tvm.runtime.tensor(np.full((a.shape[0], w.shape[0]), np.nan, np.float32))
    ex["gemm"](tvm.runtime.tensor(a), tvm.runtime.tensor(w), c, blocks)
    return c.numpy()


@needs_amx
@pytest.mark.parametrize("rows, tiles", [(16, 5), (8, 4), (4, 2), (2, 1), (1, 5)])
def test_meets_the_fp32_reference_and_a_rows_sums_ignore_its_neighbours(rows, tiles):
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((32, 512)).astype(BF16)
    w = (rng.standard_normal((320, 512)) * 0.05).astype(BF16)
    ex = tvm.compile(_scheduled(512, 320, rows, tiles, HOST).mod["main"], target=HOST)
    out = _run(ex, a, w, 32 // rows)
    ref = a.astype(np.float32) @ w.astype(np.float32).T
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    one_row = tvm.compile(_scheduled(512, 320, 1, tiles, HOST).mod["main"], target=HOST)
    assert np.array_equal(out.view(np.uint32), _run(one_row, a, w, 32).view(np.uint32))


def _asm(rows: int, tiles: int) -> str:
    register_with_tvm()
    return tvm.compile(_scheduled(256, 320, rows, tiles).mod["main"], target=SPR,
                       tir_pipeline=TIR_PIPELINE).mod.inspect_source("asm")


@pytest.mark.parametrize("rows, tiles", [(16, 5), (1, 2)])
def test_one_weight_tile_load_per_tdpbf16ps_and_the_tiles_configured_once_per_block(rows, tiles):
    """Between a block's ``ldtilecfg`` and its ``tilerelease``: the accumulators loaded and stored once, then per
    K step one activation tile and, per accumulator, one weight tile and one ``tdpbf16ps`` (K = 256: 8 steps,
    which LLVM unrolls); the tile state asked for through ``syscall`` outside the block, never per step."""
    asm = _asm(rows, tiles)
    start = asm.index("\tldtilecfg")
    block = asm[start:asm.index("\ttilerelease", start)]
    steps = 256 // 32
    assert len(re.findall(r"\ttdpbf16ps\s", block)) == tiles * steps
    assert len(re.findall(r"\ttileloadd\s", block)) == tiles + (tiles + 1) * steps
    assert len(re.findall(r"\ttilestored\s", block)) == tiles
    assert "call" not in block and "vdpbf16ps" not in asm
    assert len(re.findall(r"\tldtilecfg\s", asm)) == len(re.findall(r"\ttilerelease\s", asm))
    assert re.search(r"callq?\s+syscall@PLT", asm)  # outside the block (no call in it): a cold path


def test_only_targets_with_amx_take_tiles_and_unfit_blocks_are_refused():
    for mcpu in ("znver4", "cooperlake", "haswell"):
        with pytest.raises(ValueError, match="no AMX-BF16 tiles"):
            _scheduled(256, 320, 16, 5, resolve_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2}))
    with pytest.raises(ValueError, match="1-16 rows and 1-5 accumulator tiles"):
        _scheduled(256, 320, 16, max_tiles() + 1)
    with pytest.raises(ValueError, match="K a multiple of 32"):
        _scheduled(48, 320, 16, 5)
    with pytest.raises(ValueError, match="N of 80"):
        _scheduled(256, 96, 16, 5)


def test_a_trace_naming_the_intrinsic_replays_in_a_fresh_process(tmp_path):
    """The intrinsic has the block's shape, so it is registered from the trace that names it (``bisect
    --schedule-trace``, tuning records), not at import."""
    trace = str(_scheduled(256, 320, 16, 5).trace)
    assert intrinsic_name(16, 5, 256) in trace
    (tmp_path / "trace.py").write_text(trace)
    script = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from pathlib import Path
from tvm import s_tir
from helpers import gemm
from mtp_tvm.tools.bisect.bisection import as_apply
sch = s_tir.Schedule(gemm(256, 320, Q=16))
as_apply(Path({str(tmp_path / 'trace.py')!r}))(sch)
print("tdpbf16ps" if "mtp_tvm_amx_bf16_r16_c5" in sch.mod.script() else "not replayed")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "tdpbf16ps", out.stderr[-2000:]
