"""``mtp-tvm``: a thin argparse layer over the Python API. Exit codes: 0 ok, 1 golden check failed,
2 usage/input error, 3 build failed."""

from __future__ import annotations

import argparse
import sys
import traceback

from .cases import CASES
from .config import PRESETS
from .errors import MtpError
from .kernels.frontend import FRONTENDS


def _add_build_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--case", default="tail", help=f"one of: {', '.join(CASES)} (default tail)")
    p.add_argument("--target", default="llvm", help="llvm, cuda, or a target JSON object (default llvm)")
    p.add_argument("--preset", default="flash", help=f"one of: {', '.join(PRESETS)} (default flash)")
    p.add_argument("--frontend", default="tir", help=f"one of: {', '.join(FRONTENDS)} (default tir)")
    p.add_argument("--tokens", type=int, default=None, help="token count T (default: the preset's B*S = 8)")
    p.add_argument("--vocab-shard", type=int, default=None, help="vocab shard columns (default 512)")
    p.add_argument("--dump-passes", nargs="?", const=True, default=None, metavar="DIR",
                   help="dump the IR after every pass into a new run folder under DIR (default dumps/)")
    p.add_argument("--schedule", default="default", metavar="NAME",
                   help="default (the hand schedules in schedules/), none (plain lowering, CPU), dlight (CUDA), "
                        "or another name a schedule file defines (default: default)")


def _cmd_check(args) -> int:
    from .check import check, summary_table

    result = check(case=args.case, target=args.target, preset=args.preset, frontend=args.frontend,
                   tokens=args.tokens, vocab_shard=args.vocab_shard, seed=args.seed,
                   dump_passes=args.dump_passes, report=args.report, schedule=args.schedule)
    print(summary_table(result))
    if result.dump_dir:
        print(f"IR dumps: {result.dump_dir}")
    if args.report:
        print(f"report: {args.report}")
    return 0 if result.passed else 1


OPENBLAS_SLOW_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")  # set on this host; they slow a current numpy


def _cmd_bench(args) -> int:
    import os

    if any(v in os.environ for v in OPENBLAS_SLOW_VARS):  # numpy read them at import: re-run without them
        env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_SLOW_VARS}
        os.execve(sys.executable, [sys.executable, "-m", "mtp_tvm", *sys.argv[1:]], env)
    from .bench import bench

    result = bench(case=args.case, target=args.target, preset=args.preset, vocab_shard=args.vocab_shard,
                   schedule=args.schedule, tokens=args.tokens, rounds=args.rounds)
    print(result.table())
    if args.json:
        result.write_json(args.json)
        print(f"json: {args.json}")
    if args.plot:
        result.plot(args.plot)
        print(f"plot: {args.plot}")
    return 0


def _cmd_list(_args) -> int:
    from .config import make_shapes

    for name, case in CASES.items():
        print(f"{name:20s} {case.description}")
        s = make_shapes("tiny")
        print(f"{'':20s}   inputs:  {', '.join(case.input_specs(s))}")
        print(f"{'':20s}   outputs: {', '.join(case.output_specs(s))}")
    print("presets: " + ", ".join(f"{p.name} (D={p.hidden}, vocab={p.vocab})" for p in PRESETS.values()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mtp-tvm", description="DeepSeek-V4 MTP decode tail on Apache TVM")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="build a case, run it on seeded inputs, golden-check every stage")
    _add_build_args(p)
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    p.add_argument("--report", default=None, metavar="FILE", help="write the result as JSON")
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser("bench", help="time a case against torch/numpy, interleaved, with measured peak and bandwidth")
    p.add_argument("--case", default="logits", help="logits, projection, norm or tail (default logits)")
    p.add_argument("--target", default="llvm", help="llvm, cuda, or a target JSON object (default llvm)")
    p.add_argument("--preset", default="flash", help=f"one of: {', '.join(PRESETS)} (default flash)")
    p.add_argument("--tokens", type=int, default=None, help="token count T (default: the preset's B*S = 8)")
    p.add_argument("--vocab-shard", type=int, default=None, help="vocab shard columns (default 512)")
    p.add_argument("--schedule", default="default", metavar="NAME", help="as for check (default: default)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds; medians over them (default 7)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the figures as JSON")
    p.add_argument("--plot", default=None, metavar="PNG", help="write a bar chart (matplotlib)")
    p.set_defaults(func=_cmd_bench)
    p = sub.add_parser("list", help="list cases, their tensors, and presets")
    p.set_defaults(func=_cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except MtpError as e:
        if args.debug:
            traceback.print_exc()
        print(f"mtp-tvm: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("mtp-tvm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
