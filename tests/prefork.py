"""A fork server for the tests' ``mtp-tvm`` and ``python`` processes: each is a real process with its own pid, argv,
cwd, environment, standard streams, exit code and signals, but forked from a server that imported TVM, torch and
mtp_tvm once, instead of importing them again (about 3 s of CPU a process on two cores; the guides alone start
some 70 of them).

``Prefork(folder)`` writes two shims, ``mtp-tvm`` and ``python``, and runs the server (``python tests/prefork.py
SOCKET TEST_PID``). The shims run ``prefork_client.py``: the client hands the server its argv, cwd, environment
and its stdin, stdout and stderr (SCM_RIGHTS), forwards the signals it gets to the forked child, and ends as the
child ended (its exit code, or killed by the same signal). A client that dies (``timeout=`` kills it) takes the child's
process group with it.

What a forked child does not re-do is the import: what TVM, torch or mtp_tvm read from the environment while
importing is the server's. Tests of that (``TVM_NUM_THREADS``, the import cost of ``--help``, the console script,
seeds across fresh processes) start plain processes. ``MTP_TVM_TEST_PREFORK=0`` makes every shim exec a plain
``python``, to rule the server out."""

from __future__ import annotations

import atexit
import ctypes
import io
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import traceback
import types
from pathlib import Path

CLIENT = Path(__file__).with_name("prefork_client.py")
ENABLED = os.environ.get("MTP_TVM_TEST_PREFORK", "1") != "0"
READY = "prefork: ready"
_PR_SET_PDEATHSIG = 1
SHIM = """#!/bin/sh
exec {python} -S -I {client} {socket} {mode} "$@"
"""


class Prefork:
    """One server for one test process (an xdist worker): ``python`` is the argv prefix that runs like
    ``sys.executable``, ``bin`` the folder of the shims to put first on ``PATH``."""

    def __init__(self, folder: Path):
        self.socket = folder / "prefork.sock"
        if len(str(self.socket)) > 100:  # a Unix socket's path holds at most 107 bytes
            self.socket = Path(tempfile.mkdtemp(prefix="prefork-")) / "s"
        self.bin = folder / "bin"
        self.bin.mkdir()
        for name, mode in (("python", "python"), ("mtp-tvm", "console")):
            shim = self.bin / name
            shim.write_text(SHIM.format(python=sys.executable, client=CLIENT, socket=self.socket, mode=mode)
                            if ENABLED else f'#!/bin/sh\nexec {_plain(name)} "$@"\n')
            shim.chmod(0o755)
        self.python = [str(self.bin / "python")]
        self.server = None
        if ENABLED:
            self.server = subprocess.Popen([sys.executable, __file__, str(self.socket), str(os.getpid())],
                                           stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
            line = self.server.stdout.readline().strip()
            if line != READY:
                self.close()
                raise RuntimeError(f"the prefork server did not start (said {line!r})")

    def env(self, env: dict | None = None) -> dict:
        """``env`` (default: this process's) with the shims first on ``PATH``, then the venv's programs."""
        env = dict(os.environ if env is None else env)
        return env | {"PATH": os.pathsep.join((str(self.bin), str(Path(sys.executable).parent), env.get("PATH", "")))}

    def close(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()
            self.server.wait(timeout=30)


def _plain(name: str) -> str:
    return sys.executable if name == "python" else str(Path(sys.executable).with_name(name))


# ---- the server's side --------------------------------------------------------------------------------------

def _preload() -> None:
    """What a command imports, imported once: TVM, torch, every module of mtp_tvm (not its ``__main__``) and the
    torch modules a ``--module`` command imports to export and load a torch model."""
    import pkgutil

    import torch  # noqa: F401
    import tvm  # noqa: F401

    import mtp_tvm

    for module in pkgutil.walk_packages(mtp_tvm.__path__, "mtp_tvm."):
        if not module.name.endswith("__main__"):
            __import__(module.name)
    from mtp_tvm.ir.module_file import TORCH_EXPORT_MODULES

    for name in TORCH_EXPORT_MODULES:
        __import__(name)
    _parse_tiny_kernels()


def _parse_tiny_kernels() -> None:
    """The hand TIR kernels of every case at the tiny preset (most commands' size) and the CPU dot intrinsics,
    parsed once: each is TVMScript parsed on first use and then cached per process (``functools.cache``), so a
    child skips 0.3 s of a 1.1-1.4 s ``check --case tail --preset tiny``; a command at another size parses its own."""
    from mtp_tvm.contract.cases import CASES, get_case
    from mtp_tvm.contract.presets import make_shapes
    from mtp_tvm.ir.model import build_relax_module
    from mtp_tvm.schedule.bf16_dot import register_dot_intrinsics

    for case in CASES:
        build_relax_module(get_case(case), make_shapes("tiny"), "tir")
    register_dot_intrinsics()


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """A client's request and its three standard streams' fds (closed here if the request is cut short)."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    try:
        size = int.from_bytes(data[:8], "big")
        data = data[8:]
        while len(data) < size:
            more = conn.recv(size - len(data))
            if not more:
                raise ConnectionError("the client went away while sending its request")
            data += more
        if len(fds) != 3:
            raise ConnectionError(f"the client sent {len(fds)} fds, not its stdin, stdout and stderr")
        return json.loads(data), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def serve(path: str, parent: int) -> None:
    """Serve until SIGTERM or the death of ``parent`` (the test process)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        return
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print(READY, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # child pid -> its client's connection
    try:
        while True:
            for key, _ in selector.select(timeout=0.02):
                if key.fileobj is listener:
                    conn, _ = listener.accept()
                    _start(conn, listener, selector, children)
                else:
                    _from_client(key.data, key.fileobj, selector)
            _reap(children, selector)
    finally:
        for pid in children:
            _kill_group(pid)


def _start(conn: socket.socket, listener: socket.socket, selector: selectors.BaseSelector,
           children: dict[int, socket.socket]) -> None:
    """Fork the child a new client asks for; a client that went away or a failed fork closes its connection
    (its client then ends with exit 1), never the server."""
    try:
        request, fds = _receive(conn)
    except (OSError, ValueError) as e:  # ValueError: a request cut short
        return _drop(conn, e)
    try:
        pid = os.fork()
    except OSError as e:
        for fd in fds:
            os.close(fd)
        return _drop(conn, e)
    if pid == 0:
        selector.close()
        listener.close()
        for other in children.values():
            other.close()
        conn.close()
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    selector.register(conn, selectors.EVENT_READ, pid)
    try:
        conn.sendall(f"pid {pid}\n".encode())
    except OSError:
        pass  # its client died: the next select sees it


def _drop(conn: socket.socket, error: Exception) -> None:
    print(f"prefork: a request dropped: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    conn.close()


def _from_client(pid: int, conn: socket.socket, selector: selectors.BaseSelector) -> None:
    """A signal to forward, or the client's end: then the child's whole group is killed."""
    try:
        message = conn.recv(64)
    except OSError:
        message = b""
    if not message:
        _kill_group(pid)
        selector.unregister(conn)
    for line in message.decode().split("\n"):
        if line.startswith("sig "):
            _signal(pid, int(line[4:]))


def _reap(children: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid)
        try:
            conn.sendall(f"exit {status}\n".encode())
        except OSError:
            pass  # its client died
        try:
            selector.unregister(conn)
        except KeyError:
            pass  # already, when its client died
        conn.close()


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---- the forked child's side --------------------------------------------------------------------------------

def _streams(fds: list[int], unbuffered: bool) -> None:
    """The request's stdin, stdout and stderr as fds 0-2, and ``sys.std*`` made anew over them as Python's
    start-up would (``PYTHONUNBUFFERED`` included)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)

    def text(fd: int, mode: str, stderr: bool = False) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        tty = raw.isatty()
        binary = raw if unbuffered and mode == "w" else (io.BufferedWriter(raw) if mode == "w"
                                                         else io.BufferedReader(raw))
        return io.TextIOWrapper(binary, encoding="utf-8", errors="backslashreplace" if stderr else "strict",
                                line_buffering=tty or stderr, write_through=unbuffered and mode == "w")

    sys.stdin, sys.stdout, sys.stderr = text(0, "r"), text(1, "w"), text(2, "w", stderr=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _child(request: dict, fds: list[int]) -> None:
    """Become ``python ARGV`` (``-m MODULE``, ``-c CODE``, ``SCRIPT``) or the console script ``mtp-tvm``; never
    returns."""
    os.setpgid(0, 0)
    for signum in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(request["env"])
    _streams(fds, bool(os.environ.get("PYTHONUNBUFFERED")))
    os.chdir(request["cwd"])
    code = _run(request["mode"], request["argv"])
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _run(mode: str, argv: list[str]) -> int:
    try:
        if mode == "console":
            from mtp_tvm.cli import main

            sys.argv = ["mtp-tvm", *argv]
            sys.path[0] = str(Path(sys.executable).parent)
            return _exit_code(main())
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[0] = ""
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        return 0
    except SystemExit as e:
        return _exit_code(e.code)
    except KeyboardInterrupt:  # as Python does: the traceback, then killed by SIGINT
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
