"""``tune``: MetaSchedule over a case's or a module file's kernels (``tools/tune``)."""

from __future__ import annotations

import argparse
import sys

from ..compiler.options import BuildSpec
from ..schedule.tune_space import TuneSpace
from .common import add_module_arg, add_spec_args, add_target_args, refuse_case_options, rpc_of


def _cmd_tune(args) -> int:
    spec = BuildSpec(case=args.case, target=args.target, preset=args.preset, frontend=args.frontend,
                     vocab_shard=args.vocab_shard)
    if args.module:
        refuse_case_options(args, keep=("seed",))  # the search's seed
    else:
        spec.resolve()
    from ..tools.tune.tune import TuneOptions, tune

    rpc = rpc_of(args)
    options = TuneOptions(trials=args.trials, work_dir=args.work_dir, seed=args.seed, rpc=rpc, space=args.space,
                          module=args.module)
    r = tune(spec, options, log=lambda line: print(line, file=sys.stderr))
    print(f"tuned {args.module or args.case} for {args.target}: {r.trials} trials in {r.seconds:.0f}s "
          f"({r.seconds_per_trial:.2f} s/trial){' (interrupted)' if r.interrupted else ''} -> {r.work_dir}")
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
    p.add_argument("--space", choices=TuneSpace.names(), default=TuneSpace.BOTH.value,
                   help="design spaces: our hand rules with sampled knobs, MetaSchedule's generic rules, or both "
                        "(default both)")
    p.add_argument("--trials", type=int, default=64, help="trials over all kernels (default 64)")
    p.add_argument("--work-dir", default=None, help="database folder (default schedules/tuned/<target>/<case>)")
    p.add_argument("--seed", type=int, default=0, help="search seed (default 0)")
    p.add_argument("--rpc-tracker", default=None, metavar="HOST:PORT", help="measure on a TVM RPC tracker's servers")
    p.add_argument("--rpc-key", default="mtp", help="device key registered with the tracker (default mtp)")
    p.set_defaults(handler=_cmd_tune)
