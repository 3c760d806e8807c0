"""``bench``'s worker processes: TVM and each peer run in a process of their own, so no two thread pools (TVM's,
torch's OpenMP, OpenBLAS's) ever share the cores, and the bench process drives them over pipes.

Protocol: the parent starts ``python -c 'from mtp_tvm.tools.bench.worker import serve; serve()'`` and writes
frames (an 8-byte length, then a pickle) to its stdin; the worker answers on a duplicate of its stdout (fd 1
itself is pointed at stderr, so a library that prints cannot corrupt a frame). The first frame is a *job*, a
picklable object whose ``open()`` returns the object served (unpickling it imports what the timed code needs);
the worker answers its pid. Every later frame is ``(method, args)``, answered ``("ok", value)``,
``("raise", MtpError)`` (re-raised in the parent as it is) or ``("fail", "Type: message")`` (a bug or a
library error: ``WorkerFailed``, the traceback in the worker's stderr). End of input ends the worker.

Workers die with the parent: each is its own process group, killed whole (a compile pool included) when the
bench ends, fails or is interrupted; and the kernel kills a worker whose parent dies, even by SIGKILL
(``PR_SET_PDEATHSIG``; elsewhere a thread watches the parent pid). A worker that dies is reported with the tail
of its stderr (a file next to the inputs), never waited for: the parent polls the process while it reads.

Between two timed batches the parent lets the previous worker go quiet (``Worker.settle``): OpenBLAS's threads
spin about 0.1 s after a call and would steal the next worker's cores.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil

from ...compiler.arrays import read_npz, write_npz
from ...support.errors import MtpError

_HEADER = struct.Struct("<Q")
_PR_SET_PDEATHSIG = 1
PARENT_ENV = "MTP_BENCH_PARENT"
THREAD_ENVS = ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# set on some hosts, read by numpy's OpenBLAS at import, and they slow a current one: the numpy peer's figure
# would be the host's setting, not numpy's, so no worker inherits them
OPENBLAS_SLOW_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
STDERR_TAIL_LINES = 20
REAP_S = 1.0  # how long close waits for a killed group to be gone (its members reaped by init)
CLOSE_GRACE_S = 2.0  # how long a worker's group has to end on SIGTERM (a compiler removing its files) before SIGKILL
SETTLE_WINDOW_S, SETTLE_LIMIT_S = 0.02, 0.5  # quiet: under a quarter of a core over a window; wait at most this
SAMPLE_MS, SIZING_MS, MAX_CALLS = 50.0, 10.0, 10_000  # a timed batch lasts about SAMPLE_MS (``calls_per_batch``)
EXAMPLE = "example"  # the sweep key of a race at one size: a module file's example inputs (not a token count)


class WorkerFailed(MtpError):
    """A worker crashed, hung or raised something that is not a user error: the bench cannot give its figures.
    ``summary`` is the one line that says which and how; the message adds the end of its stderr."""

    exit_code = 3

    def __init__(self, summary: str, stderr_tail: str = ""):
        super().__init__(summary + (f"; the end of its stderr:\n{stderr_tail}" if stderr_tail else ""))
        self.summary = summary


# ---- frames -----------------------------------------------------------------------------------------------

def _send(fd: int, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, size: int, ready) -> bytes | None:
    """``size`` bytes from ``fd``, or None at end of input; ``ready()`` waits until ``fd`` can be read."""
    chunks, left = [], size
    while left:
        ready()
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(fd: int, ready=lambda: None):
    header = _read_exactly(fd, _HEADER.size, ready)
    if header is None:
        return None
    data = _read_exactly(fd, _HEADER.unpack(header)[0], ready)
    if data is None:
        return None
    return pickle.loads(data)


# ---- the inputs every worker reads ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class InputFiles:
    """The case's inputs as ``.npz`` files in ``folder``: the weights once (shared by every T), the activations
    (token-major inputs) once per T. ``dtypes`` (name -> dtype name) reads BF16 back as BF16."""

    folder: str
    dtypes: dict[str, str]
    activations: tuple[str, ...]

    @classmethod
    def write(cls, folder: Path, dtypes: dict[str, str], activations: tuple[str, ...],
              per_tokens: dict[int, dict[str, np.ndarray]]) -> InputFiles:
        files = cls(str(folder), dtypes, activations)
        first = next(iter(per_tokens.values()))
        write_npz(files.path("weights"), {k: v for k, v in first.items() if k not in activations})
        for tokens, arrays in per_tokens.items():
            write_npz(files.path(f"tokens-{tokens}"), {k: arrays[k] for k in activations})
        return files

    def path(self, stem: str) -> Path:
        return Path(self.folder) / f"{stem}.npz"

    def weights(self) -> dict[str, np.ndarray]:
        return read_npz(self.path("weights"), self.dtypes)

    def activations_of(self, tokens: int) -> dict[str, np.ndarray]:
        return read_npz(self.path(f"tokens-{tokens}"), self.dtypes)


@dataclasses.dataclass
class Ready:
    """A worker's answer to ``setup``, per name it times (a peer: itself; TVM: each build) and T: its
    output (the case's last, as FP32, for the check against the golden) or why it cannot run; its compile
    seconds, apart from every timed figure (a float: once for every T; a dict: per T); and ``details`` that only
    this worker can tell (numpy's BLAS; the TVM build's instructions)."""

    outputs: dict[str, dict[int, np.ndarray]] = dataclasses.field(default_factory=dict)
    unavailable: dict[str, dict[int, str]] = dataclasses.field(default_factory=dict)
    compile_seconds: dict[str, float | dict[int, float]] = dataclasses.field(default_factory=dict)
    details: dict = dataclasses.field(default_factory=dict)


def calls_per_batch(batch_ms: Callable[[int], float], number: int | None) -> int:
    """Calls per timed batch: ``number`` when given, else enough for about ``SAMPLE_MS``. ``batch_ms(calls)``
    times a batch (ms per call); batches of 1, 2, 4 ... calls run until one lasts ``SIZING_MS`` (one call alone
    is too noisy on a loaded machine), which also warms the timed code up."""
    calls = 1
    while (ms := batch_ms(calls)) * calls < SIZING_MS and calls < MAX_CALLS:
        calls *= 2
    return number or max(1, min(MAX_CALLS, math.ceil(SAMPLE_MS / max(ms, 1e-4))))


# ---- the parent's side ------------------------------------------------------------------------------------

class Worker:
    """One worker process serving ``job`` (see the module docstring); ``call`` runs a method of it there."""

    def __init__(self, name: str, job, threads: int, folder: Path, env: dict[str, str] | None = None):
        self.name = name
        self.stderr_path = folder / f"worker-{name}.stderr"
        package_root = str(Path(__file__).resolve().parents[3])  # the worker imports this very package
        inherited = {k: v for k, v in os.environ.items() if k not in OPENBLAS_SLOW_VARS}
        environ = {**inherited, **dict.fromkeys(THREAD_ENVS, str(threads)), **(env or {}),
                   PARENT_ENV: str(os.getpid()),
                   "PYTHONPATH": os.pathsep.join(filter(None, (package_root, os.environ.get("PYTHONPATH"))))}
        with open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from mtp_tvm.tools.bench.worker import serve; serve()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=environ, start_new_session=True)
        self._in, self._out = self.process.stdin.fileno(), self.process.stdout.fileno()
        self.pid = self.process.pid
        self._closed = False
        _send(self._in, job)

    def opened(self) -> int:
        """Wait until the worker has imported and opened its job; its pid (which it reports itself)."""
        return self._reply(None)

    def call(self, method: str, *args, timeout: float | None = None):
        """``method(*args)`` on the served object; its value, or its ``MtpError`` raised here."""
        try:
            _send(self._in, (method, args))
        except BrokenPipeError:
            pass  # it died: the reply read says how
        return self._reply(timeout)

    def _reply(self, timeout: float | None):
        deadline = None if timeout is None else time.monotonic() + timeout

        def ready():
            while not select.select([self._out], [], [], 0.5)[0]:
                if self.process.poll() is not None:
                    raise self._failed(f"exited with code {self.process.returncode}")
                if deadline is not None and time.monotonic() > deadline:
                    raise self._failed(f"gave no answer in {timeout:.0f} s")

        reply = _receive(self._out, ready)
        if reply is None:
            self.process.wait(timeout=5)
            raise self._failed(f"exited with code {self.process.returncode}")
        kind, value = reply
        if kind == "raise":
            raise value
        if kind == "fail":
            raise self._failed(value)
        return value

    def _failed(self, what: str) -> WorkerFailed:
        self.close()
        return WorkerFailed(f"the {self.name} worker {what}", self.stderr_tail())

    def stderr_tail(self) -> str:
        try:
            lines = self.stderr_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(unreadable)"
        return "\n".join(lines[-STDERR_TAIL_LINES:]) or "(empty)"

    def settle(self) -> None:
        """Wait until the worker's threads stop using the CPU (spinning pools after a batch), at most
        ``SETTLE_LIMIT_S``; CPU time is read from the kernel (``psutil``), in clock ticks."""
        try:
            proc = psutil.Process(self.pid)
            used = lambda: sum(proc.cpu_times()[:2])  # noqa: E731  (user + system, every thread)
            last, deadline = used(), time.monotonic() + SETTLE_LIMIT_S
            while time.monotonic() < deadline:
                time.sleep(SETTLE_WINDOW_S)
                now = used()
                if now - last < SETTLE_WINDOW_S / 4:
                    return
                last = now
        except psutil.Error:
            return  # gone: the next call reports it

    def close(self) -> None:
        """End the worker's whole process group (a compile pool it started included), once, and reap it: SIGTERM
        first, so that a compiler it runs removes its temporary files (gcc's ``ccXXXX.s``), then SIGKILL for
        whatever is left after ``CLOSE_GRACE_S``."""
        if self._closed:
            return
        self._closed = True
        _end_group(self.process)
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass


def _end_group(process: subprocess.Popen) -> None:
    """SIGTERM to the process group ``process`` leads, SIGKILL to what is still in it after ``CLOSE_GRACE_S``;
    ``process`` reaped."""
    deadline = time.monotonic() + CLOSE_GRACE_S
    try:
        os.killpg(process.pid, signal.SIGTERM)
        while time.monotonic() < deadline:
            if process.poll() is not None:
                os.killpg(process.pid, 0)  # raises once every process of the group is gone
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        gone = time.monotonic() + REAP_S  # SIGKILL is delivered asynchronously: wait for the rest of the group
        while time.monotonic() < gone:
            os.killpg(process.pid, 0)  # raises once every process of the group is gone
            time.sleep(0.01)
    except ProcessLookupError:
        pass  # it and everything it started are gone
    process.wait()


# ---- the worker's side ------------------------------------------------------------------------------------

def _die_with_parent(parent: int) -> None:
    """Be killed by the kernel when the bench process dies (Linux), else watch its pid from a thread."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        def watch():
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent:  # it died before the death signal was armed
        os._exit(1)


def _answer(work) -> tuple:
    """``work()`` as a reply frame (see the module docstring)."""
    try:
        return "ok", work()
    except MtpError as e:
        return "raise", e
    except Exception as e:  # noqa: BLE001  (a bug or a library's error: the parent reports it, stderr keeps the trace)
        traceback.print_exc()
        lines = str(e).strip().splitlines()
        return "fail", f"raised {type(e).__name__}" + (f": {lines[0]}" if lines else "")
    finally:
        sys.stderr.flush()


def serve() -> None:
    """The worker's main loop (see the module docstring)."""
    _die_with_parent(int(os.environ[PARENT_ENV]))
    warnings.filterwarnings("ignore", message="mtp_tvm made numpy weight")  # its arrays are its own
    replies = os.dup(1)
    os.dup2(2, 1)  # prints of the timed code's libraries go to stderr, never into a frame
    job = _receive(0)
    if job is None:
        return
    kind, served = _answer(job.open)
    _send(replies, ("ok", os.getpid()) if kind == "ok" else (kind, served))
    while kind == "ok" and (message := _receive(0)) is not None:
        method, args = message
        _send(replies, _answer(lambda method=method, args=args: getattr(served, method)(*args)))
