"""MetaSchedule's candidate builder in forked children of the tuner.

TVM's ``LocalBuilder`` starts a fresh pool of ``python -m tvm.exec.popen_worker`` processes for every batch (and
one more to check its functions), and each imports TVM, and so torch (``tvm_ffi`` imports it): about 3 s of CPU a
process, most of a short tune's time. A fork of the tuner costs milliseconds, and the child already holds
everything a build needs (the tensor intrinsics registered, ``fast_build``'s imports). Each child builds its share
of the batch and reports every candidate on a pipe as soon as it is built, so one candidate that crashes or hangs
loses its own share's rest, never the batch: a crash is that candidate's error with the signal, and a build that
outlives ``timeout_s`` is killed and said to be one.

A child forked from the multithreaded tuner can block for good (seen once in about fifty tunes run beside the
test suite, its cause not found; a lock another thread held at the fork is the usual one): the batch then waited
out the whole timeout. A build computes from its first step to its last, so a child whose CPU time (its
compiler processes' counted in) stands still for ``STALL_S`` is blocked, not building: it is killed and what it
had left goes to a fresh fork (once; a second blocked fork's candidates are lost like a timeout's), and the
tune's log says so.

CPU targets only: a CUDA build in a child forked after the parent touched the CUDA driver is not safe, so GPU
tuning keeps TVM's ``LocalBuilder`` (``candidate_builder``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable

import psutil
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder.local_builder import default_export
from tvm.target import Target

from ...passes.target import is_gpu
from ...support.load_average import usable_cores
from .kernels import fast_build

BUILD_TIMEOUT_S = 120  # one candidate's build; TVM's LocalBuilder allows 30 s, too few for a large CPU kernel
# a build process whose CPU time (and its compiler processes') stood still this long is blocked, not building
STALL_S = 15.0


def candidate_builder(target: Target, timeout_s: float = BUILD_TIMEOUT_S, say: Callable[[str], None] = print):
    """The tuner's builder of candidates for ``target``: forked children on a CPU, TVM's pool on a GPU. ``say``
    gets a line when a blocked build process is replaced."""
    if is_gpu(target):
        return ms.builder.LocalBuilder(f_build=fast_build, timeout_sec=int(timeout_s))
    return ForkBuilder(fast_build, usable_cores(), timeout_s, say=say)


WAKE_S = 0.5  # the longest the parent waits on its children without running Python (its signal handlers)


@dataclasses.dataclass
class _Child:
    """A build process: its pid, the candidates it builds, when it must have reported next, its CPU seconds when
    last read and when they last grew (or it last reported), whether it replaces a blocked one, and the part of a
    report line read so far."""

    pid: int
    share: list[int]
    deadline: float
    cpu: float | None = None
    busy_at: float = dataclasses.field(default_factory=time.monotonic)
    replacement: bool = False
    partial: bytes = b""


@derived_object
class ForkBuilder(ms.builder.PyBuilder):
    """Build a batch in up to ``workers`` forked children (candidate i in child i mod workers); every candidate
    gets its artifact or its error, in the batch's order. ``stall_s``: see ``STALL_S``; ``say``: the tune's log."""

    def __init__(self, build: Callable, workers: int, timeout_s: float, stall_s: float = STALL_S,
                 say: Callable[[str], None] = print):
        super().__init__()
        self.f_build, self.workers, self.timeout_s = build, max(1, workers), timeout_s
        self.stall_s, self.say = stall_s, say

    def build(self, build_inputs: list) -> list:
        inputs = list(build_inputs)
        outcome: dict[int, tuple[str | None, str | None]] = {}
        children: dict[int, _Child] = {}  # read fd -> its child
        try:
            for first in range(min(self.workers, len(inputs))):
                self._start(children, inputs, list(range(first, len(inputs), self.workers)))
            self._collect(children, inputs, outcome)
        finally:
            for fd, child in children.items():  # interrupted: no child outlives the batch
                with contextlib.suppress(OSError):
                    _reap(child.pid, fd, kill=True)
        return [ms.builder.BuilderResult(*outcome[i]) for i in range(len(inputs))]

    def _start(self, children: dict, inputs: list, share: list[int], replacement: bool = False) -> None:
        read, write = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover  (the child: measured by the parent's tests)
            os.close(read)
            _child(self.f_build, inputs, share, write)
        os.close(write)
        children[read] = _Child(pid, share, time.monotonic() + self.timeout_s, replacement=replacement)

    def _collect(self, children: dict, inputs: list, outcome: dict) -> None:
        """Read every child's reports until each has ended, overrun its deadline (renewed at each report) or
        stalled (``STALL_S``)."""
        while children:
            # at most WAKE_S asleep: a Ctrl-C that another thread of this process received (a timer's, TVM's) is
            # only seen by the main thread between waits (it once waited out a hung child's whole timeout)
            timeout = max(0.0, min(WAKE_S, min(c.deadline for c in children.values()) - time.monotonic()))
            ready, _, _ = select.select(list(children), [], [], timeout)
            for fd in ready:
                chunk = os.read(fd, 1 << 16)
                child = children[fd]
                if chunk:
                    *lines, child.partial = (child.partial + chunk).split(b"\n")
                    for line in lines:
                        index, path, error = json.loads(line)
                        outcome[index] = (path, error)
                    child.deadline, child.busy_at = time.monotonic() + self.timeout_s, time.monotonic()
                    continue
                del children[fd]
                _lose(child.share, outcome, f"the build process {_ending(_reap(child.pid, fd))} while building it")
            now = time.monotonic()
            for fd, child in list(children.items()):
                if child.deadline <= now:
                    del children[fd]
                    _reap(child.pid, fd, kill=True)
                    _lose(child.share, outcome, f"Timeout, killed after {self.timeout_s:g} seconds")
                elif _stalled(child, now, self.stall_s):
                    del children[fd]
                    _reap(child.pid, fd, kill=True)
                    self._replace(children, inputs, outcome, child)

    def _replace(self, children: dict, inputs: list, outcome: dict, child: _Child) -> None:
        """A blocked child's unbuilt candidates to a fresh fork, or lost if it was one already."""
        left = [i for i in child.share if i not in outcome]
        stalled = f"used no CPU for {self.stall_s:g} s (blocked, not building)"
        if child.replacement:
            _lose(left, outcome, f"the build process {stalled}; killed")
            return
        self.say(f"[tune] a build process {stalled}: killed; its {len(left)} unbuilt candidates go to a new one")
        self._start(children, inputs, left, replacement=True)


def _cpu_seconds(pid: int) -> float | None:
    """The CPU time process ``pid`` and its descendants (a build links its artifact in a compiler process) have
    used, or None where it cannot be read."""
    try:
        proc = psutil.Process(pid)
        times = [proc.cpu_times()] + [c.cpu_times() for c in proc.children(recursive=True)]
    except psutil.Error:
        return None
    return sum(t.user + t.system + t.children_user + t.children_system for t in times)


def _stalled(child: _Child, now: float, stall_s: float) -> bool:
    """Whether ``child``'s CPU time has stood still for ``stall_s`` (the reading is updated here)."""
    cpu = _cpu_seconds(child.pid)
    if cpu is None or cpu != child.cpu:
        child.cpu, child.busy_at = cpu, now
        return False
    return now - child.busy_at >= stall_s


def _lose(share: list[int], outcome: dict, cause: str) -> None:
    """A child ended before reporting all of ``share``: its next candidate is the one that ended it, the rest were
    never built."""
    missing = [i for i in share if i not in outcome]
    for index in missing:
        outcome[index] = (None, f"ForkBuilder: {cause}" if index == missing[0] else
                          "ForkBuilder: not built: an earlier candidate of its build process ended that process")


def _child(build: Callable, inputs: list, share: list[int], fd: int) -> None:
    """Never returns: build each candidate of ``share``, write ``[index, artifact, error]`` per line, ``os._exit``."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends the child; the parent reaps it
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for index in share:
            item = inputs[index]
            try:
                path, error = default_export(build(item.mod, item.target, None)), None
            except Exception as e:  # noqa: BLE001  (a candidate that does not build is that candidate's result)
                path, error = None, "ForkBuilder: An exception occurred\n" + "".join(
                    traceback.format_exception_only(type(e), e)).strip()
            data = (json.dumps([index, path, error]) + "\n").encode()
            while data:
                data = data[os.write(fd, data):]
        code = 0
    finally:
        os._exit(code)


def _reap(pid: int, fd: int, kill: bool = False) -> int:
    """Close child ``pid``'s pipe, kill it first if ``kill``, and reap it; its wait status."""
    os.close(fd)
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


def _ending(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with code {os.WEXITSTATUS(status)}"
