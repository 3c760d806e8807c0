"""``bisect``: the first pass (or schedule step) after which the golden check fails (``tools/bisect``)."""

from __future__ import annotations

import argparse

from ..compiler.options import DebugOptions
from ..support.errors import UsageError
from ..support.flags import flag_names
from ..tools.bisect.search import BisectSearch
from .common import (
    SEED,
    add_build_args,
    add_tolerance_args,
    build_spec,
    debug_options,
    given_flags,
    source_spec,
    tolerance_of,
)


def _cmd_bisect(args) -> int:
    if args.schedule_trace or args.func:
        return _cmd_bisect_schedule(args)
    spec, debug = source_spec(args), debug_options(args)
    from ..tools.bisect.bisection import bisect_passes

    return _print_bisect(bisect_passes(spec, debug, seed=args.seed, tolerance=tolerance_of(args),
                                      search=args.search))


def _cmd_bisect_schedule(args) -> int:
    """``bisect --schedule-trace FILE --func NAME``: the first step of a case's kernel schedule that fails."""
    if args.module:
        raise UsageError("bisect --module bisects passes; --schedule-trace/--func apply to a case")
    if not args.schedule_trace:
        raise UsageError("--func names the PrimFunc of a --schedule-trace; give the trace, or drop --func")
    passes = given_flags(args, flag_names(DebugOptions, "debug"))  # a trace's steps are bisected, not passes
    if passes:
        raise UsageError(f"--schedule-trace bisects a trace's steps, so {', '.join(passes)} cannot apply; drop them")
    if not args.func:
        raise UsageError("--schedule-trace needs --func NAME (the PrimFunc the trace schedules)")
    spec = build_spec(args)
    try:
        text = open(args.schedule_trace).read()
    except OSError as e:
        raise UsageError(f"cannot read schedule trace {args.schedule_trace}: {e.strerror}") from None
    from ..tools.bisect.bisection import bisect_schedule

    return _print_bisect(bisect_schedule(args.func, text, spec, seed=args.seed, tolerance=tolerance_of(args),
                                        search=args.search))


def _print_bisect(result) -> int:
    """A bisect's verdict, the first failing build's dumps when asked, and the exit code: 0 found, 1 not."""
    kinds = "passes" if result.kind == "pass" else result.kind + "s"
    print(f"bisect over {result.candidates} candidate {kinds}, {len(result.probes)} builds (search: {result.search})")
    print(("FOUND " if result.found else "NOT FOUND: ") + result.message)
    if result.dump_dir:
        print(f"dumps of the first failing build: {result.dump_dir} (the culprit's diff: {result.culprit_diff})")
    return 0 if result.found else 1


def add_bisect_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bisect", parents=[common], help="name the first pass (or schedule step) after which the "
                       "golden check fails (also of a --module FILE.py)")
    add_build_args(p)
    SEED.add_to(p)
    add_tolerance_args(p)
    p.add_argument("--search", choices=BisectSearch.names(), default=BisectSearch.BINARY.value,
                   help="binary: log2(n) builds, exact when failure is monotone; linear: every prefix")
    p.add_argument("--schedule-trace", metavar="FILE",
                   help="bisect the steps of this schedule trace (Python text of str(sch.trace)) instead of passes")
    p.add_argument("--func", metavar="NAME", help="the PrimFunc that --schedule-trace schedules")
    p.set_defaults(handler=_cmd_bisect)
