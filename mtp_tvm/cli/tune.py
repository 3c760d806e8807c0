"""``tune``: MetaSchedule over a case's or a module file's kernels (``tools/tune``)."""

from __future__ import annotations

import argparse
import sys

from ..compiler.options import BuildSpec
from ..support.flags import add_flags, options_from
from ..tools.tune.options import TuneOptions
from .common import (
    add_module_arg,
    add_rpc_args,
    add_spec_args,
    add_target_args,
    case_flags_refused,
    refuse,
    rpc_of,
)


def _cmd_tune(args) -> int:
    spec = options_from(args, BuildSpec)
    if args.module:
        refuse(args, case_flags_refused(keep=("seed",)))  # the search's seed
    else:
        spec.resolve()
    rpc = rpc_of(args)
    options = options_from(args, TuneOptions, rpc=rpc, module=args.module)
    from ..tools.tune.tune import tune

    r = tune(spec, options, log=lambda line: print(line, file=sys.stderr))
    print(f"tuned {args.module or args.case} for {args.target}: {r.trials} trials in {r.seconds:.0f}s "
          f"({r.seconds_per_trial:.2f} s/trial){' (interrupted)' if r.interrupted else ''}"
          f"{f' (the --budget of {args.budget:g} s spent)' if r.budget_spent else ''} -> {r.work_dir}")
    from ..tools.tune.report import end_to_end, kernel_table

    print(kernel_table(r))
    if r.interrupted:
        return 130
    print(end_to_end(spec, args.module, remote=rpc is not None, elsewhere=None if r.read_by_builds else r.work_dir)
          .line())
    return 0


def add_tune_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("tune", parents=[common], help="tune a case's (or a --module FILE.py's) kernels with "
                       "MetaSchedule (records in schedules/tuned/)")
    add_module_arg(p)
    add_spec_args(p, sizes=False)
    add_target_args(p)
    add_flags(p, TuneOptions)
    add_rpc_args(p, "measure on a TVM RPC tracker's servers")
    p.set_defaults(handler=_cmd_tune)
