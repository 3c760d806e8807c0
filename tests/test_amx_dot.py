"""The AMX blocks (BF16 on ``tdpbf16ps``, int8 on ``tdpbssd``): on a host with AMX they meet the reference (the
int8 one exactly) and a row's sums do not depend on the rows beside it (so a kernel's small-T variants stay bitwise
its general body); their assembly (checked for a Sapphire Rapids target on any host) configures the tiles once
per block, loads each weight tile once for one product and releases the tiles; only targets with AMX take them; a
trace that names an intrinsic replays in a fresh process; unfit blocks are refused before anything is built."""

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
from mtp_tvm.schedule.amx_dot import BF16_TILES, INT8_TILES, apply_amx_dot, intrinsic_name, max_tiles

HOST = resolve_target("llvm")
AMX_HERE = cpu_isa(HOST).bf16_tile and cpu_isa(HOST).int8_tile
needs_amx = pytest.mark.skipif(not AMX_HERE, reason="this host lacks AMX (or LLVM does not see it)")
DOTS = pytest.mark.parametrize("dot", [BF16_TILES, INT8_TILES], ids=lambda d: d.name)
SPR = resolve_target({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2})
BF16 = ml_dtypes.bfloat16
TESTS = Path(__file__).resolve().parent


def _scheduled(K, N, rows, tiles, target=SPR, dot=BF16_TILES):
    sch = s_tir.Schedule(gemm(K, N, Q=rows, operand=dot.operand, accumulator=dot.accumulator))
    apply_amx_dot(sch, sch.get_sblock("gemm"), cpu_isa(target), register_rows=rows, column_vectors=tiles, dot=dot)
    return sch


def _run(ex, a, w, blocks, dot):
    c = tvm.runtime.tensor(np.full((a.shape[0], w.shape[0]), -1, dot.accumulator))
    ex["gemm"](tvm.runtime.tensor(a), tvm.runtime.tensor(w), c, blocks)
    return c.numpy()


def _operands(dot, rows, k, n):
    rng = np.random.default_rng(rows)
    if dot is INT8_TILES:  # the extremes too: -128 * -128 summed over K fits int32 only exactly
        return (rng.integers(-128, 128, (32, k), dtype=np.int8), rng.integers(-128, 128, (n, k), dtype=np.int8))
    return rng.standard_normal((32, k)).astype(BF16), (rng.standard_normal((n, k)) * 0.05).astype(BF16)


@needs_amx
@DOTS
@pytest.mark.parametrize("rows, tiles", [(16, 5), (8, 4), (4, 2), (2, 1), (1, 5)])
def test_meets_the_reference_and_a_rows_sums_ignore_its_neighbours(dot, rows, tiles):
    a, w = _operands(dot, rows, 512, 320)
    ex = tvm.compile(_scheduled(512, 320, rows, tiles, HOST, dot).mod["main"], target=HOST)
    out = _run(ex, a, w, 32 // rows, dot)
    if dot is INT8_TILES:
        np.testing.assert_array_equal(out, a.astype(np.int32) @ w.astype(np.int32).T)
    else:
        np.testing.assert_allclose(out, a.astype(np.float32) @ w.astype(np.float32).T, rtol=1e-5, atol=1e-5)
    one_row = tvm.compile(_scheduled(512, 320, 1, tiles, HOST, dot).mod["main"], target=HOST)
    assert np.array_equal(out.view(np.uint32), _run(one_row, a, w, 32, dot).view(np.uint32))


def _asm(rows: int, tiles: int, dot=BF16_TILES) -> str:
    register_with_tvm()
    return tvm.compile(_scheduled(512, 320, rows, tiles, dot=dot).mod["main"], target=SPR,
                       tir_pipeline=TIR_PIPELINE).mod.inspect_source("asm")


@DOTS
@pytest.mark.parametrize("rows, tiles", [(16, 5), (1, 2)])
def test_one_weight_tile_load_per_product_and_the_tiles_configured_once_per_block(dot, rows, tiles):
    """Between a block's ``ldtilecfg`` and its ``tilerelease``: the accumulators loaded and stored once, then per
    K step one activation tile and, per accumulator, one weight tile and one product (K = 512: 16 BF16 or 8 int8
    steps, which LLVM unrolls); the tile state asked for through ``syscall`` outside the block, never per step."""
    asm = _asm(rows, tiles, dot)
    start = asm.index("\tldtilecfg")
    block = asm[start:asm.index("\ttilerelease", start)]
    steps = 512 // dot.k_step
    other = "tdpbssd" if dot is BF16_TILES else "tdpbf16ps"
    assert len(re.findall(rf"\t{dot.instruction}\s", block)) == tiles * steps and other not in asm
    assert len(re.findall(r"\ttileloadd\s", block)) == tiles + (tiles + 1) * steps
    assert len(re.findall(r"\ttilestored\s", block)) == tiles
    assert "call" not in block and "vdpbf16ps" not in asm and "vpdpwssd" not in asm
    assert len(re.findall(r"\tldtilecfg\s", asm)) == len(re.findall(r"\ttilerelease\s", asm))
    assert re.search(r"callq?\s+syscall@PLT", asm)  # outside the block (no call in it): a cold path


def test_only_targets_with_amx_take_tiles_and_unfit_blocks_are_refused():
    for mcpu in ("znver4", "cooperlake", "haswell"):
        for dot in (BF16_TILES, INT8_TILES):
            with pytest.raises(ValueError, match=f"no AMX-{dot.name.upper()} tiles"):
                _scheduled(256, 320, 16, 5, resolve_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2}), dot)
    with pytest.raises(ValueError, match="1-16 rows and 1-5 accumulator tiles"):
        _scheduled(256, 320, 16, max_tiles() + 1)
    with pytest.raises(ValueError, match="K a multiple of 32"):
        _scheduled(48, 320, 16, 5)
    with pytest.raises(ValueError, match="K a multiple of 64"):
        _scheduled(96, 320, 16, 5, dot=INT8_TILES)
    with pytest.raises(ValueError, match="N of 80"):
        _scheduled(256, 96, 16, 5)


@DOTS
def test_a_trace_naming_the_intrinsic_replays_in_a_fresh_process(dot, tmp_path):
    """The intrinsic has the block's shape, so it is registered from the trace that names it (``bisect
    --schedule-trace``, tuning records), not at import."""
    trace = str(_scheduled(256, 320, 16, 5, dot=dot).trace)
    assert intrinsic_name(dot, 16, 5, 256) in trace
    (tmp_path / "trace.py").write_text(trace)
    script = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from pathlib import Path
from tvm import s_tir
from helpers import gemm
from mtp_tvm.tools.bisect.bisection import as_apply
sch = s_tir.Schedule(gemm(256, 320, Q=16, operand={dot.operand!r}, accumulator={dot.accumulator!r}))
as_apply(Path({str(tmp_path / 'trace.py')!r}))(sch)
print("replayed" if "mtp_tvm_amx_{dot.name}_r16_c5" in sch.mod.script() else "not replayed")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "replayed", out.stderr[-2000:]
