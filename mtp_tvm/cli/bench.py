"""``bench``: TVM against its peers, of a case, a module file or an artifact (``tools/bench``)."""

from __future__ import annotations

import argparse
import sys

from ..compiler.options import BuildSpec, DebugOptions
from ..support.atomic_file import require_writable
from ..support.errors import UsageError
from ..support.flags import add_flags, options_from
from ..support.timing import phase, time_line
from .common import (
    DEFAULTS,
    add_module_arg,
    add_profile_arg,
    add_rpc_args,
    add_schedule_arg,
    add_spec_args,
    add_target_args,
    add_weights_arg,
    comma_list,
    debug_options,
    given_flags,
    load_weights,
    module_options,
    refuse_build_flags,
    refuse_case_options,
    refuse_checkpoint_options,
    rpc_of,
)


def _bench_spec(args) -> BuildSpec | None:
    """What ``bench`` builds, checked before TVM loads (None: the ``--artifact`` it times); then the names of
    ``--compare-schedules`` (the target's schedules: TVM loads), before any weights are read."""
    if args.artifact:
        refuse_build_flags(args)
        return None
    spec = options_from(args, BuildSpec, tokens=None)  # bench's --tokens is BenchOptions' sweep
    spec.resolve()
    if args.compare_schedules:
        with phase("import"):
            from ..tools.bench.bench import require_known_schedules

        require_known_schedules(spec, comma_list(args.compare_schedules), "--compare-schedules")
    return spec


def _cmd_bench_module(args) -> int:
    """``bench --module FILE.py``: the user's own model against torch eager and torch.compile; ``bench --artifact``
    of a module file's artifact: its binary on its stored example inputs."""
    refuse_case_options(args)
    prebuilt = args.module is None
    refused = ("compare_schedules", "compare_frontends", "rpc_tracker", "rpc_key", "profile", "plot", "api",
               *(("target", "schedule") if prebuilt else ("artifact",)))
    given = given_flags(args, refused)
    if given:
        what = ("bench --artifact times a module file's artifact on its stored example inputs" if prebuilt
                else "bench --module times your file at its example inputs")
        raise UsageError(f"{what}; {', '.join(given)} cannot apply")
    require_writable(args.json, "--json")
    with phase("import"):
        from ..tools.bench.bench import bench, parse_peers
        from ..tools.bench.module_bench import ModuleBenchOptions

    options = ModuleBenchOptions(rounds=args.rounds, threads=args.threads,
                                 **({"peers": parse_peers(args.peers)} if args.peers is not None else {}))
    where = {"artifact": args.artifact} if prebuilt else module_options(args)
    result = bench(options=options, debug=debug_options(args), log=lambda line: print(line, file=sys.stderr,
                                                                                        flush=True), **where)
    print(result.table())
    if args.json:
        result.write_json(args.json)
        print(f"json: {args.json}")
    print(time_line())
    return 0


def _is_module_artifact(path) -> bool:
    """``artifact.manifest.is_module_artifact``, imported only when an artifact is given (the manifest's module
    imports TVM)."""
    from ..artifact.manifest import is_module_artifact

    return is_module_artifact(path)


def _cmd_bench(args) -> int:
    refuse_checkpoint_options(args)
    if args.module and args.weights:
        raise UsageError("--weights replaces a case's weights; bench --module times your file's own")
    if args.module or (args.artifact and _is_module_artifact(args.artifact)):
        return _cmd_bench_module(args)
    require_writable(args.json, "--json")
    require_writable(args.plot, "--plot")
    spec = _bench_spec(args)
    if args.artifact and args.weights:  # bench refuses both, but the weights are read by the case of a build
        raise UsageError("--weights replaces the weights of a build; bench an artifact on its seeded weights, or "
                         "drop --artifact")
    loaded = load_weights(args, spec.case, spec.preset) if spec is not None else None
    if loaded is not None:
        spec = loaded.sized(spec)
    with phase("import"):
        from ..tools.bench.bench import BenchOptions, bench, parse_peers, parse_tokens

    options = BenchOptions(tokens=parse_tokens(args.tokens) if args.tokens else (), rounds=args.rounds,
                           threads=args.threads, compare_schedules=comma_list(args.compare_schedules),
                           compare_frontends=comma_list(args.compare_frontends), profile=args.profile,
                           rpc=rpc_of(args),
                           artifact=args.artifact, api=args.api,
                           **({"peers": parse_peers(args.peers)} if args.peers is not None else {}))
    result = bench(spec, options, debug=debug_options(args), log=lambda line: print(line, file=sys.stderr,
                                                                                     flush=True),
                   weights=None if loaded is None else loaded.weights)
    print(result.table())
    if result.profile is not None:
        print(result.profile.table())
    if args.json:
        result.write_json(args.json)
        print(f"json: {args.json}")
    if args.plot:
        result.plot(args.plot)
        print(f"plot: {args.plot}")
    print(time_line())
    return 0


def add_bench_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bench", parents=[common], help="time a case against torch (eager, torch.compile) and numpy, "
                       "each in its own process, side by side, at every T, against the measured roofline")
    add_spec_args(p, f"logits, projection, norm or tail (default {DEFAULTS.case})", sizes=False)
    add_target_args(p)
    add_schedule_arg(p)
    p.add_argument("--artifact", default=None, metavar="DIR",
                   help="time this prebuilt artifact (mtp-tvm build) instead of building: its manifest says what "
                        "it is, and TVM's runtime alone will do (TVM_USE_RUNTIME_LIB=1, e.g. on the target machine)")
    add_module_arg(p)
    p.add_argument("--tokens", default=None, metavar="T[,T...]",
                   help="token count T, or a comma list swept in one run, e.g. 1,2,4,8,16 (default: the preset's "
                        "B*S = 8)")
    p.add_argument("--peers", default=None, metavar="A,B,...",
                   help="the peers that race TVM, '' for none (default all: torch_bf16, torch_fp32, numpy_fp32, "
                        "torch_golden, torch_compile, torch_compile_max_autotune; with --module: torch_eager, "
                        "torch_compile, torch_compile_max_autotune)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads of every worker process, TVM's and each peer's (default: every usable core)")
    p.add_argument("--rounds", type=int, default=7,
                   help="timing rounds, each timing TVM and every peer in turn; medians over them (default 7)")
    p.add_argument("--compare-schedules", default=None, metavar="A,B,...",
                   help="also time TVM with these schedules in the same rounds, e.g. none,default,tuned,dlight")
    p.add_argument("--compare-frontends", default=None, metavar="A,B,...",
                   help="also time TVM built from these frontends in the same rounds, e.g. torch,tir (the case "
                        "imported from torch.export against the hand-written kernels)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the figures as JSON")
    add_rpc_args(p, "time TVM on a server of this TVM RPC tracker (as tune measures); peers are not timed then")
    p.add_argument("--api", action="store_true",
                   help="also time the public API path beside the kernel (tvm:api): bound.run on activations "
                        "already on the binary's device (torch tensors), outputs left there")
    add_profile_arg(p)
    p.add_argument("--plot", default=None, metavar="PNG", help="write a bar chart (matplotlib)")
    add_weights_arg(p)
    add_flags(p, DebugOptions)
    p.set_defaults(handler=_cmd_bench)
