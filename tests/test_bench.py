"""``bench`` on a tiny run: every contender timed, the figures and the JSON keys the issue names, the plot; the
FLOP and byte counts it divides by. (Figures are measured, never asserted beyond being positive.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mtp_tvm
from mtp_tvm.compiler.options import BuildSpec
from mtp_tvm.compiler.tensors import to_numpy
from mtp_tvm.passes.target import resolve_target
from mtp_tvm.spec.cases import CASES
from mtp_tvm.spec.presets import make_shapes
from mtp_tvm.support.errors import UsageError
from mtp_tvm.tools.bench import (
    BENCH_CASES,
    CONTENDERS,
    bench,
    bytes_moved,
    flops,
    gemm_dtype,
    gemm_kind,
    gemm_work,
    instruction_mix,
    kinds_used,
    peer_runner,
    roofline_peak,
)
from mtp_tvm.tools.roofline import BF16_DOT, FMA, INT8_DOT, ProbePlan
from mtp_tvm.verify.comparators import ratio_allclose

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = {"tvm", "torch_bf16", "torch_fp32", "numpy_fp32"}


@pytest.fixture(scope="module")
def tiny_logits():
    return bench(case="logits", preset="tiny", rounds=2)


def test_bench_times_every_contender(tiny_logits, tmp_path):
    d = tiny_logits.as_dict()
    assert REQUIRED | {"torch_golden"} == set(d["median_ms"])
    assert all(ms > 0 for ms in d["median_ms"].values())
    assert all(len(v) == 2 for v in d["samples_ms"].values())  # one sample per interleaved round
    assert d["peak_gflops"] > 0 and d["bandwidth_gbs"] > 0 and 0 < d["roofline_fraction"]
    assert d["gflops"]["tvm"] > 0 and d["speedup"]["tvm"] == 1.0
    tiny_logits.write_json(tmp_path / "b.json")
    assert json.loads((tmp_path / "b.json").read_text())["median_ms"].keys() >= REQUIRED
    tiny_logits.plot(tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tvm speed-up" in tiny_logits.table()


def test_bench_json_says_why(tiny_logits):
    """The ISA, the instruction mix of the kernels and the peak used are recorded next to the old keys."""
    d = json.loads(json.dumps(tiny_logits.as_dict()))
    assert {"median_ms", "peak_gflops", "peak_fraction", "roofline_fraction"} <= set(d)
    assert d["frontend"] == "tir" and {"name", "vector_bits", "fma", "bf16_dot", "int8_dot", "used"} <= set(d["isa"])
    assert d["instruction_mix"] and all(set(c) == {"fma", "vdpbf16ps", "vpmaddwd", "vpdpwssd"}
                                        for c in d["instruction_mix"].values())
    assert d["peaks"][FMA] > 0 and d["peak_gflops"] == pytest.approx(d["peaks"][d["peak_kind"]])
    assert set(d["isa"]["used"]) == kinds_used(d["instruction_mix"]) and d["peak_kind"] in (FMA, BF16_DOT)
    assert f"({d['peak_kind']}; measured peaks:" in tiny_logits.table()


@pytest.mark.parametrize("frontend", ["tir", "relax"])
@pytest.mark.parametrize("mcpu, family", [("znver4", "vdpbf16ps"), ("haswell", "fma")])
def test_instruction_mix_names_the_logits_kernels_instructions(mcpu, family, frontend):
    """A compile-only build for the CPU (it need not be this one): the GEMM kernel's assembly shows its path."""
    m = mtp_tvm.compile(case="logits", preset="tiny", frontend=frontend,
                        target={"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    mix = instruction_mix(m)
    gemm = [k for k in mix if "logits" in k or "matmul" in k]
    assert gemm and all(mix[k][family] > 0 for k in gemm)
    assert kinds_used(mix) == {BF16_DOT if family == "vdpbf16ps" else FMA}


def test_the_peak_is_that_of_the_instruction_each_gemm_runs_on():
    peaks = {FMA: 100.0, BF16_DOT: 200.0, INT8_DOT: 400.0}
    assert gemm_kind("bfloat16", {BF16_DOT}) == BF16_DOT and gemm_kind("bfloat16", {FMA}) == FMA
    assert gemm_kind("int8", {INT8_DOT, FMA}) == INT8_DOT and gemm_kind("float32", {BF16_DOT}) == FMA
    assert roofline_peak({BF16_DOT: 1e9}, peaks) == (200.0, BF16_DOT)
    assert roofline_peak({}, peaks) == (100.0, FMA)  # no GEMM (the norm): the FMA's, for the label
    peak, which = roofline_peak({BF16_DOT: 1e9, INT8_DOT: 1e9}, peaks)  # each at its own: time adds up
    assert peak == pytest.approx(2e9 / (1e9 / 200 + 1e9 / 400)) and which == "bf16_dot + int8_dot"
    assert roofline_peak({BF16_DOT: 1e9}, {FMA: 100.0}) == (100.0, "bf16_dot (no probe: fma)")
    s = make_shapes("tiny")
    assert gemm_dtype(CASES["tail"].chain[0], s) == "int8" and gemm_dtype(CASES["tail"].chain[1], s) == "bfloat16"
    assert gemm_work(CASES["tail"], s, {BF16_DOT}) == {FMA: 2 * (2 * 8 * 256 * 256), BF16_DOT: 2 * 8 * 256 * 512}
    assert gemm_work(CASES["logits"], s, {FMA}) == {FMA: flops(CASES["logits"], s, 8)}  # useful rows only


@pytest.mark.parametrize("mcpu, kinds, instruction", [("znver4", (BF16_DOT, INT8_DOT), "vdpbf16ps"),
                                                      ("haswell", (INT8_DOT,), "vpmaddwd")])
def test_dot_peak_probes_exist_where_the_target_has_the_instruction(mcpu, kinds, instruction):
    target = resolve_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    plan = ProbePlan.for_target(target)
    assert plan.dot_kinds(target) == kinds and plan.lanes == (16 if mcpu == "znver4" else 8)
    ex, ops, _ = plan.build_dot(target, kinds[0])  # compile only: this machine need not have it
    assert ops > 0 and instruction in ex.mod.inspect_source("asm")
    assert ProbePlan.for_target(resolve_target("cuda"), multiprocessors=4).dot_kinds(resolve_target("cuda")) == ()


@pytest.mark.parametrize("peer", ["torch_bf16", "torch_fp32", "numpy_fp32", "torch_golden"])
@pytest.mark.parametrize("case", BENCH_CASES)
def test_every_peer_computes_the_case(case, peer):
    """The contenders compute the same math as the golden (to BF16-level tolerance), so the race is fair."""
    c, s = CASES[case], make_shapes("tiny")
    inputs = c.make_inputs(s, 1)
    actual = np.asarray(to_numpy(peer_runner(c, peer, inputs, s)()), dtype=np.float32)
    expected = to_numpy(c.golden(inputs, s)[c.chain[-1].outputs[0].name]).astype(np.float32)
    assert ratio_allclose(atol=5e-2, rtol=5e-2, max_error_ratio=0.05)(actual, expected).passed


def test_flops_and_bytes_count_the_gemms():
    s = make_shapes("tiny")  # D=256, V=512, T=8
    assert flops(CASES["logits"], s, 16) == 2 * 16 * 256 * 512
    assert flops(CASES["tail"], s, 8) == 2 * 8 * 256 * 512 + 2 * (2 * 8 * 256 * 256)
    assert flops(CASES["norm"], s, 8) == 0
    assert flops(CASES["lm-head"], s, 8) == 2 * (s.owners * 8) * 256 * s.vocab  # selected rows, not T

    class Fake:  # bytes_moved reads only the specs
        shapes, input_specs, output_specs = s, CASES["logits"].input_specs(s), CASES["logits"].output_specs(s)

    assert bytes_moved(Fake) == 8 * 256 * 2 + 512 * 256 * 2 + 8 * 512 * 4


@pytest.mark.parametrize("kwargs", [{"case": "shared-head-logits"}, {"case": "logits", "rounds": 0},
                                    {"case": "logits", "contenders": ("numpy_fp32",)}, {"case": "logits", "cases": 1},
                                    {"spec": BuildSpec(case="lm-head", preset="tiny")}])
def test_bad_bench_arguments_are_usage_errors(kwargs):
    with pytest.raises(UsageError):
        bench(**{"preset": "tiny", **kwargs})


def test_bench_contenders_and_cases_come_from_the_stages():
    assert CONTENDERS == ("tvm", "torch_bf16", "torch_fp32", "numpy_fp32", "torch_golden")
    assert all(st.peers is not None for case in BENCH_CASES for st in CASES[case].chain)


def test_gpu_probes_build_without_a_gpu():
    fma, stream = ProbePlan.for_target(resolve_target("cuda"), multiprocessors=4).build(resolve_target("cuda"))
    assert "__global__" in fma.mod.imports[0].inspect_source() and stream.mod.imports


def test_cli_bench_writes_json_and_plot(tmp_path):
    """The command itself (in its own process: it re-executes without the OpenBLAS overrides)."""
    out = subprocess.run([sys.executable, "-m", "mtp_tvm", "bench", "--case", "norm", "--preset", "tiny",
                          "--rounds", "1", "--json", str(tmp_path / "n.json"), "--plot", str(tmp_path / "n.png")],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert out.returncode == 0, out.stderr
    d = json.loads((tmp_path / "n.json").read_text())
    assert d["case"] == "norm" and set(d["median_ms"]) >= REQUIRED and (tmp_path / "n.png").exists()
    assert set(BENCH_CASES) == {"logits", "projection", "norm", "tail"}
