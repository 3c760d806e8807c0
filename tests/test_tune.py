"""MetaSchedule tuning: a database, warm start, applied records keep the golden, and measurement over TVM RPC."""

import contextlib
import socket
import subprocess
import sys
import time

import pytest
import tvm

import mtp_tvm
from mtp_tvm.compiler.tensors import to_numpy
from mtp_tvm.tools.tune import tune


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
        for server_port in (_free_port() for _ in range(servers)):
            procs.append(subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                           "--port", str(server_port), "--port-end", str(server_port + 1),
                                           "--tracker", f"127.0.0.1:{port}", "--key", key, "--silent"], **quiet))
        _wait(f"{servers} RPC servers", lambda: _free_servers(port, key) >= servers)
        yield f"127.0.0.1:{port}"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


@pytest.mark.slow
def test_tune_over_rpc_then_the_tuned_schedule_keeps_the_golden(tmp_path, monkeypatch):
    monkeypatch.setenv("MTP_TVM_TUNED_ROOT", str(tmp_path))
    with rpc_cluster("mtp-test") as tracker:
        r = tune("logits", "llvm", "tiny", "tir", trials=16, rpc=(tracker, "mtp-test"), log=lambda _: None)
    assert r.work_dir == tmp_path / "llvm" / "logits"
    assert (r.work_dir / "database_tuning_record.json").stat().st_size > 0
    assert r.best_ms["lm_head_logits"] > 0
    lines = []
    result = mtp_tvm.check(case="logits", preset="tiny", schedule="tuned", log=lines.append)
    assert result.passed and result.schedule == "tuned"
    m = mtp_tvm.compile(case="logits", preset="tiny", schedule="tuned")
    assert "lm_head_logits" in m.schedule_traces and "lm_head_logits" not in m.untuned
    with pytest.raises(mtp_tvm.UsageError, match="tuned for T=8"):
        m.run({k: v[:5] if v.shape[0] == 8 else v for k, v in
               ((k, to_numpy(v)) for k, v in m.case.make_inputs(m.shapes, 0).items())})


def test_tuned_without_a_database_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MTP_TVM_TUNED_ROOT", str(tmp_path))
    with pytest.raises(mtp_tvm.UsageError, match="no tuning database"):
        mtp_tvm.compile(case="logits", preset="tiny", schedule="tuned")


@pytest.mark.parametrize("tracker", ["127.0.0.1:{free}", "no-such-host.invalid:9190"])
def test_an_unreachable_tracker_fails_fast_with_one_line(tmp_path, tracker):
    from mtp_tvm.tools.tune import TRACKER_TIMEOUT_S

    t0 = time.monotonic()
    with pytest.raises(mtp_tvm.UsageError, match=r"cannot reach the RPC tracker .* within 10 s") as e:
        tune("logits", "llvm", "tiny", "tir", trials=1, rpc=(tracker.format(free=_free_port()), "mtp"),
             work_dir=tmp_path / "db", log=lambda _: None)
    assert time.monotonic() - t0 < TRACKER_TIMEOUT_S + 5 and len(str(e.value).splitlines()) == 1
    assert not (tmp_path / "db").exists()  # no database written for a tuning that never measured


def test_a_tracker_without_servers_for_the_key_is_refused(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                             "--port-end", str(port + 1), "--silent"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait("RPC tracker", lambda: _accepts(port))
        from mtp_tvm.tools.tune import require_tracker

        with pytest.raises(mtp_tvm.UsageError, match="has no server registered with key 'mtp'"):
            require_tracker("127.0.0.1", port, "mtp")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_work_dir_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(mtp_tvm.UsageError, match="cannot use .*f as the tuning work dir"):
        tune("logits", "llvm", "tiny", "tir", trials=1, work_dir=tmp_path / "f", log=lambda _: None)
