"""``bench``: TVM against its peers, of a case, a module file or an artifact (``tools/bench``)."""

from __future__ import annotations

import argparse
import sys

from ..compiler.options import BuildSpec, DebugOptions
from ..support.atomic_file import require_writable
from ..support.flags import Flag, add_flags, flags, options_from
from ..support.timing import phase, time_line
from ..tools.bench.options import BenchOptions  # no TVM: the parser reads its declarations
from .common import (
    ARTIFACT,
    BUILD_FLAGS_WITH_ARTIFACT,
    CHECKPOINT_WITHOUT_WEIGHTS,
    DEFAULTS,
    Refusal,
    add_module_arg,
    add_profile_arg,
    add_rpc_args,
    add_schedule_arg,
    add_spec_args,
    add_target_args,
    add_weights_arg,
    case_flags_refused,
    debug_options,
    given_weights,
    module_options,
    refuse,
    rpc_of,
)

JSON = Flag("json", "write the figures as JSON", metavar="FILE")
PLOT = Flag("plot", "write a bar chart (matplotlib)", metavar="PNG")


def _bench_spec(args) -> BuildSpec | None:
    """What ``bench`` builds, checked before TVM loads (None: the ``--artifact`` it times); then the names of
    ``--compare-schedules`` (the target's schedules: TVM loads), before any weights are read."""
    if args.artifact:
        refuse(args, BUILD_FLAGS_WITH_ARTIFACT)
        return None
    spec = options_from(args, BuildSpec, tokens=None)  # bench's --tokens is BenchOptions' sweep
    spec.resolve()
    if args.compare_schedules:
        with phase("import"):
            from ..tools.bench.bench import require_known_schedules

        require_known_schedules(spec, args.compare_schedules, "--compare-schedules")
    return spec


def _bench_module(args):
    """``bench --module FILE.py``: the user's own model against torch eager and torch.compile; ``bench --artifact``
    of a module file's artifact: its binary on its stored example inputs."""
    prebuilt = args.module is None
    refused = ("compare_schedules", "compare_frontends", "rpc_tracker", "rpc_key", "profile", "api",
               *(("target", "schedule") if prebuilt else ("artifact",)))
    what = ("bench --artifact times a module file's artifact on its stored example inputs" if prebuilt
            else "bench --module times your file at its example inputs")
    refuse(args, case_flags_refused(), Refusal(what + "; {flags} cannot apply", refused))
    with phase("import"):
        from ..tools.bench.bench import bench

    where = {"artifact": args.artifact} if prebuilt else module_options(args)
    return bench(options=options_from(args, BenchOptions), debug=debug_options(args), log=_progress, **where)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _is_module_artifact(path) -> bool:
    """``artifact.manifest.is_module_artifact``, imported only when an artifact is given (the manifest's module
    imports TVM)."""
    from ..artifact.manifest import is_module_artifact

    return is_module_artifact(path)


def _cmd_bench(args) -> int:
    refuse(args, CHECKPOINT_WITHOUT_WEIGHTS,
           Refusal("--weights replaces a case's weights; bench --module times your file's own", ("weights",),
                   lambda args: args.module))
    require_writable(args.json, "--json")
    require_writable(args.plot, "--plot")
    if args.module or (args.artifact and _is_module_artifact(args.artifact)):
        result = _bench_module(args)
    else:
        result = _bench_case(args)
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


def _bench_case(args):
    """``bench`` of a case, built or a prebuilt artifact's."""
    spec = _bench_spec(args)
    refuse(args, Refusal("--weights replaces the weights of a build; bench an artifact on its seeded weights, or drop "
                         "--artifact", ("weights",), lambda args: args.artifact))  # the weights are read by a case
    loaded = given_weights(args, spec.case, spec.preset) if spec is not None else None
    if loaded is not None:
        spec = loaded.sized(spec)
    with phase("import"):
        from ..tools.bench.bench import bench

    options = options_from(args, BenchOptions, tokens=() if args.tokens is None else args.tokens,
                           profile=args.profile, rpc=rpc_of(args), artifact=args.artifact)
    return bench(spec, options, debug=debug_options(args), log=_progress,
                 weights=None if loaded is None else loaded.weights)


def add_bench_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bench", parents=[common], help="time a case against torch (eager, torch.compile) and numpy, "
                       "each in its own process, side by side, at every T, against the measured roofline")
    add_spec_args(p, f"logits, projection, norm or tail (default {DEFAULTS.case})", sizes=False)
    add_target_args(p)
    add_schedule_arg(p)
    ARTIFACT.add_to(p, "time this prebuilt artifact (mtp-tvm build) instead of building: its manifest says what it "
                       "is, and TVM's runtime alone will do (TVM_USE_RUNTIME_LIB=1, e.g. on the target machine)")
    add_module_arg(p)
    flags(BuildSpec)["tokens"].add_to(p, "token count T, or a comma list swept in one run, e.g. 1,2,4,8,16")
    add_flags(p, BenchOptions)
    JSON.add_to(p)
    add_rpc_args(p, "time TVM on a server of this TVM RPC tracker (as tune measures); peers are not timed then")
    add_profile_arg(p)
    PLOT.add_to(p)
    add_weights_arg(p)
    add_flags(p, DebugOptions)
    p.set_defaults(handler=_cmd_bench)
