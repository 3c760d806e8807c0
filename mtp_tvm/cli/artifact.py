"""``build`` and ``run``: an artifact folder written, and run on named or seeded inputs (``artifact/``)."""

from __future__ import annotations

import argparse

from ..compiler.options import BuildSpec
from ..support.atomic_file import require_not_input
from ..support.flags import Flag, add_flags
from ..support.timing import phase, time_line
from .common import (
    CHECKPOINT_WITHOUT_WEIGHTS,
    FORCE,
    SEED,
    Refusal,
    add_arch_arg,
    add_build_args,
    add_shape_arg,
    add_weights_arg,
    debug_options,
    given_weights,
    print_debug_footer,
    refuse,
    source_spec,
)

BUILD_OUT = Flag("out", "the artifact folder to create", metavar="DIR", required=True)
CHECK = Flag("check", "golden-check the written artifact before committing it; the result goes in its manifest")
INPUTS = Flag("inputs", "one array per input name (mtp-tvm inputs writes one)", metavar="IN.npz")
RANDOM_INPUTS = Flag("random_inputs", "the seeded inputs check draws (--seed, --tokens)")
RUN_OUT = Flag("out", "where to write the outputs (without it: shapes and dtypes only)", metavar="OUT.npz")
ALLOW_FAILED = Flag("allow_failed", "run an artifact even though its recorded golden check failed")


def _cmd_build(args) -> int:
    spec = source_spec(args)
    debug = debug_options(args)  # refused before the imports
    with phase("import"):
        from ..artifact.export import build, describe
        from ..verify.results import summary_table

    built = build(args.out, spec, debug, arch=args.arch, force=args.force, check=args.check, seed=args.seed)
    if built.check is not None:
        print(summary_table(built.check))
    if built.path is None:
        print(f"the artifact FAILED its golden check: nothing was written ({args.out} is as it was)")
    else:
        print(describe(built))
    print_debug_footer(args, built.compiled.pass_records, built.compiled.gate, built.compiled.dump_dir)
    print(time_line())
    return 0 if built.check is None or built.check.passed else 1


def _cmd_run(args) -> int:
    refuse(args, CHECKPOINT_WITHOUT_WEIGHTS)
    require_not_input(args.out, "--out", [("the --inputs file", args.inputs)])
    refuse(args, Refusal("give --inputs IN.npz (make one with `mtp-tvm inputs`) or --random-inputs",
                         when=lambda args: args.inputs is None and not args.random_inputs),
           Refusal("--seed, --tokens and --shape size the seeded inputs of --random-inputs; drop them with --inputs",
                   ("seed", "tokens", "shape"), lambda args: not args.random_inputs))
    from ..artifact.load import load
    from ..compiler.arrays import read_npz, write_npz

    artifact = load(args.artifact, allow_failed=args.allow_failed)
    loaded = None
    if args.weights is not None:  # a case's artifact (a module file's has no case to size weights by)
        case, shapes = artifact.sized()
        loaded = given_weights(args, case.name, shapes.preset.name, shapes.tp, shapes.owners)
        loaded.require_fits(shapes, args.artifact)
    if args.inputs is not None:
        inputs = read_npz(args.inputs, {n: t.dtype for n, t in artifact.input_specs.items()})
    else:
        from ..ir.module_sizes import parse_shapes

        inputs = artifact.make_inputs(tokens=args.tokens, seed=args.seed, shapes=parse_shapes(args.shape))
        if args.shape:
            print("at --shape: no stored reference fits this size, so nothing is checked (check --module "
                  "FILE.py --shape recomputes the golden there)")
    if loaded is not None:
        inputs = {**inputs, **loaded.weights}
    outputs = artifact.run(inputs)
    if args.out:
        write_npz(args.out, outputs)
    for name, a in outputs.items():
        print(f"{name:20s} {str(a.shape):16s} {a.dtype}")
    print(f"outputs: {args.out}" if args.out else "outputs: not written (--out OUT.npz keeps them)")
    return 0


def add_build_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("build", parents=[common], help="build a case (or --module FILE.py) into an artifact folder: "
                       "library, generated source, manifest")
    add_build_args(p)
    add_arch_arg(p)
    BUILD_OUT.add_to(p)
    FORCE.add_to(p, "replace DIR if it is an existing artifact")
    CHECK.add_to(p)
    SEED.add_to(p, "input seed for --check")
    p.set_defaults(handler=_cmd_build)


def add_run_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("run", parents=[common],
                       help="run an artifact on named inputs from an .npz file, or on seeded ones")
    p.add_argument("artifact", metavar="DIR", help="an artifact folder written by build")
    group = p.add_mutually_exclusive_group()
    INPUTS.add_to(group)
    RANDOM_INPUTS.add_to(group)
    SEED.add_to(p, "with --random-inputs: input seed")
    add_flags(p, BuildSpec, only=("tokens",),
              help={"tokens": "with --random-inputs: token count T (default: the artifact's)"})
    add_shape_arg(p, "with --random-inputs, a module file's artifact: ")
    RUN_OUT.add_to(p)
    ALLOW_FAILED.add_to(p)
    add_weights_arg(p)
    p.set_defaults(handler=_cmd_run)
