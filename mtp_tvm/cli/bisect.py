"""``bisect``: the first pass (or schedule step) after which the golden check fails (``tools/bisect``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..compiler.options import DebugOptions
from ..support.flags import Flag, flag_names
from ..tools.bisect.search import BisectSearch
from .common import (
    SEED,
    Refusal,
    add_build_args,
    add_tolerance_args,
    build_spec,
    debug_options,
    refuse,
    source_spec,
    tolerance_of,
)

SEARCH = Flag("search", "binary: log2(n) builds, exact when failure is monotone; linear: every prefix",
              choices=BisectSearch.names(), default=BisectSearch.BINARY.value)
SCHEDULE_TRACE = Flag("schedule_trace", "bisect the steps of this schedule trace (Python text of str(sch.trace)) "
                      "instead of passes", metavar="FILE")
FUNC = Flag("func", "the PrimFunc that --schedule-trace schedules", metavar="NAME")


def _cmd_bisect(args) -> int:
    if args.schedule_trace or args.func:
        return _cmd_bisect_schedule(args)
    spec, debug = source_spec(args), debug_options(args)
    from ..tools.bisect.bisection import bisect_passes

    return _print_bisect(bisect_passes(spec, debug, seed=args.seed, tolerance=tolerance_of(args),
                                      search=args.search))


def _cmd_bisect_schedule(args) -> int:
    """``bisect --schedule-trace FILE --func NAME``: the first step of a case's kernel schedule that fails."""
    refuse(args, Refusal("bisect --module bisects passes; --schedule-trace/--func apply to a case",
                         when=lambda args: args.module),
           Refusal("--func names the PrimFunc of a --schedule-trace; give the trace, or drop --func",
                   when=lambda args: not args.schedule_trace),
           Refusal("--schedule-trace bisects a trace's steps, so {flags} cannot apply; drop them",
                   flag_names(DebugOptions, "debug")),  # a trace's steps are bisected, not passes
           Refusal("--schedule-trace needs --func NAME (the PrimFunc the trace schedules)",
                   when=lambda args: not args.func))
    spec = build_spec(args)
    from ..tools.bisect.bisection import bisect_schedule

    return _print_bisect(bisect_schedule(args.func, Path(args.schedule_trace), spec, seed=args.seed,
                                         tolerance=tolerance_of(args), search=args.search))


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
    for flag in (SEARCH, SCHEDULE_TRACE, FUNC):
        flag.add_to(p)
    p.set_defaults(handler=_cmd_bisect)
