"""MetaSchedule's candidate builder in forked children of the tuner.

TVM's ``LocalBuilder`` starts a fresh pool of ``python -m tvm.exec.popen_worker`` processes for every batch (and
one more to check its functions), and each imports TVM, and so torch (``tvm_ffi`` imports it): about 3 s of CPU a
process, most of a short tune's time. A fork of the tuner costs milliseconds, and the child already holds
everything a build needs (the tensor intrinsics registered, ``fast_build``'s imports). Each child builds its share
of the batch and reports every candidate on a pipe as soon as it is built, so one candidate that crashes or hangs
loses its own share's rest, never the batch: a crash is that candidate's error with the signal, and a build that
outlives ``timeout_s`` is killed and said to be one.

CPU targets only: a CUDA build in a child forked after the parent touched the CUDA driver is not safe, so GPU
tuning keeps TVM's ``LocalBuilder`` (``candidate_builder``)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder.local_builder import default_export
from tvm.target import Target

from ...passes.target import is_gpu
from ...support.load_average import usable_cores
from .kernels import fast_build

BUILD_TIMEOUT_S = 120  # one candidate's build; TVM's LocalBuilder allows 30 s, too few for a large CPU kernel


def candidate_builder(target: Target, timeout_s: float = BUILD_TIMEOUT_S):
    """The tuner's builder of candidates for ``target``: forked children on a CPU, TVM's pool on a GPU."""
    if is_gpu(target):
        return ms.builder.LocalBuilder(f_build=fast_build, timeout_sec=int(timeout_s))
    return ForkBuilder(fast_build, usable_cores(), timeout_s)


WAKE_S = 0.5  # the longest the parent waits on its children without running Python (its signal handlers)


@derived_object
class ForkBuilder(ms.builder.PyBuilder):
    """Build a batch in up to ``workers`` forked children (candidate i in child i mod workers); every candidate
    gets its artifact or its error, in the batch's order."""

    def __init__(self, build: Callable, workers: int, timeout_s: float):
        super().__init__()
        self.f_build, self.workers, self.timeout_s = build, max(1, workers), timeout_s

    def build(self, build_inputs: list) -> list:
        inputs = list(build_inputs)
        outcome: dict[int, tuple[str | None, str | None]] = {}
        children = {}  # read fd -> (pid, the indices it builds, its deadline)
        try:
            for first in range(min(self.workers, len(inputs))):
                share = list(range(first, len(inputs), self.workers))
                fd, pid = self._fork(inputs, share)
                children[fd] = (pid, share, time.monotonic() + self.timeout_s)
            self._collect(children, outcome)
        finally:
            for fd, (pid, _, _) in children.items():  # interrupted: no child outlives the batch
                with contextlib.suppress(OSError):
                    _reap(pid, fd, kill=True)
        return [ms.builder.BuilderResult(*outcome[i]) for i in range(len(inputs))]

    def _fork(self, inputs: list, share: list[int]) -> tuple[int, int]:
        read, write = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover  (the child: measured by the parent's tests)
            os.close(read)
            _child(self.f_build, inputs, share, write)
        os.close(write)
        return read, pid

    def _collect(self, children: dict, outcome: dict) -> None:
        """Read every child's reports until each has ended or overrun its deadline (renewed at each report)."""
        pending = {fd: b"" for fd in children}
        while children:
            # at most WAKE_S asleep: a Ctrl-C that another thread of this process received (a timer's, TVM's) is
            # only seen by the main thread between waits (it once waited out a hung child's whole timeout)
            timeout = max(0.0, min(WAKE_S, min(deadline for _, _, deadline in children.values()) - time.monotonic()))
            ready, _, _ = select.select(list(children), [], [], timeout)
            for fd in ready:
                chunk = os.read(fd, 1 << 16)
                pid, share, _ = children[fd]
                if chunk:
                    *lines, pending[fd] = (pending[fd] + chunk).split(b"\n")
                    for line in lines:
                        index, path, error = json.loads(line)
                        outcome[index] = (path, error)
                    children[fd] = (pid, share, time.monotonic() + self.timeout_s)
                    continue
                del children[fd]
                _lose(share, outcome, f"the build process {_ending(_reap(pid, fd))} while building it")
            for fd, (pid, share, deadline) in list(children.items()):
                if deadline <= time.monotonic():
                    del children[fd]
                    _reap(pid, fd, kill=True)
                    _lose(share, outcome, f"Timeout, killed after {self.timeout_s:g} seconds")


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
