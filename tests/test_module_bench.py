"""``bench --module FILE.py``: the user's own model timed against torch eager and torch.compile, TVM and each peer in
a process of its own, checked against the reference before it is timed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mtp_tvm.cli import main
from mtp_tvm.support.errors import UsageError
from mtp_tvm.tools.bench.bench import BenchOptions, bench
from mtp_tvm.tools.bench.options import CASE, MODULE_FILE
from mtp_tvm.tools.bench.peer_isa import wider
from mtp_tvm.tools.bench.worker import EXAMPLE

REPO = Path(__file__).resolve().parent.parent
TORCH_EXAMPLE = REPO / "examples" / "torch_mlp_block.py"
TVMSCRIPT_EXAMPLE = REPO / "examples" / "tvmscript_module.py"


@pytest.mark.slow  # a build and two workers (torch.compile of a module file: the AVX2 test below)
def test_bench_module_races_tvm_against_the_files_own_torch_model(tmp_path):
    r = bench(TORCH_EXAMPLE, peers=("torch_eager",), rounds=2)
    f = r.per_tokens[EXAMPLE]  # one bench result for a case and a module file: one size, the example inputs
    assert r.tokens == [EXAMPLE] and r.module == str(TORCH_EXAMPLE) and r.shapes == {"x": [8, 64]}
    assert list(f.median_ms) == ["tvm", "torch_eager"] and not f.unavailable
    assert all(ms > 0 and len(f.samples_ms[n]) == 2 for n, ms in f.median_ms.items())
    assert len(set(r.workers.values())) == 2 and os.getpid() not in r.workers.values()
    assert r.compile_seconds["tvm"] > 0 and r.peers_held_to is None  # a native build races native peers
    assert not wider(r.isa["name"], r.peer_isa["torch_eager"]["name"])  # torch may go wider (AMX), never narrower
    assert f.best_peer == "torch_eager"
    assert f.tvm_vs_best_peer == pytest.approx(f.median_ms[f.best_peer] / f.median_ms["tvm"])
    assert f.flops == 0 and f.bytes > 0 and f.roofline_ms == pytest.approx(f.bytes / r.bandwidth_gbs / 1e6)
    table = r.table()
    assert "tvm:default" in table and "memory floor" in table and "example" in table and "T=" not in table
    r.write_json(tmp_path / "b.json")
    r.plot(tmp_path / "b.png")
    written = json.loads((tmp_path / "b.json").read_text())
    assert written["shapes"] == {"x": [8, 64]} and written["module"] == str(TORCH_EXAMPLE)
    assert written["per_tokens"]["example"]["median_ms"]["tvm"] > 0
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # a build and a worker
def test_a_tvmscript_module_is_timed_alone_its_peers_unavailable_with_why():
    f = bench(TVMSCRIPT_EXAMPLE, peers=("torch_eager",), rounds=1).per_tokens[EXAMPLE]
    assert f.median_ms["tvm"] > 0 and f.median_ms["torch_eager"] is None
    assert "has no torch model" in f.unavailable["torch_eager"] and f.best_peer is None


@pytest.mark.slow  # a build, two workers twice
def test_a_module_artifact_races_its_files_model_while_the_file_is_unchanged(tmp_path):
    from mtp_tvm import build

    source = tmp_path / "block.py"
    source.write_text(TORCH_EXAMPLE.read_text())
    build(tmp_path / "art", str(source), log=lambda *_: None)
    f = bench(artifact=str(tmp_path / "art"), peers=("torch_eager",), rounds=1).per_tokens[EXAMPLE]
    assert not f.unavailable and f.median_ms["tvm"] > 0 and f.median_ms["torch_eager"] > 0
    source.write_text(source.read_text() + "\n# edited after the build\n")
    f = bench(artifact=str(tmp_path / "art"), peers=("torch_eager",), rounds=1).per_tokens[EXAMPLE]
    assert f.median_ms["tvm"] > 0 and f.median_ms["torch_eager"] is None
    assert "changed since the build (sha256 differs)" in f.unavailable["torch_eager"]


@pytest.mark.slow  # a build and torch.compile, held to AVX2
def test_an_avx2_build_of_a_module_file_races_avx2_peers():
    haswell = {"kind": "llvm", "mcpu": "haswell", "num-cores": 1}
    r = bench(TORCH_EXAMPLE, target=haswell, peers=("torch_eager", "torch_compile"), rounds=1, threads=1)
    assert r.peers_held_to == "avx2" and not r.per_tokens[EXAMPLE].unavailable
    assert r.compile_seconds["torch_compile"] > 0 and r.isa["name"] == "avx2"
    assert {n: isa["name"] for n, isa in r.peer_isa.items()} == {"torch_eager": "avx2", "torch_compile": "avx2"}
    assert "peers held to avx2" in r.table()


@pytest.mark.parametrize("argv, message", [
    (["--tokens", "4"], "--module builds your file, so --tokens"),
    (["--api"], "bench --module times your file at its example inputs; --api cannot apply"),
    (["--compare-schedules", "none"], "--compare-schedules cannot apply"),
    (["--case", "norm"], "--module builds your file, so --case"),
    (["--peers", "torch_bf16"], "unknown peer 'torch_bf16' for a module file"),
    (["--rounds", "0"], "rounds must be an integer >= 1"),
])
def test_bench_module_user_errors_are_one_line_before_any_build(argv, message, capsys):
    assert main(["bench", "--module", str(TORCH_EXAMPLE), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_bench_module_options_are_checked():
    with pytest.raises(UsageError, match="unknown peer 'numpy_fp32' for a module file"):
        BenchOptions(peers=("numpy_fp32",)).for_kind(MODULE_FILE)
    with pytest.raises(UsageError, match="unknown peer 'torch_eager' for a case"):
        BenchOptions(peers=("torch_eager",)).for_kind(CASE)
    with pytest.raises(UsageError, match="unknown peer 'pytorch'; choose from torch_bf16"):
        BenchOptions(peers=("pytorch",))
    with pytest.raises(UsageError, match="bench of a module file times it once.*tokens applies to a case"):
        bench(TORCH_EXAMPLE, tokens=4)
    with pytest.raises(UsageError, match="weights apply to a case"):
        bench(TORCH_EXAMPLE, weights={})
    with pytest.raises(UsageError, match=r"bench\(\) takes BenchOptions, got dict"):
        bench(module=str(TORCH_EXAMPLE), options={"rounds": 1})
    assert BenchOptions(peers=("torch_compile", "torch_eager")).for_kind(MODULE_FILE).peers == (
        "torch_eager", "torch_compile")
    assert BenchOptions().for_kind(MODULE_FILE).peers == ("torch_eager", "torch_compile", "torch_compile_max_autotune")
