"""MetaSchedule tuning: a database, warm start, applied records keep the golden, and measurement over TVM RPC."""

import contextlib
import socket
import subprocess
import sys
import time

import pytest
import tvm
from tvm import relax

from mtp_tvm.cases import get_case
from mtp_tvm.check import compare_outputs
from mtp_tvm.config import make_shapes
from mtp_tvm.model import build_relax_module
from mtp_tvm import pipeline
from mtp_tvm.target import resolve_target
from mtp_tvm.tensors import to_numpy
from mtp_tvm.tune import apply_database, tune


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, ready, timeout: float = 180.0) -> None:
    """Poll ``ready()`` until true; starting TVM in a fresh process takes 5-30 s on a loaded 2-core machine."""
    deadline = time.time() + timeout
    while not ready():
        if time.time() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:.0f}s")
        time.sleep(0.5)


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_servers(port: int, key: str) -> int:
    with contextlib.suppress(Exception):
        return tvm.rpc.connect_tracker("127.0.0.1", port).summary()["queue_info"][key]["free"]
    return 0


@contextlib.contextmanager
def rpc_cluster(key: str, servers: int = 2):
    """A TVM RPC tracker and ``servers`` CPU servers on 127.0.0.1, registered under ``key``; yields HOST:PORT."""
    port = _free_port()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
                               "--port", str(port), "--port-end", str(port + 1), "--silent"], **quiet)]
    try:
        _wait("RPC tracker", lambda: _accepts(port))
        procs += [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                    "--port", str(_free_port()), "--tracker", f"127.0.0.1:{port}", "--key", key,
                                    "--silent"], **quiet) for _ in range(servers)]
        _wait(f"{servers} RPC servers", lambda: _free_servers(port, key) >= servers)
        yield f"127.0.0.1:{port}"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def _golden_check_with_database(case_name, work_dir):
    s, tgt, case = make_shapes("tiny"), resolve_target("llvm"), get_case(case_name)
    mod = build_relax_module(case, s, "tir", static_tokens=True)
    with tgt:
        mod = tvm.transform.Sequential(pipeline.legalize_passes(tgt) + pipeline.fuse_passes(tgt))(mod)
    mod, applied, missing = apply_database(mod, tgt, work_dir)
    with tgt:
        mod = tvm.transform.Sequential(pipeline.lower_dataflow_passes(tgt) + pipeline.finalize_passes(tgt))(mod)
    vm = relax.VirtualMachine(relax.build(mod, tgt, relax_pipeline=None, tir_pipeline=pipeline.TIR_PIPELINE),
                              tvm.cpu())
    inputs = case.make_inputs(s, 0)
    out = vm["main"](*[tvm.runtime.tensor(to_numpy(v)) for v in inputs.values()])
    names = list(case.output_specs(s))
    actual = {n: out[i].numpy() for i, n in enumerate(names)}
    return applied, missing, compare_outputs(case, s, actual, case.golden(inputs, s))


@pytest.mark.slow
def test_tune_over_rpc_gives_a_database_whose_records_keep_the_golden(tmp_path):
    with rpc_cluster("mtp-test") as tracker:
        r = tune("logits", "llvm", "tiny", "tir", trials=16, work_dir=tmp_path, rpc=(tracker, "mtp-test"),
                 log=lambda _: None)
    assert (tmp_path / "database_tuning_record.json").stat().st_size > 0
    assert "lm_head_logits" in r.best_ms and r.best_ms["lm_head_logits"] > 0
    applied, missing, checks = _golden_check_with_database("logits", tmp_path)
    assert "lm_head_logits" in applied and not missing
    assert all(c.passed for c in checks.values())
