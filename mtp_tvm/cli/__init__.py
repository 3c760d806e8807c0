"""``mtp-tvm``: a thin argparse layer over the Python API. Exit codes: 0 ok, 1 golden check failed,
2 usage/input error, 3 build failed, 130 interrupted.

One module per wing of the tools (``check``, ``bisect``, ``tune``, ``bench``, ``dumps``; ``artifact`` for
build/run, ``cases`` for list/inputs, ``convert``); each command parses, makes the options, makes one API call
(after reading ``--weights`` where given) and prints. Flags of a dataclass's fields are declared with the field
(``support.flags``); ``common`` holds what the wings share. A bad value is refused by the API (the same message
a Python caller gets); the CLI refuses only flag combinations, a flag given where it cannot apply. Only the
modules the parser needs load with it: each handler imports what it needs, so ``--help``, ``list``,
``dumps ...`` and usage errors never import TVM or torch (tests/test_cli.py measures it)."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import signal
import sys
import threading
import traceback
import warnings

from ..support.errors import MtpError, UsageError
from ..support.flags import Flag
from ..support.native_log import VERBOSE_ENV
from ..support.timing import start
from .artifact import add_build_command, add_run_command
from .bench import add_bench_command
from .bisect import add_bisect_command
from .cases import add_inputs_command, add_list_command
from .check import add_check_command, add_localize_command, add_minimize_command
from .common import Parser
from .convert import add_convert_command
from .dumps import add_dumps_command
from .tune import add_tune_command

DEBUG = Flag("debug", "show tracebacks for errors")
VERBOSE = Flag("verbose", "let TVM's and LLVM's own log lines through (otherwise kept in the run folder's tvm.log)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="mtp-tvm", description="DeepSeek-V4 MTP decode tail on Apache TVM")
    common = Parser(add_help=False)  # also after the subcommand (there not set: the above's)
    for p in (parser, common):
        for flag in (DEBUG, VERBOSE):
            flag.add_to(p, **({"default": argparse.SUPPRESS} if p is common else {}))
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (add_check_command, add_localize_command, add_tune_command, add_build_command, add_run_command,
                add_bench_command, add_inputs_command, add_convert_command, add_list_command, add_dumps_command,
                add_bisect_command, add_minimize_command):
        add(sub, common)
    return parser


def _process_startup() -> float:
    """Seconds this process ran before the command started (the interpreter, the parser's imports), counted as
    import in the time line: its age from ``/proc`` (to the 10 ms tick; psutil rounds the boot time to whole
    seconds); 0 where there is no ``/proc``."""
    try:
        started = int(open("/proc/self/stat").read().rpartition(")")[2].split()[19])  # field 22: starttime
        return max(float(open("/proc/uptime").read().split()[0]) - started / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


_signalled: list[int] = []  # the interrupting signals the running command received


def _interrupt(signum, _frame):
    """Ctrl-C, and SIGTERM (a job scheduler, ``kill``), unwind as KeyboardInterrupt, so temporary folders and files
    are removed. The signal is remembered: it can land inside library code that turns the KeyboardInterrupt into
    another error (threading's ``Condition.__exit__`` inside ``ThreadPoolExecutor.submit`` then raises "release
    unlocked lock"), and the command was interrupted all the same."""
    _signalled.append(signum)
    raise KeyboardInterrupt


def _interrupted(error: BaseException) -> int:
    _free_interrupted_frames(error)
    print("mtp-tvm: interrupted", file=sys.stderr)
    return 130


def _free_interrupted_frames(interrupt: BaseException) -> None:
    """Drop what the interrupted frames hold now, each failing ``__del__`` said in one line, not a traceback: an
    interrupt can land inside a constructor (TVM's ``TempDirectory`` between ``mkdtemp`` and setting ``temp_dir``),
    and that half-made object's ``__del__`` then raises when it is collected."""
    def one_line(unraisable):
        print(f"mtp-tvm: note: after the interrupt, {unraisable.exc_type.__name__} in {unraisable.object!r} "
              f"({unraisable.exc_value})", file=sys.stderr)

    previous, sys.unraisablehook = sys.unraisablehook, one_line
    try:
        traceback.clear_frames(interrupt.__traceback__)
        interrupt.__traceback__ = None
    finally:
        sys.unraisablehook = previous


def main(argv: list[str] | None = None) -> int:
    """Run one command. As a program (``argv`` None: ``mtp-tvm``, ``python -m mtp_tvm``) the process ends as
    soon as its output is out: the interpreter's teardown of TVM's and torch's objects takes seconds (2-7 s on a
    2-core machine) and does nothing a command needs; atexit handlers still run."""
    code = _run(argv)
    if argv is None:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe (``| head``)
                stream.flush()
        os._exit(code)
    return code


def _refuse_empty_values(args) -> None:
    """An empty path (``--module ''``) used to read as no option at all: the default case checked, nothing dumped."""
    for name in ("module", "dump_passes"):
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            raise UsageError(f"--{name.replace('_', '-')} needs a value, got an empty one")


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except MtpError as e:  # a flag's word its type refuses (``--tokens 1,x``): one line, as the API's refusals
        print(f"mtp-tvm: error: {e}", file=sys.stderr)
        return e.exit_code
    start(_process_startup())
    if args.verbose:
        os.environ[VERBOSE_ENV] = "1"
    # the arrays a command passes are its own (read from files): the warning is for an API caller's arrays
    warnings.filterwarnings("ignore", message="mtp_tvm made numpy weight")
    on_main_thread = threading.current_thread() is threading.main_thread()
    _signalled.clear()
    previous = {number: signal.signal(number, _interrupt) for number in (signal.SIGINT, signal.SIGTERM)
                if on_main_thread and signal.getsignal(number) is not signal.SIG_IGN}  # nohup, `cmd &`: kept ignored
    try:
        _refuse_empty_values(args)
        return args.handler(args)
    except KeyboardInterrupt as interrupt:
        return _interrupted(interrupt)
    except MtpError as e:
        if _signalled:
            return _interrupted(e)
        if args.debug:
            traceback.print_exc()
        print(f"mtp-tvm: error: {e}", file=sys.stderr)
        return e.exit_code
    except SystemExit as e:  # nothing of ours exits inside a handler: user code (a plugin) did; never a success
        if args.debug:
            traceback.print_exc()
        print(f"mtp-tvm: error: user code called sys.exit({e.code!r}) during {args.command}; nothing was "
              "completed", file=sys.stderr)
        return 2
    except Exception as e:
        if _signalled:
            return _interrupted(e)
        raise
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
