"""MetaSchedule tuning: a database, warm start, applied records keep the golden, and measurement over TVM RPC."""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tvm
import tvm_ffi

import mtp_tvm
from mtp_tvm.compiler.options import BuildSpec
from mtp_tvm.tools.bench.bench import bench
from mtp_tvm.tools.tune.tune import tune


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


def _rpc(module: str, port: int, *args: str) -> subprocess.Popen:
    """``python -m tvm.exec.<module>`` on 127.0.0.1, in a session of its own: TVM runs a tracker's and a server's
    loop in a ``popen_worker`` child, which outlived the suite when only its parent was ended (``_end``)."""
    return subprocess.Popen([sys.executable, "-m", f"tvm.exec.{module}", "--host", "127.0.0.1", "--port", str(port),
                             "--port-end", str(port + 1), *args, "--silent"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _end(procs: list[subprocess.Popen]) -> None:
    """Each process's whole group killed, and waited for until none of it is left."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        p.wait(timeout=30)
    _wait("every RPC process to end", lambda: not any(_group_alive(p.pid) for p in procs), timeout=30)


@contextlib.contextmanager
def rpc_cluster(key: str, servers: int = 1):
    """A TVM RPC tracker and ``servers`` CPU servers on 127.0.0.1, registered under ``key``; yields HOST:PORT. One
    server by default: each costs two imports of TVM (its loop runs in a ``popen_worker`` child), ~5 s of CPU."""
    port = _free_port()
    procs = [_rpc("rpc_tracker", port)]
    try:
        _wait("RPC tracker", lambda: _accepts(port))
        for server_port in (_free_port() for _ in range(servers)):
            procs.append(_rpc("rpc_server", server_port, "--tracker", f"127.0.0.1:{port}", "--key", key))
        _wait(f"{servers} RPC servers", lambda: _free_servers(port, key) >= servers)
        yield f"127.0.0.1:{port}"
    finally:
        _end(procs)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.slow
def test_tune_over_rpc_then_the_tuned_schedule_keeps_the_golden(tmp_path, monkeypatch):
    monkeypatch.setenv("MTP_TVM_TUNED_ROOT", str(tmp_path))
    with rpc_cluster("mtp-test") as tracker:
        r = tune(BuildSpec("logits", preset="tiny"), trials=8, rpc=(tracker, "mtp-test"), log=lambda _: None)
        b = bench(case="logits", preset="tiny", rounds=2, rpc=(tracker, "mtp-test"))  # TVM measured remotely
    figures = b.per_tokens[8]
    assert figures.median_ms["tvm"] > 0 and b.measured_on == f"mtp-test@{tracker}"
    assert figures.median_ms["numpy_fp32"] is None and "TVM runs on" in figures.unavailable["numpy_fp32"]
    assert b.as_dict()["peak_gflops"] is None and "TVM timed on mtp-test@" in b.table()
    assert r.work_dir == tmp_path / "llvm" / "logits"
    assert (r.work_dir / "database_tuning_record.json").stat().st_size > 0
    assert r.best_ms["lm_head_logits"] > 0
    lines = []
    result = mtp_tvm.check(case="logits", preset="tiny", schedule="tuned", log=lines.append)
    assert result.passed and result.schedule == "tuned"
    m = mtp_tvm.compile(case="logits", preset="tiny", schedule="tuned")
    assert "lm_head_logits" in m.schedule_traces and "lm_head_logits" not in m.untuned
    assert sum(r.measured.get("lm_head_logits", {}).values()) > 0
    for tokens in (1, 16, 17):  # one database, T symbolic: every T runs (the records replay on any T; 8 above)
        assert mtp_tvm.check(case="logits", preset="tiny", schedule="tuned", tokens=tokens,
                             log=lambda _: None).passed


def test_tuned_without_a_database_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MTP_TVM_TUNED_ROOT", str(tmp_path))
    with pytest.raises(mtp_tvm.UsageError, match="no tuning database"):
        mtp_tvm.compile(case="logits", preset="tiny", schedule="tuned")


@pytest.mark.parametrize("target", ["cuda", '{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "num-cores": 2}'])
def test_a_target_that_does_not_run_here_needs_rpc_servers(tmp_path, target):
    """A tune whose candidates cannot be measured here is refused before anything is made, not "0 trials"."""
    if target == "cuda" and tvm.cuda(0).exist:
        pytest.skip("a GPU is here: a cuda tune runs")
    with pytest.raises(mtp_tvm.UsageError, match="build does not run here: tune where it runs, or on RPC servers"):
        tune(BuildSpec("logits", preset="tiny", target=target), trials=1, work_dir=tmp_path / "db",
             log=lambda _: None)
    assert not (tmp_path / "db").exists()


@pytest.mark.parametrize("tracker", ["127.0.0.1:{free}", "no-such-host.invalid:9190"])
def test_an_unreachable_tracker_fails_fast_with_one_line(tmp_path, tracker):
    from mtp_tvm.tools.remote import TRACKER_TIMEOUT_S

    t0 = time.monotonic()
    with pytest.raises(mtp_tvm.UsageError, match=r"cannot reach the RPC tracker .* within 10 s") as e:
        tune(BuildSpec("logits", preset="tiny"), trials=1, rpc=(tracker.format(free=_free_port()), "mtp"),
             work_dir=tmp_path / "db", log=lambda _: None)
    assert time.monotonic() - t0 < TRACKER_TIMEOUT_S + 5 and len(str(e.value).splitlines()) == 1
    assert not (tmp_path / "db").exists()  # no database written for a tuning that never measured


@pytest.mark.slow  # an RPC tracker in a subprocess
def test_a_tracker_without_servers_for_the_key_is_refused(tmp_path):
    port = _free_port()
    proc = _rpc("rpc_tracker", port)
    try:
        _wait("RPC tracker", lambda: _accepts(port))
        from mtp_tvm.tools.remote import require_tracker

        with pytest.raises(mtp_tvm.UsageError, match="has no server registered with key 'mtp'"):
            require_tracker("127.0.0.1", port, "mtp")
    finally:
        _end([proc])


@pytest.mark.slow  # tune starts its runner's worker process, which imports TVM
def test_a_work_dir_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(mtp_tvm.UsageError, match="cannot use .*f as the tuning work dir"):
        tune(BuildSpec("logits", preset="tiny"), trials=1, work_dir=tmp_path / "f", log=lambda _: None)


@pytest.mark.slow  # about 1 s: design spaces and replays
def test_hand_space_samples_the_knobs_and_its_traces_replay_on_any_token_count():
    """The hand space of a GEMM on the FMA path (SSE: no pair dot): several design spaces with sampled register
    rows and K chunk; a trace with other decisions replays on the symbolic-T kernel; the shipped point (fixed
    sampler) is the default build's trace. (The dot-product tiles have nothing to sample: each is one point.)"""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from mtp_tvm.passes.target import cpu_isa, resolve_target
    from mtp_tvm.schedule.apply import ApplySchedules
    from mtp_tvm.schedule.space import default_schedule, hand_space, is_hand
    from mtp_tvm.schedule.steps import fresh_copy
    from mtp_tvm.schedule.tuned import _replay, workload
    from mtp_tvm.tools.tune.kernels import case_kernels, load_tensor_intrinsics

    target = resolve_target('{"kind": "llvm", "mcpu": "nehalem", "num-cores": 2}')
    load_tensor_intrinsics(target)  # as tune does: TuneContext would import every intrinsic TVM ships
    isa = cpu_isa(target)
    kernels = case_kernels(BuildSpec("logits", preset="tiny"), target)
    key = workload(kernels["lm_head_logits"])
    assert [int(d) for d in key["main"].params[0].ty.shape] == [16, 256]  # buffers of the padded tile
    ks = ApplySchedules(target).hand_schedule("lm_head_logits")
    ctx = ms.TuneContext(key, target=target, space_generator=ms.space_generator.ScheduleFn(hand_space(ks, isa)))
    spaces = ctx.generate_design_space()
    assert len(spaces) >= 4
    assert all(is_hand(s) for s in spaces)
    assert all("sample_categorical" in str(s.trace) for s in spaces)  # the register rows
    assert all("sample_perfect_tile" in str(s.trace) for s in spaces)  # the K chunk (mutable)
    symbolic = mtp_tvm.compile(case="logits", preset="tiny", target=target)  # the build's own kernel
    default_trace = symbolic.schedule_traces["lm_head_logits"]
    before = fresh_copy(key)
    shipped = str(default_schedule(key, ks, isa).trace)
    assert tvm_ffi.structural_equal(key, before)  # scheduling works on a copy: the workload committed stays intact
    def steps(trace: str) -> list[str]:  # the trace's steps with variable names and row extents left out
        lines = [re.sub(r"\b[blv]\d+\b", "_", ln.strip()).replace('"lm_head_logits"', '"main"')
                 for ln in trace.splitlines() if "sch." in ln]
        return [ln for ln in lines if not any(mark in ln for mark in ('"root"', "mtp.space", "get_child_blocks"))]

    def general(trace: str) -> list[str]:  # the build's steps on the general loop: the small-T variants' left out
        lines = [ln for ln in steps(trace) if not re.search(r'get_sblock\(name="(\w+_)?rows\d*"', ln)]
        return lines[:next(i for i, ln in enumerate(lines) if "decompose_reduction" in ln) + 1]

    assert "sample_" not in shipped and steps(shipped) == general(default_trace)
    from mtp_tvm.ir.tir_kernels import lm_head_logits

    kernel = ApplySchedules(target).tuned_rows("lm_head_logits", lm_head_logits(256, 512))  # as tuned builds
    for space in spaces:  # fresh decisions, replayed on the kernel a tuned build has (T symbolic)
        trace = s_tir.Trace(space.trace.insts, {})
        fresh = s_tir.Schedule(key)
        trace.apply_to_schedule(fresh, remove_postproc=True)
        assert _replay(kernel, fresh.trace) is not None


def test_progress_says_trials_space_and_time_left():
    from types import SimpleNamespace

    from mtp_tvm.tools.tune.progress import ProgressCallback

    lines = []
    p = ProgressCallback(total=4, log=lines.append)
    task = SimpleNamespace(ctx=SimpleNamespace(task_name="lm_head_logits"))
    sched = SimpleNamespace(tasks_=[task])

    def cand(space):
        mark = SimpleNamespace(kind=SimpleNamespace(name="Annotate"), attrs=["mtp.space", "hand"])
        return SimpleNamespace(sch=SimpleNamespace(trace=SimpleNamespace(insts=[mark] if space == "hand" else [])))

    ok = SimpleNamespace(run_secs=[0.002], error_msg=None)
    p.apply(sched, 0, [cand("hand"), cand("generic")], None, [ok, SimpleNamespace(run_secs=[0.004], error_msg=None)])
    assert p.done == 2 and p.kernels["lm_head_logits"].by_space == {"hand": 1, "generic": 1}
    assert lines and "2/4 trials" in lines[-1] and "left" in lines[-1] and "hand 1 (best 2 ms)" in lines[-1]
    hung = SimpleNamespace(error_msg="ForkBuilder: Timeout, killed after 120 seconds")
    p.apply(sched, 0, [cand("hand"), cand("generic")], [SimpleNamespace(error_msg=None), hung],
            [ok, SimpleNamespace(run_secs=[], error_msg="not built")])
    assert lines[-1] == ("[tune] lm_head_logits: 1 of 2 candidates of the batch did not build (ForkBuilder: Timeout, "
                         "killed after 120 seconds)")


@pytest.mark.parametrize("kernel", ["quantize_rows", "w8a8_dual_gemm"])
def test_candidates_replayed_one_after_another_leave_the_workload_intact(kernel):
    """MetaSchedule replays every candidate on one module per thread: a trace that edited it in place (TVM 0.27
    does, once a trace's first step rewrites the root block of a kernel with root-level buffers) made the next
    replay fail ("old_outputs.size() == new_outputs.size()"), and the projection could not be tuned."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from mtp_tvm.passes.target import cpu_isa, resolve_target
    from mtp_tvm.schedule.apply import ApplySchedules
    from mtp_tvm.schedule.space import hand_space
    from mtp_tvm.schedule.steps import fresh_copy
    from mtp_tvm.schedule.tuned import workload
    from mtp_tvm.tools.tune.kernels import case_kernels, load_tensor_intrinsics

    target = resolve_target('{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}')
    load_tensor_intrinsics(target)  # as tune does: TuneContext would import every intrinsic TVM ships (a minute)
    key = workload(case_kernels(BuildSpec("projection", preset="tiny"), target)[kernel])
    space = ms.space_generator.ScheduleFn(hand_space(ApplySchedules(target).hand_schedule(kernel), cpu_isa(target)))
    ctx = ms.TuneContext(fresh_copy(key), target=target, space_generator=space)
    shared, before = fresh_copy(key), key.script()
    for design in ctx.generate_design_space():
        for seed in (1, 2, 3):  # fresh decisions each time, on the same module, as MetaSchedule's replay does
            s_tir.Trace(design.trace.insts, {}).apply_to_schedule(s_tir.Schedule(shared, seed=seed), False)
    assert shared.script() == before


@pytest.mark.slow
def test_every_projection_kernel_is_tuned_in_both_spaces_and_keeps_the_golden(tmp_path, monkeypatch):
    """The projection's kernels with root-level buffers (quantiser, dual GEMM) are searched, not skipped; the
    dual GEMM's generic space exists (its multi-level tiling without consumer fusion)."""
    monkeypatch.setenv("MTP_TVM_TUNED_ROOT", str(tmp_path))
    lines = []
    r = tune(BuildSpec("projection", preset="tiny"), trials=16, log=lines.append)
    assert not any("search failed" in ln for ln in lines), lines
    assert r.spaces["w8a8_dual_gemm"]["generic"] >= 1 and r.spaces["quantize_rows"]["hand"] >= 1
    assert sum(r.measured["w8a8_dual_gemm"].values()) > 0 and sum(r.measured["quantize_rows"].values()) > 0
    assert all(r.best_ms[k] <= r.default_ms[k] for k in r.default_ms)  # the hand point is committed first
    for tokens in (1, 17):
        assert mtp_tvm.check(case="projection", preset="tiny", schedule="tuned", tokens=tokens,
                             log=lambda _: None).passed


def test_the_hand_space_tries_dot_product_tiles_only_where_the_target_has_dot_products():
    """The LM head's hand space holds several BF16 pair-dot tiles (each once: the shipped pick is not repeated),
    ``vdpbf16ps`` on AVX512-BF16 and its FMA form on AVX2; on SSE (neither) a pinned tile is refused, never
    silently built as an FMA copy."""
    import dataclasses

    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from mtp_tvm.passes.target import cpu_isa, resolve_target
    from mtp_tvm.schedule.apply import ApplySchedules
    from mtp_tvm.schedule.cpu_rules import cpu_gemm
    from mtp_tvm.schedule.space import hand_space
    from mtp_tvm.schedule.steps import fresh_copy
    from mtp_tvm.schedule.tuned import workload
    from mtp_tvm.tools.tune.kernels import case_kernels, load_tensor_intrinsics

    tensorized = {}
    for mcpu in ("znver4", "haswell", "nehalem"):
        target = resolve_target(f'{{"kind": "llvm", "mcpu": "{mcpu}", "num-cores": 2}}')
        load_tensor_intrinsics(target)  # as tune does: TuneContext would import every intrinsic TVM ships
        key = workload(case_kernels(BuildSpec("logits", preset="tiny"), target)["lm_head_logits"])
        ks = ApplySchedules(target).hand_schedule("lm_head_logits")
        space = ms.space_generator.ScheduleFn(hand_space(ks, cpu_isa(target)))
        traces = [str(s.trace) for s in ms.TuneContext(key, target=target, space_generator=space)
                  .generate_design_space()]
        assert len(set(traces)) == len(traces)
        tensorized[mcpu] = [t for t in traces if "tensorize" in t]
        if mcpu == "nehalem":
            pinned = dataclasses.replace(ks.knobs_for(cpu_isa(target).name), dot_rows=4, dot_vectors=2)
            with pytest.raises(ValueError, match="no dot-product tile"):
                cpu_gemm(s_tir.Schedule(fresh_copy(key)), pinned, cpu_isa(target))
    assert len(tensorized["znver4"]) >= 4 and len(tensorized["haswell"]) >= 4 and not tensorized["nehalem"]


@pytest.mark.slow  # tune starts its runner's worker process, which imports TVM
def test_the_local_runner_measures_with_every_usable_core(monkeypatch):
    """Candidates are timed as the build runs them: TVM's own pool default (half the cores, one thread on 2
    vCPUs) made a serial row loop look faster than the parallel one that is faster in the build."""
    from mtp_tvm.compiler.runtime import THREADS_ENV
    from mtp_tvm.passes.target import usable_cores
    from mtp_tvm.tools.tune.tune import _runner

    monkeypatch.delenv(THREADS_ENV, raising=False)
    _runner(None)
    assert int(os.environ[THREADS_ENV]) == usable_cores()


def test_trial_budgets_and_hand_points_never_exceed_the_trials():
    """``--trials N`` is a limit: the hand points measured first count, and the search gets what is left,
    split exactly (a kernel may get none when there are fewer trials than kernels)."""
    from mtp_tvm.tools.tune.tune import first_points, trial_budgets

    assert trial_budgets(["a", "b", "c"], {"a": 1.0, "b": 3.0}, 8) == [1, 4, 3]  # c weighs the mean, 2
    assert sum(trial_budgets(["a", "b", "c"], {}, 2)) == 2 and trial_budgets(["a", "b"], {}, 0) == [0, 0]
    for trials in range(0, 30):
        assert sum(trial_budgets(["a", "b", "c", "d"], {"a": 0.1, "b": 7.0, "c": 2.5}, trials)) == trials
    points = {"gemm": ["g0", "g1", "g2", "g3", "g4"], "norm": ["n0"]}
    chosen, note = first_points(points, 2)  # every shipped point first, even past half: said
    assert chosen == [("gemm", "g0"), ("norm", "n0")] and "the search gets 0" in note
    chosen, note = first_points(points, 1)
    assert chosen == [("gemm", "g0")] and note.startswith("--trials 1 is smaller than the 2 kernels'")
    chosen, note = first_points(points, 6)  # at most half the trials: the search gets the rest
    assert chosen == [("gemm", "g0"), ("norm", "n0"), ("gemm", "g1")] and note is None
    assert len(first_points(points, 100)[0]) == 6


def _popen_workers() -> list[int]:
    """This process's children that are TVM popen workers (the runner's, the builder's pool)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"popen_worker" in cmd:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow  # over 10 s on 2 cores
def test_a_small_trial_budget_is_kept_and_the_progress_never_passes_it(tmp_path, monkeypatch):
    import re

    monkeypatch.setenv("MTP_TVM_TUNED_ROOT", str(tmp_path))
    lines = []
    r = tune(BuildSpec("logits", preset="tiny"), trials=2, log=lines.append)
    done = [tuple(map(int, m.groups())) for ln in lines if (m := re.search(r"(\d+)/(\d+) trials", ln))]
    assert r.trials <= 2 and all(d <= total == 2 for d, total in done), lines
    assert any("hand schedules take" in ln or "smaller than the" in ln for ln in lines)  # the share is said
    # the local runner's worker ended with the tune: killed and joined for up to 1 s by TVM's pool, so on a loaded
    # machine it may take a moment more to go (a worker left running would stay)
    deadline = time.monotonic() + 10
    while _popen_workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _popen_workers() == []
    from mtp_tvm.tools.tune.report import end_to_end

    found = end_to_end(BuildSpec("logits", preset="tiny"))  # main with the hand schedules and the records
    assert set(found.ms) == {"default", "tuned"} and all(ms > 0 for ms in found.ms.values())


@pytest.mark.slow  # tunes for its budget, 3 s
def test_the_search_stops_at_its_budget_and_keeps_what_it_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("MTP_TVM_TUNED_ROOT", str(tmp_path))
    lines = []
    r = tune(BuildSpec("norm", preset="tiny"), trials=1000, budget=3, log=lines.append)
    assert r.budget_spent and not r.interrupted and 0 < r.trials < 1000 and r.best_ms
    assert any("the budget of 3 s is spent" in ln for ln in lines)
    assert r.seconds < 3 + 30  # the batch under way when it ran out is measured, then the search stops


@pytest.mark.parametrize("call, message", [
    (lambda: tune(BuildSpec("logits", preset="tiny"), trials=0), "trials must be a positive integer"),
    (lambda: tune(case="logits", space="all"), "space must be one of hand, generic, both"),
    (lambda: tune(case="logits", dump_passes=True), "debugging options do not apply"),
    (lambda: tune(case="logits", trails=4), "tune() got unknown option(s) trails"),
    (lambda: tune(case="logits", budget=0), "budget must be a positive number of seconds, got 0"),
])
def test_tune_takes_a_build_spec_and_typed_options(call, message):
    with pytest.raises(mtp_tvm.UsageError, match=re.escape(message)):
        call()
