"""``bisect``: the first pass (or schedule step) after which the golden check fails (``tools/bisect``)."""

from __future__ import annotations

import argparse

from ..support.errors import UsageError
from ..tools.bisect.search import BisectSearch
from .common import add_build_args, build_spec, debug_options, module_options, refuse_case_options


def _cmd_bisect(args) -> int:
    if args.module:
        return _cmd_bisect_module(args)
    spec, debug = build_spec(args), debug_options(args)
    from ..tools.bisect.bisection import bisect_passes, bisect_schedule

    if debug.bisect_limit is not None:
        raise UsageError("bisect chooses the --bisect-limit itself; drop it")
    if args.func and not args.schedule_trace:
        raise UsageError("--func names the PrimFunc of a --schedule-trace; give the trace, or drop --func")
    if args.schedule_trace:
        if not args.func:
            raise UsageError("--schedule-trace needs --func NAME (the PrimFunc the trace schedules)")
        try:
            text = open(args.schedule_trace).read()
        except OSError as e:
            raise UsageError(f"cannot read schedule trace {args.schedule_trace}: {e.strerror}") from None
        result = bisect_schedule(args.func, text, spec, seed=args.seed, search=args.search)
    else:
        result = bisect_passes(spec, debug.replace(dump_passes=None), seed=args.seed, search=args.search)
    _print_bisect(result)
    if result.found and result.limits and args.dump_passes:
        from ..tools.check.check import check

        r = check(spec, debug.replace(bisect_limit=result.limits[1]), seed=args.seed, log=lambda *_: None)
        stem = next(p.diff for p in r.pass_records if p.index == result.culprit["index"])
        print(f"dumps of the first failing build: {r.dump_dir} (the culprit's diff: {r.dump_dir}/{stem})")
    return 0 if result.found else 1


def _print_bisect(result) -> None:
    kinds = "passes" if result.kind == "pass" else result.kind + "s"
    print(f"bisect over {result.candidates} candidate {kinds}, {len(result.probes)} builds (search: {result.search})")
    print(("FOUND " if result.found else "NOT FOUND: ") + result.message)


def _cmd_bisect_module(args) -> int:
    """``bisect --module FILE.py``: the first optional pass after which the file's check fails."""
    refuse_case_options(args)
    if args.schedule_trace or args.func:
        raise UsageError("bisect --module bisects passes; --schedule-trace/--func apply to a case")
    debug = debug_options(args)
    from ..tools.bisect.bisection import bisect_module_passes

    result = bisect_module_passes(debug=debug.replace(dump_passes=None), search=args.search, **module_options(args))
    _print_bisect(result)
    if result.found and result.limits and args.dump_passes:
        from ..tools.check.module_check import check_module

        r = check_module(debug=debug.replace(bisect_limit=result.limits[1]), log=lambda *_: None,
                         **module_options(args))
        stem = next(p.diff for p in r.pass_records if p.index == result.culprit["index"])
        print(f"dumps of the first failing build: {r.dump_dir} (the culprit's diff: {r.dump_dir}/{stem})")
    return 0 if result.found else 1


def add_bisect_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bisect", parents=[common], help="name the first pass (or schedule step) after which the "
                                                        "golden check fails (also "
                       "of a --module FILE.py)")
    add_build_args(p)
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    p.add_argument("--search", choices=BisectSearch.names(), default=BisectSearch.BINARY.value,
                   help="binary: log2(n) builds, exact when failure is monotone; linear: every prefix")
    p.add_argument("--schedule-trace", metavar="FILE",
                   help="bisect the steps of this schedule trace (Python text of str(sch.trace)) instead of passes")
    p.add_argument("--func", metavar="NAME", help="the PrimFunc that --schedule-trace schedules")
    p.set_defaults(handler=_cmd_bisect)
