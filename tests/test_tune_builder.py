"""The tuner's forked candidate builder: each candidate its artifact or its own error, in order; a crash, an exit
or a hang costs its build process's share, never the batch, and no child outlives a batch."""

import os
import signal
import threading
import time

import psutil
import pytest
import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.script import tirx as T

from mtp_tvm.passes.pipeline import register_with_tvm
from mtp_tvm.passes.target import resolve_target
from mtp_tvm.tools.tune.builder import ForkBuilder, candidate_builder
from mtp_tvm.tools.tune.kernels import fast_build

TARGET = resolve_target("llvm")


def _module(scale: int) -> tvm.IRModule:
    @T.prim_func(s_tir=True)
    def main(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in range(8):
            with T.sblock("scale"):
                v = T.axis.remap("S", [i])
                b[v] = a[v] * T.float32(scale)

    return tvm.IRModule({"main": main})


def _inputs(n: int) -> list:
    return [ms.builder.BuilderInput(_module(i + 2), TARGET) for i in range(n)]  # candidate i scales by i + 2


def _misbehaving(action: str, victim: tvm.IRModule):
    """``fast_build``, except on the candidate ``victim``: there it raises, crashes, exits or hangs."""
    def build(mod, target, params):
        if mod.same_as(victim):
            if action == "raise":
                raise ValueError("no such schedule")
            if action == "crash":
                os.kill(os.getpid(), signal.SIGSEGV)
            if action == "exit":
                os._exit(7)
            time.sleep(60)
        return fast_build(mod, target, params)

    return build


@pytest.fixture
def no_child_left():
    """Fails the test if a process this test process started outlives it (other fixtures' servers excepted)."""
    def live():
        return {c.pid for c in psutil.Process().children() if c.status() != psutil.STATUS_ZOMBIE}

    before = live()
    yield
    assert live() - before == set()


def _runs(path: str, scale: int) -> bool:
    import numpy as np

    f = tvm.runtime.load_module(path)["main"]
    a = tvm.runtime.tensor(np.arange(8, dtype="float32"))
    b = tvm.runtime.tensor(np.zeros(8, dtype="float32"))
    f(a, b)
    return bool((b.numpy() == scale * np.arange(8)).all())


def test_every_candidate_gets_its_own_artifact_in_the_batchs_order(no_child_left):
    results = ForkBuilder(fast_build, 2, 60).build(_inputs(5))
    assert [r.error_msg for r in results] == [None] * 5
    assert all(_runs(r.artifact_path, i + 2) for i, r in enumerate(results))


@pytest.mark.parametrize(("action", "cause"), [
    ("raise", "An exception occurred\nValueError: no such schedule"),
    ("crash", "the build process was killed by SIGSEGV while building it"),
    ("exit", "the build process exited with code 7 while building it"),
    ("hang", "Timeout, killed after 2 seconds"),
])
def test_a_failing_candidate_costs_its_build_process_share_never_the_batch(action, cause, no_child_left):
    """Five candidates in two children: child 0 builds 0, 2, 4 and child 1 builds 1, 3; candidate 2 fails."""
    inputs = _inputs(5)
    results = ForkBuilder(_misbehaving(action, victim=inputs[2].mod), 2, 2).build(inputs)
    errors = [r.error_msg for r in results]
    assert errors[2] == f"ForkBuilder: {cause}"
    assert errors[0] is None and errors[1] is None and errors[3] is None  # built before it, or by the other child
    if action == "raise":  # the child goes on with its share
        assert errors[4] is None and _runs(results[4].artifact_path, 6)
    else:
        assert "not built: an earlier candidate" in errors[4]
    assert _runs(results[3].artifact_path, 5)


def _blocked_once(victim: tvm.IRModule, marker):
    """``fast_build``, except that the first build process to reach candidate ``victim`` blocks there for good
    without using the CPU (as on a lock held at the fork; ``marker`` records that one did)."""
    def build(mod, target, params):
        if mod.same_as(victim) and not marker.exists():
            marker.touch()
            threading.Event().wait()
        return fast_build(mod, target, params)

    return build


def _spinning(seconds: float):
    """``fast_build`` after ``seconds`` of busy CPU: a long build."""
    def build(mod, target, params):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
        return fast_build(mod, target, params)

    return build


def test_a_blocked_build_process_is_replaced_and_its_candidates_still_build(no_child_left, tmp_path):
    """The blocked child is killed after ``stall_s`` of no CPU, not after the timeout, and its unbuilt candidates
    are built by a new fork; the tune's log says so."""
    inputs, said = _inputs(5), []
    builder = ForkBuilder(_blocked_once(inputs[2].mod, tmp_path / "blocked"), 2, 60, stall_s=1.0, say=said.append)
    t0 = time.monotonic()
    results = builder.build(inputs)
    assert time.monotonic() - t0 < 20  # the timeout is 60 s
    assert [r.error_msg for r in results] == [None] * 5
    assert all(_runs(r.artifact_path, i + 2) for i, r in enumerate(results))
    assert said == ["[tune] a build process used no CPU for 1 s (blocked, not building): killed; its 2 unbuilt "
                    "candidates go to a new one"]


def test_a_replacement_that_blocks_too_loses_its_candidates(no_child_left):
    inputs = _inputs(3)
    results = ForkBuilder(_misbehaving("hang", victim=inputs[0].mod), 1, 60, stall_s=0.5, say=lambda _: None).build(
        inputs)
    assert results[0].error_msg == ("ForkBuilder: the build process used no CPU for 0.5 s (blocked, not building); "
                                    "killed")
    assert all("not built" in r.error_msg for r in results[1:])


def test_a_build_that_keeps_the_cpu_busy_is_never_taken_for_blocked(no_child_left):
    said = []  # the build spins 2.5 s, over twice the stall limit
    results = ForkBuilder(_spinning(2.5), 1, 60, stall_s=1.0, say=said.append).build(_inputs(1))
    assert results[0].error_msg is None and said == []


@pytest.mark.parametrize("received_by", ["the process", "another thread"])
def test_an_interrupted_batch_leaves_no_child(no_child_left, received_by):
    """Ctrl-C ends the batch within a second, also when a thread other than the main one received the signal
    (the main thread then sees it only between waits: it once waited out the hung child's 60 s)."""
    register_with_tvm()  # as tune does: Ctrl-C comes back through MetaSchedule's C++ as KeyboardInterrupt
    inputs = _inputs(2)
    builder = ForkBuilder(_misbehaving("hang", victim=inputs[0].mod), 2, 60)
    send = ((lambda: os.kill(os.getpid(), signal.SIGINT)) if received_by == "the process"
            else (lambda: signal.pthread_kill(threading.get_ident(), signal.SIGINT)))
    timer = threading.Timer(1.0, send)
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            builder.build(inputs)
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 30  # not the hung child's timeout


def test_a_gpu_target_keeps_tvms_builder(monkeypatch):
    """A CUDA build in a child forked after the parent touched the driver is not safe."""
    monkeypatch.setattr(ms.builder, "LocalBuilder", lambda **kw: ("TVM's pool", kw))  # not started: a GPU-less host
    assert candidate_builder(resolve_target("cuda")) == ("TVM's pool", {"f_build": fast_build, "timeout_sec": 120})
    assert isinstance(candidate_builder(TARGET), ForkBuilder)
