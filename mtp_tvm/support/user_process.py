"""Running a user's file where it cannot decide the verdict: a forked child process that imports it and calls its
functions, writing what the parent needs into a temporary folder. Whatever the file does there (``os._exit``,
``sys.exit``, an exception, ``os.chdir``, a signal, changing its inputs, torch's logger writing tracebacks, starting
processes of its own) cannot end, move or mislead the parent or outlive the child (it runs in a process group of its
own, ended with it): a failure is one ``UsageError`` naming the file, the step, the function and the
line, with what the child printed on stderr as its cause (``mtp-tvm --debug`` shows it).

A fork costs milliseconds where a fresh interpreter would import torch again (seconds); the child uses one torch
thread (an OpenMP pool is not safe to use after a fork) and never returns into the parent's code."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import MtpError, UsageError

ERROR, STAGE, LOG = "error.json", "stage.txt", "stderr.log"  # what the child writes besides its results
EXIT_OK = 0


class ChildLog(Exception):
    """What the child printed on stderr (torch's own diagnostics included): the cause of its one-line error."""


def where_in(path: Path, tb=None, text: str = "") -> str:
    """``" (line N, in F)"``: the last frame of ``path`` in the traceback ``tb`` (or the stack, or the text of an
    error that quotes the user's code, as torch.export's do), "" when none is."""
    name = str(path)
    frames = [(f.lineno, f.name) for f in (traceback.extract_tb(tb) if tb is not None else traceback.extract_stack())
              if f.filename == name]
    frames += [(int(line), func) for file, line, func in
               re.findall(r'File "([^"]+)", line (\d+), in (\w+)', text) if file == name]
    return f" (line {frames[-1][0]}, in {frames[-1][1]})" if frames else ""


class Child:
    """The child's side: ``stage(name)`` before each step (``" (loading it)"``, ``": model()"``), so that a failure,
    or a process ending without a word, is named by what it was doing; a contract the file breaks is an
    ``MtpError`` raised in ``work``, reported as it is."""

    def __init__(self, folder: Path, path: Path):
        self.folder, self.path = folder, path

    def stage(self, name: str) -> None:
        (self.folder / STAGE).write_text(name)


@contextlib.contextmanager
def in_child(path: Path, work: Callable[[Child], None]) -> Iterator[Path]:
    """Run ``work(child)`` (it writes its results into ``child.folder``) in a forked child; yield that folder
    once the child succeeded (removed afterwards). Ctrl-C kills the child and is an interrupt here too."""
    folder = Path(tempfile.mkdtemp(prefix="mtp-tvm-user-"))
    try:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover  (the child: measured by the parent's tests)
            _child_main(folder, path, work)
        with contextlib.suppress(OSError):  # its own process group, set on both sides (no race with its exit)
            os.setpgid(pid, pid)
        try:
            _, status = os.waitpid(pid, 0)
        except BaseException:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            raise
        finally:  # whatever the file started (a server, a `sleep`) ends with it
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        _check_status(folder, path, status)
        log = _read(folder / LOG)
        if log:  # what torch printed: where the caller's stderr goes (a capture, or the terminal with --verbose)
            os.write(2, log.encode())
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _child_main(folder: Path, path: Path, work: Callable[[Child], None]) -> None:
    """Never returns: every way out is ``os._exit`` with the child's verdict written first."""
    code = 1
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _stderr_to(folder / LOG)
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(1)
        def recorded_exit(status):
            _write_error(folder, f"called os._exit({status!r}); user code must return, not exit{where_in(path)}")
            _real_exit(3)

        os._exit = recorded_exit
        child = Child(folder, path)
        try:
            work(child)
            code = EXIT_OK
        except MtpError as e:  # what the file returned broke its contract: our message as it is
            _write_error(folder, str(e), bare=True)
        except SystemExit as e:
            _write_error(folder, f"called sys.exit({e.code!r}); user code must return, not exit"
                                 f"{where_in(path, e.__traceback__)}")
        except BaseException as e:  # noqa: BLE001  (the user's code: its error is reported, never raised on)
            traceback.print_exc()
            text = str(e).strip()
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
            _write_error(folder, f"failed: {type(e).__name__}{': ' + first[:300] if first else ''}"
                                 f"{where_in(path, e.__traceback__, text)}")
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        _real_exit(code)


_real_exit = os._exit


def _stderr_to(path: Path) -> None:
    """fd 2, ``sys.stderr`` and every logging handler that writes to a stream other than stdout (torch's loggers
    keep the stream they found at import, maybe a capture's) into ``path``. A handler's old stream is not flushed
    (``setStream`` would): it is the parent's, maybe closed since (a test's capture), and its buffer the parent's
    to write."""
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 2)
    os.close(log)
    sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(2), "wb"), errors="backslashreplace", line_buffering=True)
    loggers = [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values()
                                      if isinstance(v, logging.Logger))]
    for handler in (h for lg in loggers for h in lg.handlers):
        if type(handler) is logging.StreamHandler and handler.stream not in (sys.stdout, sys.__stdout__):
            handler.stream = sys.stderr


def _write_error(folder: Path, message: str, bare: bool = False) -> None:
    (folder / ERROR).write_text(json.dumps({"message": message, "bare": bare}))


def _check_status(folder: Path, path: Path, status: int) -> None:
    """The child's end as the parent's verdict: success, or one ``UsageError``."""
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_OK and not (folder / ERROR).exists():
        return
    stage = _read(folder / STAGE) or " (loading it)"
    log = _read(folder / LOG)
    cause = ChildLog(log.rstrip() or "(the child printed nothing on stderr)")
    error = _read(folder / ERROR)
    if error:
        record = json.loads(error)
        message = record["message"] if record["bare"] else f"module file {path}{stage} {record['message']}"
    elif os.WIFSIGNALED(status):
        message = f"module file {path}{stage} killed its process ({signal.Signals(os.WTERMSIG(status)).name})"
    else:
        message = (f"module file {path}{stage} ended its process (exit code {os.WEXITSTATUS(status)}); user code "
                   "must return, not exit")
    raise UsageError(message) from cause


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
