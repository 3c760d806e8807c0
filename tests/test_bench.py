"""``bench`` on a tiny run: TVM and every peer in a process of its own, timed at every T of the sweep, the figures
and the JSON keys the issues name, the plot; the peers' math (torch.compile included) against the golden; the
worker processes (pids, crashes reported with their stderr, death with the parent); the FLOP and byte counts
it divides by. (Figures are measured, never asserted beyond being positive.)"""

import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest

import mtp_tvm
from helpers import REPO, slow_except
from mtp_tvm.compiler.arrays import to_numpy
from mtp_tvm.compiler.options import BuildSpec, token_counts
from mtp_tvm.contract.cases import CASES, STAGES
from mtp_tvm.contract.presets import make_shapes
from mtp_tvm.passes.target import resolve_target, usable_cores
from mtp_tvm.support.errors import UsageError
from mtp_tvm.tools.bench.bench import BENCH_CASES, PEERS, BenchOptions, bench
from mtp_tvm.tools.bench.options import (
    CASE,
    CASE_PEERS,
    COMPILE_CACHE_ENV,
    STOPWATCH_WARMUP_S,
    WARMUP_ENV,
    default_warmup,
)
from mtp_tvm.tools.bench.peer_worker import peer_runner
from mtp_tvm.tools.bench.race import compile_cache, golden_mismatch
from mtp_tvm.tools.bench.stage_peers import STAGE_PEERS
from mtp_tvm.tools.bench.worker import CLOSE_GRACE_S, OPENBLAS_SLOW_VARS, Worker, WorkerFailed
from mtp_tvm.tools.measure.peaks import BF16_DOT, BF16_TILE, FMA, INT8_DOT, INT8_TILE, ProbePlan
from mtp_tvm.tools.measure.roofline import (
    bytes_moved,
    flops,
    gemm_dtype,
    gemm_kind,
    gemm_work,
    instruction_mix,
    kinds_used,
    roofline_ms,
    roofline_peak,
)
from mtp_tvm.verify.comparators import ratio_allclose
from mtp_tvm.verify.tolerances import RatioTolerance

EAGER = ("torch_bf16", "torch_fp32", "numpy_fp32", "torch_golden")
RACED = (*EAGER, "torch_compile")  # max-autotune compiles for long on 2 cores: its own test below


@pytest.fixture(scope="module")
def tiny_logits():
    return bench(case="logits", preset="tiny", tokens=(1, 2), rounds=2, peers=RACED, api=True)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow  # over 10 s on 2 cores
def test_bench_times_tvm_and_every_peer_at_every_t(tiny_logits, tmp_path):
    d = json.loads(json.dumps(tiny_logits.as_dict()))
    assert d["isolation"] == "process" and d["threads"] == usable_cores() and d["tokens"] == [1, 2]
    assert set(d["per_tokens"]) == {"1", "2"}
    for t, f in d["per_tokens"].items():
        assert set(f["median_ms"]) == {"tvm", "tvm:api", *RACED} and f["shapes"]["tokens"] == int(t)
        assert f["median_ms"]["tvm:api"] > 0  # the public bound.run, its output checked like every contender's
        for name, ms in f["median_ms"].items():  # a figure, or None with why
            assert (ms is not None and ms > 0 and len(f["samples_ms"][name]) == 2) or f["unavailable"][name]
        assert f["median_ms"]["tvm"] > 0 and f["roofline_ms"] > 0
        peers = {n: ms for n, ms in f["median_ms"].items() if not n.startswith("tvm") and ms is not None}
        assert f["best_peer"] == min(peers, key=peers.get) and f["best_peer_ms"] == peers[f["best_peer"]]
        assert f["tvm_vs_best_peer"] == pytest.approx(f["best_peer_ms"] / f["median_ms"]["tvm"])
        timed = {n: ms for n, ms in f["median_ms"].items() if ms is not None}
        if f["roofline_beaten_by"]:  # tiny sizes live in cache: a contender may beat the DRAM roofline
            assert f["roofline_fraction"] is None and timed[f["roofline_beaten_by"]] < f["roofline_ms"]
        else:
            assert min(timed.values()) >= f["roofline_ms"]
            assert f["roofline_fraction"] == pytest.approx(f["roofline_ms"] / f["median_ms"]["tvm"])
    la = d["load_average"]
    assert la["before"] >= 0 and la["after"] >= 0 and "warning" in la and la["peak"] >= la["after"]
    assert la["unreliable"] == (max(la["before"], la["peak"]) > la["cores"])
    assert ("best peer / tvm (UNRELIABLE: load)" in tiny_logits.table()) == la["unreliable"]
    assert d["compile_seconds"]["tvm"] > 0 and set(d["compile_seconds"]["torch_compile"]) == {"1", "2"}
    assert d["compile_cache"] == os.environ["MTP_TVM_INDUCTOR_CACHE"]  # the session's shared cache (conftest)
    assert f"torch.compile from the shared inductor cache in {d['compile_cache']}, not cold" in tiny_logits.table()
    assert all(s > 0 for s in d["compile_seconds"]["torch_compile"].values())
    assert d["numpy_blas"] and d["bandwidth_gbs"] > 0 and d["peak_gflops"] > 0
    assert len(d["bandwidth_samples_gbs"]) == 2 and d["bandwidth_gbs"] == statistics.median(d["bandwidth_samples_gbs"])


@pytest.mark.slow  # tiny_logits: a bench with worker processes
def test_tvm_and_every_peer_ran_in_a_process_of_its_own_now_gone(tiny_logits):
    pids = tiny_logits.workers
    assert set(pids) == {"tvm", *RACED}
    assert len(set(pids.values())) == len(pids) and os.getpid() not in pids.values()
    assert not any(_alive(pid) for pid in pids.values())  # no orphan outlives the bench


@pytest.mark.slow  # tiny_logits: a bench with worker processes
def test_bench_table_json_and_plot(tiny_logits, tmp_path):
    text = tiny_logits.table()
    for word in ("T=1", "T=2", "torch_compile", "roofline", "tvm / roofline", "best peer / tvm", "compile s",
                 "load average", "own process"):
        assert word in text
    tiny_logits.write_json(tmp_path / "b.json")
    assert json.loads((tmp_path / "b.json").read_text())["per_tokens"]["2"]["median_ms"]["tvm"] > 0
    tiny_logits.plot(tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # two TVM builds and a torch.export
def test_bench_times_another_frontend_in_the_same_rounds():
    """``--compare-frontends``: the case imported from torch.export, timed beside the hand-written TIR build."""
    r = bench(case="logits", preset="tiny", frontend="tir", compare_frontends=("torch", "tir"), tokens=(1, 16),
              rounds=2, peers=("torch_bf16",))
    for f in r.per_tokens.values():
        assert list(f.median_ms) == ["tvm", "tvm:frontend=torch", "torch_bf16"]
        assert f.median_ms["tvm:frontend=torch"] > 0 and len(f.samples_ms["tvm:frontend=torch"]) == 2
    assert r.compile_seconds["tvm:frontend=torch"] > 0 and "tvm:frontend=torch" in r.table()


@pytest.mark.slow  # tiny_logits: a bench with worker processes
def test_bench_json_says_why(tiny_logits):
    """The ISA, the instruction mix of the kernels and the peak used are recorded next to the figures (and no
    profile, which only ``profile=`` asks for)."""
    d = json.loads(json.dumps(tiny_logits.as_dict()))
    assert d["profile"] is None
    assert d["frontend"] == "tir" and {"name", "vector_bits", "fma", "bf16_dot", "int8_dot", "bf16_tile",
                                       "int8_tile", "used"} <= set(d["isa"])
    assert d["instruction_mix"] and all(set(c) == {"fma", "vdpbf16ps", "vpmaddwd", "vpdpwssd", "tdpbf16ps", "tdpbssd"}
                                        for c in d["instruction_mix"].values())
    assert d["peaks"][FMA] > 0 and d["peak_gflops"] == pytest.approx(d["peaks"][d["peak_kind"]])
    assert set(d["isa"]["used"]) == kinds_used(d["instruction_mix"]) and d["peak_kind"] in (FMA, BF16_DOT, BF16_TILE)
    assert (d["peak_kind"] == BF16_TILE) == d["isa"]["bf16_tile"] == (BF16_TILE in d["peaks"])  # an AMX host
    assert f"({d['peak_kind']}; measured peaks:" in tiny_logits.table()


@pytest.mark.parametrize("frontend", slow_except(["tir", "relax"], {"tir"}))  # a cross-ISA build each, 1-2 s
@pytest.mark.parametrize("mcpu, family", slow_except([("znver4", "vdpbf16ps"), ("haswell", "fma"),
                                                      ("sapphirerapids", "tdpbf16ps")], {("znver4", "vdpbf16ps")}))
def test_instruction_mix_names_the_logits_kernels_instructions(mcpu, family, frontend):
    """A compile-only build for the CPU (it need not be this one): the GEMM kernel's assembly shows its path."""
    m = mtp_tvm.compile(case="logits", preset="tiny", frontend=frontend,
                        target={"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    mix = instruction_mix(m)
    gemm = [k for k in mix if "logits" in k or "matmul" in k]
    assert gemm and all(mix[k][family] > 0 for k in gemm)
    assert kinds_used(mix) == {{"vdpbf16ps": BF16_DOT, "tdpbf16ps": BF16_TILE}.get(family, FMA)}


def test_the_peak_is_that_of_the_instruction_each_gemm_runs_on():
    peaks = {FMA: 100.0, BF16_DOT: 200.0, INT8_DOT: 400.0}
    assert gemm_kind("bfloat16", {BF16_DOT}) == BF16_DOT and gemm_kind("bfloat16", {FMA}) == FMA
    assert gemm_kind("bfloat16", {BF16_TILE, BF16_DOT}) == BF16_TILE  # an AMX kernel beside a vdpbf16ps one
    assert gemm_kind("int8", {INT8_TILE, INT8_DOT, BF16_TILE}) == INT8_TILE
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


def test_the_roofline_time_is_the_longer_of_moving_and_computing():
    assert roofline_ms(0.0, 2e9, 100.0, 20.0) == pytest.approx(100.0)  # 2 GB at 20 GB/s: 100 ms, no FLOPs
    assert roofline_ms(1e12, 1e6, 100.0, 20.0) == pytest.approx(1e4)  # 1 TFLOP at 100 GFLOP/s: 10 s


@pytest.mark.parametrize("mcpu, kinds, instruction", [("znver4", (BF16_DOT, INT8_DOT), "vdpbf16ps"),
                                                      ("haswell", (INT8_DOT,), "vpmaddwd")])
def test_dot_peak_probes_exist_where_the_target_has_the_instruction(mcpu, kinds, instruction):
    target = resolve_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    plan = ProbePlan.for_target(target)
    assert plan.dot_kinds(target) == kinds and plan.lanes == (16 if mcpu == "znver4" else 8)
    ex, ops, _ = plan.build_dot(target, kinds[0])  # compile only: this machine need not have it
    assert ops > 0 and instruction in ex.mod.inspect_source("asm")
    assert ProbePlan.for_target(resolve_target("cuda"), multiprocessors=4).dot_kinds(resolve_target("cuda")) == ()


@pytest.mark.parametrize("case, peer", slow_except(  # torch.compile compiles for seconds
    [(c, p) for c in BENCH_CASES for p in RACED] + [("projection", "torch_compile_max_autotune")],
    {(c, p) for c in BENCH_CASES for p in EAGER}))
def test_every_peer_computes_the_case(case, peer):
    """The peers compute the same math as the golden (to BF16-level tolerance), so the race is fair; the
    compiled peers too (max-autotune on the projection: its quantisation and two GEMMs)."""
    c, s = CASES[case], make_shapes("tiny", 2)
    inputs = c.make_inputs(s, 1)
    actual = np.asarray(to_numpy(peer_runner(c, peer, inputs, s)()), dtype=np.float32)
    expected = to_numpy(c.golden(inputs, s)[c.chain[-1].outputs[0].name]).astype(np.float32)
    assert ratio_allclose(RatioTolerance(atol=5e-2, rtol=5e-2, max_error_ratio=0.05))(actual, expected).passed


def test_compiled_peers_compile_cold_unless_a_shared_cache_is_named(monkeypatch, tmp_path):
    monkeypatch.delenv(COMPILE_CACHE_ENV, raising=False)
    own = compile_cache(tmp_path, "torch_compile")
    assert own == {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-torch_compile"),
                   "TRITON_CACHE_DIR": str(tmp_path / "triton-torch_compile")}
    monkeypatch.setenv(COMPILE_CACHE_ENV, str(tmp_path / "shared"))
    shared = compile_cache(tmp_path, "torch_compile")
    assert shared == {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "shared/inductor"),
                      "TRITON_CACHE_DIR": str(tmp_path / "shared/triton")}
    monkeypatch.setenv(COMPILE_CACHE_ENV, " ")
    with pytest.raises(UsageError, match=f"{COMPILE_CACHE_ENV} is set but empty"):
        compile_cache(tmp_path, "torch_compile")


def test_a_peer_that_computes_garbage_is_not_timed():
    expected = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
    assert golden_mismatch(expected + 1e-3, expected, "at T=2") is None
    why = golden_mismatch(np.zeros_like(expected), expected, "at T=2")
    assert why.startswith("wrong result at T=2") and "off the golden" in why


def test_flops_and_bytes_count_the_gemms():
    s = make_shapes("tiny")  # D=256, V=512, T=8
    assert flops(CASES["logits"], s, 16) == 2 * 16 * 256 * 512
    assert flops(CASES["tail"], s, 8) == 2 * 8 * 256 * 512 + 2 * (2 * 8 * 256 * 256)
    assert flops(CASES["norm"], s, 8) == 0
    assert flops(CASES["lm-head"], s, 8) == 2 * (s.owners * 8) * 256 * s.vocab  # selected rows, not T
    assert bytes_moved(CASES["logits"], s) == 8 * 256 * 2 + 512 * 256 * 2 + 8 * 512 * 4
    assert bytes_moved(CASES["logits"], make_shapes("tiny", 1)) == 256 * 2 + 512 * 256 * 2 + 512 * 4


@pytest.mark.parametrize("kwargs", [{"case": "shared-head-logits"}, {"case": "logits", "rounds": 0},
                                    {"case": "logits", "peers": ("numpy", )}, {"case": "logits", "peers": ("tvm", )},
                                    {"case": "logits", "cases": 1},
                                    {"case": "logits", "tokens": (1, 0)}, {"case": "logits", "threads": 0},
                                    {"spec": BuildSpec(case="lm-head", preset="tiny")}, {"case": "logits", "api": 1},
                                    {"case": "logits", "api": True, "rpc": ("host:9190", "mtp")}])
def test_bad_bench_arguments_are_usage_errors(kwargs):
    with pytest.raises(UsageError):
        bench(**{"preset": "tiny", **kwargs})


def test_bench_options_read_the_sweep_and_the_peers():
    assert token_counts("1,2,4,8,16") == (1, 2, 4, 8, 16) and token_counts("8") == 8  # a list of one is that T
    with pytest.raises(UsageError, match="comma list"):
        token_counts("1,,2")
    o = BenchOptions(tokens=4, peers=("torch_compile", "numpy_fp32")).for_kind(CASE)
    assert o.tokens == (4,) and o.peers == ("numpy_fp32", "torch_compile")  # in PEERS' order; TVM always runs
    assert BenchOptions(tokens=(2, 1, 2)).tokens == (2, 1)


def test_the_warm_up_is_a_stopwatchs_unless_set_and_a_bad_one_is_named(monkeypatch):
    monkeypatch.delenv(WARMUP_ENV)
    assert default_warmup() == STOPWATCH_WARMUP_S == BenchOptions().warmup == 1.5
    monkeypatch.setenv(WARMUP_ENV, "0.25")
    assert BenchOptions().warmup == 0.25 and BenchOptions(warmup=2).warmup == 2
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(WARMUP_ENV, bad)
        with pytest.raises(UsageError, match=f"{WARMUP_ENV} must be a number in \\[0, 60\\]"):
            BenchOptions()
    with pytest.raises(UsageError, match="warmup must be a number of seconds"):
        BenchOptions(warmup=-0.5)
    assert BenchOptions(warmup=0.2).warmup == 0.2  # given, the variable is not read


def test_a_bad_warm_up_variable_fails_bench_alone_in_one_line(monkeypatch, capsys):
    from mtp_tvm.cli import main

    monkeypatch.setenv(WARMUP_ENV, "soon")
    with pytest.raises(SystemExit) as e:  # the command line is declared without reading it
        main(["dumps", "--help"])
    assert e.value.code == 0
    capsys.readouterr()
    assert main(["bench", "--case", "norm", "--preset", "tiny", "--peers", "", "--rounds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"mtp-tvm: error: {WARMUP_ENV} must be a number in [0, 60] (seconds), got 'soon'"


def test_bench_peers_and_cases_come_from_the_stages():
    assert tuple(PEERS) == (*EAGER, "torch_compile", "torch_compile_max_autotune") == CASE_PEERS  # named once
    assert all(st.name in STAGE_PEERS for case in BENCH_CASES for st in CASES[case].chain)
    assert set(STAGE_PEERS) <= set(STAGES) and "lm_head" not in STAGE_PEERS  # keyed by stage; the LM head is not raced
    assert set(BENCH_CASES) == {"logits", "projection", "norm", "tail"}


def test_gpu_probes_build_without_a_gpu():
    cuda = resolve_target("cuda")
    plan = ProbePlan.for_target(cuda, multiprocessors=4)
    fma, stream = plan.build_fma(cuda), plan.build_stream(cuda)
    assert "__global__" in fma.mod.imports[0].inspect_source() and stream.mod.imports


@pytest.mark.slow  # over 10 s on 2 cores
def test_cli_bench_sweeps_t_and_writes_json_and_plot(tmp_path, prefork):
    """The command itself, in its own process."""
    out = subprocess.run([*prefork.python, "-m", "mtp_tvm", "bench", "--case", "norm", "--preset", "tiny",
                          "--rounds", "1", "--tokens", "1,2", "--peers", "torch_bf16", "--threads", "1",
                          "--json", str(tmp_path / "n.json"), "--plot", str(tmp_path / "n.png")],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert out.returncode == 0, out.stderr
    d = json.loads((tmp_path / "n.json").read_text())
    assert d["case"] == "norm" and d["threads"] == 1 and set(d["per_tokens"]) == {"1", "2"}
    assert set(d["per_tokens"]["2"]["median_ms"]) == {"tvm", "torch_bf16"} and (tmp_path / "n.png").exists()
    assert "bench: round 1 of 1" in out.stderr  # the progress, apart from the table
    assert out.stdout.splitlines()[-1].startswith("time: ") and " + build " in out.stdout.splitlines()[-1]


@pytest.mark.slow  # over 10 s on 2 cores
def test_bench_times_a_prebuilt_artifact_with_tvms_runtime_alone(compiled, tmp_path):
    """``bench --artifact``: TVM runs the artifact as built (no compiler: TVM_USE_RUNTIME_LIB=1), its
    roofline the memory term with a device copy's bandwidth; the manifest says the case and sizes."""
    from mtp_tvm.artifact import export

    folder = export.export(compiled("logits", "tir"), tmp_path / "a").path
    out = subprocess.run([sys.executable, "-m", "mtp_tvm", "bench", "--artifact", str(folder), "--rounds", "1",
                          "--tokens", "1,3", "--peers", "torch_bf16", "--threads", "1",
                          "--json", str(tmp_path / "a.json")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO), "TVM_USE_RUNTIME_LIB": "1"})
    assert out.returncode == 0, out.stderr
    d = json.loads((tmp_path / "a.json").read_text())
    assert d["case"] == "logits" and d["preset"] == "tiny" and d["peak_gflops"] is None
    assert d["probes"].startswith("copy: ") and d["bandwidth_gbs"] > 0
    for t in ("1", "3"):
        f = d["per_tokens"][t]
        assert f["median_ms"]["tvm"] > 0 and f["median_ms"]["torch_bf16"] > 0
        assert f["roofline_ms"] == pytest.approx(f["bytes"] / d["bandwidth_gbs"] / 1e6)
    assert "no compute peak measured (a prebuilt artifact" in out.stdout


@pytest.mark.parametrize("argv, message", [
    (["--case", "logits"], "--artifact takes --case from the artifact's manifest"),
    (["--target", "cuda"], "--artifact takes --target from the artifact's manifest"),
    (["--compare-schedules", "none"], "compare_schedules needs a build"),
    (["--compare-frontends", "torch"], "compare_frontends needs a build"),
])
def test_bench_artifact_refuses_build_flags(argv, message, capsys, tmp_path):
    from mtp_tvm.cli import main

    assert main(["bench", "--artifact", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_an_unknown_compare_schedule_is_named_by_the_apis_keyword():
    """The CLI names its flag (``--compare-schedules: ...``, test_reliability); the API its keyword."""
    with pytest.raises(UsageError, match=r"^compare_schedules: unknown schedule 'fastest' for target llvm"):
        bench(case="logits", preset="tiny", compare_schedules=("none", "fastest"))


def test_bench_api_takes_an_artifact_or_a_spec_not_both(tmp_path):
    with pytest.raises(UsageError, match="an artifact's manifest says what it is; drop case"):
        bench(case="logits", artifact=str(tmp_path))
    with pytest.raises(UsageError, match="profile needs a build"):
        BenchOptions(artifact=str(tmp_path), profile=True)


@pytest.mark.parametrize("argv, message", [
    (["--tokens", "1,x"], "--tokens takes T or a comma list"),
    (["--tokens", "0"], "tokens must be an integer"),
    (["--peers", "torch_bf16,pytorch"], "unknown peer 'pytorch'"),
    (["--threads", "0"], "threads must be an integer >= 1"),
    (["--compare-frontends", "torch,onnx"], "compare_frontends: unknown frontend 'onnx'; choose from relax, tir"),
    (["--threads", "1000"], "threads must be at most the"),  # 1000 threads would hang the process at exit
])
def test_cli_bench_user_errors_are_one_line(argv, message, capsys):
    from mtp_tvm.cli import main

    assert main(["bench", "--case", "logits", "--preset", "tiny", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


# ---- the worker processes ---------------------------------------------------------------------------------

JOB = '''
import os, signal, sys, time

class Job:
    """A stand-in peer: it opens, prints, crashes or sleeps on request."""

    def open(self):
        return self

    def crash(self):
        print("about to crash", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    def hang(self):
        time.sleep(60)

    def environment(self, names):
        return {n: os.environ.get(n) for n in names}

    def imported_for_peers(self, names):
        """Which of ``names`` a peer's worker holds once it has imported what unpickling a peer's job imports."""
        import mtp_tvm.tools.bench.peer_worker  # noqa: F401
        return [n for n in names if n in sys.modules]

    def compiler(self, temp, trap):
        """A stand-in compiler in the worker's group: it removes its temp file on SIGTERM (or ignores it)."""
        import subprocess
        script = f"touch {temp}; trap {trap!r} TERM; while :; do sleep 0.05; done"
        subprocess.Popen(["sh", "-c", script])
        while not os.path.exists(temp):
            time.sleep(0.01)
'''


@pytest.fixture
def job_module(tmp_path, monkeypatch):
    (tmp_path / "bench_test_job.py").write_text(textwrap.dedent(JOB))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(tmp_path), os.environ.get("PYTHONPATH")))))
    import bench_test_job

    return bench_test_job


def test_a_worker_runs_without_the_hosts_openblas_overrides(job_module, tmp_path, monkeypatch):
    """numpy's OpenBLAS reads them when the numpy peer's worker imports it: that worker never sees them, while
    the bench process itself (and every other command) keeps its environment."""
    for var in OPENBLAS_SLOW_VARS:
        monkeypatch.setenv(var, "1")
    w = Worker("numpy_fp32", job_module.Job(), 1, tmp_path)
    try:
        w.opened()
        seen = w.call("environment", (*OPENBLAS_SLOW_VARS, "OPENBLAS_NUM_THREADS"))
    finally:
        w.close()
    assert seen == {**dict.fromkeys(OPENBLAS_SLOW_VARS), "OPENBLAS_NUM_THREADS": "1"}
    assert all(os.environ[var] == "1" for var in OPENBLAS_SLOW_VARS)


def test_a_peers_worker_never_imports_tvm(job_module, tmp_path):
    """TVM imports torch as well: about 2 s of CPU in each of the six peers' workers before any work, when
    reading the inputs' ``.npz`` files went through ``compiler.tensors``."""
    w = Worker("numpy_fp32", job_module.Job(), 1, tmp_path)
    try:
        w.opened()
        assert w.call("imported_for_peers", ("tvm", "tvm_ffi", "torch")) == ["torch"]
    finally:
        w.close()


@pytest.mark.slow  # over 10 s on 2 cores
def test_a_crashed_or_silent_worker_is_reported_with_its_stderr_not_waited_for(job_module, tmp_path):
    w = Worker("crashy", job_module.Job(), 1, tmp_path)
    assert w.opened() == w.pid != os.getpid()
    with pytest.raises(WorkerFailed, match=r"crashy worker exited with code -9(.|\n)*about to crash"):
        w.call("crash")
    assert not _alive(w.pid)
    w = Worker("sleepy", job_module.Job(), 1, tmp_path)
    w.opened()
    t0 = time.monotonic()
    with pytest.raises(WorkerFailed, match="sleepy worker gave no answer in 1 s"):
        w.call("hang", timeout=1)
    assert time.monotonic() - t0 < 10 and not _alive(w.pid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@pytest.mark.slow  # a worker process (imports mtp_tvm)
@pytest.mark.parametrize("trap", ["rm -f {temp}; exit 0", ""])
def test_closing_a_worker_terms_its_group_first_so_a_compiler_cleans_up_then_kills(job_module, tmp_path, trap):
    """SIGTERM reaches the compiler the worker runs, which removes its temp file (no litter in $TMPDIR); one that
    ignores SIGTERM is killed after the grace."""
    temp = tmp_path / "ccXXXX.s"
    w = Worker("compiling", job_module.Job(), 1, tmp_path)
    w.opened()
    w.call("compiler", str(temp), trap.format(temp=temp))
    t0 = time.monotonic()
    w.close()
    seconds = time.monotonic() - t0
    assert not _alive(w.pid)
    import psutil

    def group_alive():
        return [p for p in psutil.process_iter(["status"]) if p.info["status"] != psutil.STATUS_ZOMBIE
                and _pgid(p.pid) == w.pid]
    assert not group_alive()  # nothing of the group is left running
    if trap:
        assert not temp.exists() and seconds < CLOSE_GRACE_S
    else:  # ignored SIGTERM: killed at the end of the grace, its file left (what SIGKILL alone always did)
        assert temp.exists() and seconds >= CLOSE_GRACE_S


@pytest.mark.slow  # over 10 s on 2 cores
def test_a_worker_dies_with_its_parent_even_a_killed_one(job_module, tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from pathlib import Path
        from bench_test_job import Job
        from mtp_tvm.tools.bench.worker import Worker
        w = Worker("orphan", Job(), 1, Path({str(tmp_path)!r}))
        print(w.opened(), flush=True)
        w.call("hang")
    """)], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    assert _alive(pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_a_contender_faster_than_the_roofline_makes_it_a_wrong_probe_not_a_fraction():
    """A roofline some contender beats is the probe's error: no fraction over 100 %, the table and notes say so."""
    from mtp_tvm.tools.bench.result import tokens_figures

    case, s = CASES["logits"], make_shapes("tiny", 1)
    bandwidth = 10.0  # GB/s: the roofline of the tiny logits' bytes at 10 GB/s
    roof = bytes_moved(case, s) / bandwidth / 1e6
    fast = tokens_figures(case, s, ["tvm", "torch_bf16"], {"tvm": [roof * 2], "torch_bf16": [roof / 2]}, {},
                          None, bandwidth, set())
    assert fast.roofline_beaten_by == "torch_bf16" and fast.roofline_fraction is None
    slow = tokens_figures(case, s, ["tvm", "torch_bf16"], {"tvm": [roof * 2], "torch_bf16": [roof * 4]}, {},
                          None, bandwidth, set())
    assert slow.roofline_beaten_by is None and slow.roofline_fraction == pytest.approx(0.5)


def test_the_read_probe_is_the_fastest_of_its_shapes_and_sums_right():
    import dataclasses

    from mtp_tvm.tools.measure.peaks import StreamProbe

    llvm = resolve_target("llvm")
    plan = dataclasses.replace(ProbePlan.for_target(llvm), stream_bytes=1 << 20)
    shapes = plan.stream_shapes()
    assert len(shapes) > 1 and shapes[0].streams == 1 and {s.streams for s in shapes} == {1, 2, 4, 8, 16}
    probe = StreamProbe(llvm, plan)
    assert set(probe.raced) == {s.describe() for s in shapes} and probe.chosen in shapes
    assert probe.raced[probe.chosen.describe()] == max(probe.raced.values()) and probe.gbs() > 0
    _, a, out = probe._run
    assert np.all(out.numpy() == plan.stream_steps(probe.chosen))  # every lane summed its ones


def test_the_copy_probe_copies_as_much_as_the_read_probe_reads_on_a_cpu():
    """1 GiB took 1-6 s to fill for the same GB/s (docs/benchmarks.md); a GPU keeps 1 GiB."""
    import tvm

    from mtp_tvm.tools.measure.peaks import CopyProbe

    probe = CopyProbe(tvm.cpu())
    assert probe.mib << 20 == ProbePlan.for_target(resolve_target("llvm")).stream_bytes and probe.gbs() > 0


def test_the_bandwidth_probes_read_the_cases_working_set():
    """Where the last-level cache is large (480 MiB here once), the rate depends on the bytes read: a 256 MiB probe
    read 33 GB/s while the 132 MB logits weight streamed at 50+, so the probes read what the case moves."""
    import tvm

    from mtp_tvm.tools.bench.bench import _plan
    from mtp_tvm.tools.measure.peaks import READ_BYTES_RANGE, CopyProbe
    from mtp_tvm.tools.measure.roofline import bytes_moved

    llvm = resolve_target("llvm")
    low, high = READ_BYTES_RANGE
    assert [ProbePlan.for_target(llvm, read_bytes=b).stream_bytes for b in (1e3, 100e6, 1e12)] == [low, 100e6, high]
    plan = _plan(None, BenchOptions(tokens=(1, 16)).for_kind(CASE), None,
                 {"case": "logits", "preset": "flash", "vocab_shard": 16160})
    assert plan.read_bytes == bytes_moved(plan.case, plan.shapes[16]) > 130e6  # the weight, at the largest T
    assert CopyProbe(tvm.cpu(), read_bytes=40 << 20).mib == 20  # source and destination: the working set


def test_the_read_probes_shapes_share_one_buffer(monkeypatch):
    """Seven buffers of 256 MiB each held 1.8 GB at once, and a profile in a loop grew to 8 GB and 16 s a call."""
    import dataclasses

    import numpy as np
    import tvm

    from mtp_tvm.tools.measure import peaks

    llvm = resolve_target("llvm")
    plan = dataclasses.replace(ProbePlan.for_target(llvm), stream_bytes=1 << 20)
    allocated, tensor, advised = [], tvm.runtime.tensor, peaks.huge_page_empty
    monkeypatch.setattr(tvm.runtime, "tensor", lambda a, *args: allocated.append(a.nbytes) or tensor(a, *args))
    monkeypatch.setattr(peaks, "huge_page_empty",  # the probe's buffer where weights go on huge pages (no AMX)
                        lambda shape, dtype: allocated.append(np.prod(shape) * np.dtype(dtype).itemsize)
                        or advised(shape, dtype))
    peaks.StreamProbe(llvm, plan)
    assert [n for n in allocated if n > 1 << 16] == [plan.stream_bytes]  # the shapes' sums are the small rest


@pytest.mark.slow  # a bench with a TVM worker
def test_debugging_options_reach_tvms_build_and_an_artifact_refuses_them(tmp_path, capsys):
    """``bench --disable-pass``/``--dump-passes``: the debugging options of every build-like verb build TVM's
    contender; an artifact is built already, so they are refused there, not ignored."""
    from mtp_tvm.cli import main

    dumps = tmp_path / "dumps"
    assert main(["bench", "--case", "logits", "--preset", "tiny", "--peers", "", "--rounds", "1",
                 "--disable-pass", "FoldConstant", "--dump-passes", str(dumps)]) == 0
    runs = [p for p in dumps.iterdir() if p.is_dir()]
    assert len(runs) == 1 and (runs[0] / "complete").exists()
    assert json.loads((runs[0] / "index.json").read_text())["gate"]["disabled"] == ["FoldConstant"]
    capsys.readouterr()
    assert main(["build", "--case", "logits", "--preset", "tiny", "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert main(["bench", "--artifact", str(tmp_path / "a"), "--disable-pass", "FoldConstant"]) == 2
    assert "debugging options (how TVM builds) cannot apply" in capsys.readouterr().err


def _host_has(flag: str) -> bool:
    with open("/proc/cpuinfo") as f:
        return flag in f.read().split()


INTEL_HOST = _host_has("GenuineIntel")  # MKL's verbose header names its kernels' ISA on Intel CPUs only


def test_mkl_that_names_no_isa_is_seen_as_run_with_its_isa_unknown():
    """On an AMD CPU MKL's verbose header names no ISA: MKL ran (it is not left out), its ISA is not guessed."""
    from mtp_tvm.tools.bench.peer_isa import _mkl_seen

    line = "MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture {} lp64 gnu_thread"
    intel = line.format("Intel(R) Advanced Vector Extensions 512 (Intel(R) AVX-512) enabled processors,")
    assert _mkl_seen([intel, "MKL_VERBOSE SGEMM(N,N,256,64,256) 4.31ms"])[0] == "avx512"
    assert _mkl_seen([line.format("Intel(R) Architecture processors, Lnx 2.60GHz")]) == (
        None, "MKL's kernels (its header names no ISA on this CPU)")
    assert _mkl_seen([]) is None


def test_a_peer_reads_the_isa_of_the_code_it_ran():
    """ATen's dispatch level, and oneDNN's or MKL's kernels as their verbose lines name them during the call."""
    import torch
    import torch.nn.functional as F

    from mtp_tvm.tools.bench.peer_isa import ISAS, TORCH_LIBRARIES, ran_isa

    x, w = torch.randn(8, 256), torch.randn(512, 256)
    ran = ran_isa([lambda: F.linear(x, w), lambda: F.linear(x.bfloat16(), w.bfloat16())], TORCH_LIBRARIES, [])
    assert ran["name"] in ISAS and ran["seen"]["aten"][1].startswith("dispatch ")
    assert all(isa in (*ISAS, None) and what for isa, what in ran["seen"].values())


@pytest.mark.slow  # three peers' workers
@pytest.mark.skipif(not _host_has("avx2"), reason="needs an AVX2 host")
def test_an_avx2_builds_peers_run_avx2_code_in_every_library(tmp_path):
    from mtp_tvm.tools.bench.bench import _plan, _write_inputs
    from mtp_tvm.tools.bench.peer_isa import peer_env
    from mtp_tvm.tools.bench.peer_worker import PeerJob

    plan = _plan(None, BenchOptions(tokens=(1,)).for_kind(CASE), None, {"case": "tail", "preset": "tiny"})
    files = _write_inputs(plan, tmp_path).files
    for peer, libraries in (("torch_bf16", {"aten"}), ("torch_fp32", {"aten", "mkl"}),
                            ("numpy_fp32", {"openblas", "numpy"})):
        w = Worker(peer, PeerJob(peer, "tail", plan.shapes, files, "cpu", 1, None), 1, tmp_path, peer_env("avx2"))
        try:
            w.opened()
            ran = w.call("setup").details["isa"]
        finally:
            w.close()
        assert ran["name"] == "avx2" and libraries <= set(ran["seen"]), (peer, ran)
        assert all(isa in ("sse", "avx2") or (lib, isa, INTEL_HOST) == ("mkl", None, False)
                   for lib, (isa, _) in ran["seen"].items()), (peer, ran)


@pytest.mark.slow  # a bench
@pytest.mark.skipif(not (_host_has("avx512f") and INTEL_HOST),
                    reason="needs an Intel host with wider code than AVX2 (where MKL names the ISA it ran)")
def test_a_peer_held_to_avx2_that_ran_wider_code_is_not_timed(monkeypatch):
    """ATEN_CPU_CAPABILITY alone leaves torch's FP32 GEMM on MKL's AVX-512 kernels: that figure is not raced."""
    from mtp_tvm.tools.bench import peer_isa

    monkeypatch.setitem(peer_isa.PEER_ISA_ENV, "avx2", {"ATEN_CPU_CAPABILITY": "avx2"})
    r = bench(case="logits", preset="tiny", tokens=1, rounds=1, peers=("torch_fp32", "numpy_fp32"),
              target='{"kind":"llvm","mcpu":"haswell","num-cores":2}')
    why = r.per_tokens[1].unavailable
    assert r.isa["name"] == r.peers_held_to == "avx2" and r.isa_of("tvm") == "avx2"
    assert "ran avx512 code under an avx2 build: mkl avx512" in why["torch_fp32"]
    assert r.per_tokens[1].median_ms["torch_fp32"] is None and "torch_fp32" in r.peer_isa


@pytest.mark.slow  # a tiny bench
def test_the_tail_races_at_t_16():
    """T = 16 through the whole race: the tail's build holds the projection's, the norms' and the logits' kernels
    (every peer's math at every case: ``test_every_peer_computes_the_case``)."""
    r = bench(case="tail", preset="tiny", tokens=(8, 16), rounds=1, peers=("torch_bf16",))
    assert r.tokens == [8, 16] and all(r.per_tokens[t].median_ms["torch_bf16"] > 0 for t in (8, 16))
    assert "T=16" in r.table()


PLAIN_STOPWATCH = textwrap.dedent('''
    """A user's stopwatch: the torch_bf16 peer alone in a fresh process, warmed 1.5 s, then batches of about
    50 ms timed by time.perf_counter; prints the median ms per call."""
    import statistics, sys, time
    import torch
    from mtp_tvm.compiler.arrays import to_numpy
    from mtp_tvm.compiler.options import BuildSpec
    from mtp_tvm.contract.cases import get_case
    from mtp_tvm.tools.bench.peer_worker import as_torch, peer_runner

    torch.set_num_threads(int(sys.argv[1]))
    case, s = get_case("logits"), BuildSpec(**eval(sys.argv[2])).shapes()
    run = peer_runner(case, "torch_bf16", {k: as_torch(to_numpy(v)) for k, v in case.make_inputs(s, 0).items()}, s)
    end = time.perf_counter() + 1.5
    while time.perf_counter() < end:
        run()
    t0 = time.perf_counter()
    run()
    calls, ms = max(1, round(0.05 / (time.perf_counter() - t0))), []
    for _ in range(15):
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        ms.append((time.perf_counter() - t0) / calls * 1e3)
    print(statistics.median(ms))
''')
STOPWATCH_CASE = {"case": "logits", "preset": "flash", "vocab_shard": 1024, "tokens": 8}  # ~0.35 ms a call
STOPWATCH_BAND = 1.2  # bench within [fastest plain / BAND, slowest plain * BAND]: see docs/benchmarks.md, issue 42
STOPWATCH_TRIES = 3  # another machine's burst of load hits one side: a method's flaw fails every try


def _plain_stopwatch_ms(threads: int) -> float:
    env = {**os.environ, **dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS"), str(threads)),
           "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    return float(subprocess.run([sys.executable, "-c", PLAIN_STOPWATCH, str(threads), repr(STOPWATCH_CASE)],
                                env=env, capture_output=True, text=True, check=True).stdout)


@pytest.mark.slow  # a bench and two plain scripts a try, 25-70 s
@pytest.mark.timing  # run alone: another worker's load moves the two timings differently (1.5-2.9x in CI)
def test_the_bench_times_a_peer_as_a_plain_stopwatch_does():
    """The method, not the speed: bench's median for torch eager is what a plain perf_counter loop in a fresh
    process with the same threads measures, one just before and one just after it (a shared machine's speed
    drifts by 1.3-1.6x within a minute: the two bracket it). Without the warm-up, or with the previous worker's
    pool spinning into the batch, bench's figure leaves the band (docs/benchmarks.md, issue 42)."""
    tries = []
    for _ in range(STOPWATCH_TRIES):
        before = _plain_stopwatch_ms(usable_cores())
        r = bench(**STOPWATCH_CASE, rounds=3, peers=("torch_bf16",), warmup=STOPWATCH_WARMUP_S)
        assert r.threads == usable_cores()
        plain = sorted((before, _plain_stopwatch_ms(r.threads)))
        timed = r.per_tokens[8].median_ms["torch_bf16"]
        tries.append(f"{timed:.3f} against {plain[0]:.3f}-{plain[1]:.3f}")
        if plain[0] / STOPWATCH_BAND <= timed <= plain[1] * STOPWATCH_BAND:
            return
    pytest.fail(f"bench's torch eager ms outside the plain stopwatches' / {STOPWATCH_BAND} to * {STOPWATCH_BAND} "
                f"every try: {'; '.join(tries)}")
