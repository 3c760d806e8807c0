"""``list`` and ``inputs``: the cases' tensors, and the seeded inputs ``check`` draws as an ``.npz``."""

from __future__ import annotations

import argparse

from ..compiler.options import BuildSpec
from ..contract.cases import CASES
from ..contract.presets import PRESETS
from ..support.atomic_file import require_writable
from ..support.flags import Flag, add_flags, options_from
from .common import ARTIFACT, BUILD_FLAGS_WITH_ARTIFACT, FORCE, SEED, add_spec_args, refuse

INPUTS_OUT = Flag("out", "the .npz to write", metavar="IN.npz", required=True)


def _cmd_inputs(args) -> int:
    """The seeded inputs ``check`` draws, as an ``.npz`` for ``run --inputs``: of a case (no build) or of an
    artifact (its manifest's case and sizes)."""
    require_writable(args.out, "--out", force=args.force)
    if args.artifact:
        refuse(args, BUILD_FLAGS_WITH_ARTIFACT)
        from ..artifact.load import load

        inputs = load(args.artifact, allow_failed=True).make_inputs(tokens=args.tokens, seed=args.seed)
    else:
        case, shapes = options_from(args, BuildSpec).resolve()
        inputs = case.make_inputs(shapes, args.seed)
    from ..compiler.arrays import to_numpy, write_npz

    arrays = {name: to_numpy(t) for name, t in inputs.items()}
    write_npz(args.out, arrays)
    for name, a in arrays.items():
        print(f"{name:20s} {str(a.shape):16s} {a.dtype}")
    print(f"inputs: {args.out}")
    return 0


def _cmd_list(args) -> int:
    from ..contract.presets import make_shapes
    from ..support.text_table import text_table

    s = make_shapes(args.preset, vocab_shard=args.vocab_shard)
    print(f"tensors at preset {s.preset.name} (D={s.hidden}), vocab shard {s.vocab_shard}, owners {s.owners}, "
          f"tp {s.tp}; T is the token count (any T >= 1: one binary), R = T/owners")
    for name, case in CASES.items():
        print(f"\n{name}: {case.description}")
        rows = [(kind, t.name, "[" + ", ".join(map(str, t.shape)) + "]", t.dtype)
                for kind, specs in (("in", case.input_specs(s)), ("out", case.output_specs(s)))
                for t in specs.values()]
        print("\n".join("  " + line for line in text_table([("", "tensor", "shape", "dtype"), *rows])))
    print("\npresets: " + ", ".join(f"{p.name} (D={p.hidden}, vocab={p.vocab})" for p in PRESETS.values()))
    return 0


def add_inputs_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("inputs", parents=[common],
                       help="write the seeded inputs check draws, as an .npz for run --inputs")
    add_spec_args(p)
    add_flags(p, BuildSpec, only=("tokens",))
    SEED.add_to(p)
    ARTIFACT.add_to(p, "the inputs of this artifact (its case and sizes; --tokens and --seed still apply)")
    INPUTS_OUT.add_to(p)
    FORCE.add_to(p, "replace --out if it exists")
    p.set_defaults(handler=_cmd_inputs)


def add_list_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("list", parents=[common], help="list cases, every tensor's shape and dtype, and presets")
    add_flags(p, BuildSpec, only=("preset", "vocab_shard"), help={"preset": f"the sizes to show: one of "
                                                                       f"{', '.join(PRESETS)}"})
    p.set_defaults(handler=_cmd_list)
