"""``convert``: a DeepSeek checkpoint's MTP weights as a case's W8A8 inputs (``tools/convert``)."""

from __future__ import annotations

import argparse
import sys

from ..compiler.options import BuildSpec
from ..contract.cases import CASES
from ..contract.presets import PRESETS
from ..support.flags import Flag, add_flags, options_from
from ..tools.convert.convert import WeightSource  # no TVM, no torch
from ..verify.tolerances import RatioTolerance, Tolerance
from .common import FORCE, SEED

CONVERT_OUT = Flag("out", "the converted weights to write", metavar="FILE.safetensors", required=True)


def _cmd_convert(args) -> int:
    """A DeepSeek checkpoint's MTP weights as a case's W8A8 inputs, with the conversion's cost."""
    from ..tools.convert.convert import convert

    given = {f: getattr(args, f) for f in ("atol", "rtol", "max_error_ratio") if getattr(args, f) is not None}
    source = options_from(args, WeightSource, path=args.checkpoint, case=args.case, preset=args.preset, tp=args.tp,
                          owners=args.owners)
    result = convert(source, args.out, seed=args.seed, tokens=args.tokens,
                     tolerance=RatioTolerance(**given) if given else None, force=args.force,
                     log=lambda line: print(line, file=sys.stderr, flush=True))
    print(result.table())
    if not result.passed:
        print(f"the converted projection FAILED against the checkpoint's own: nothing was written ({args.out} is as "
              "it was)")
    return 0 if result.passed else 1


def add_convert_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("convert", parents=[common], help="a DeepSeek checkpoint's MTP weights as a case's W8A8 "
                       "weight inputs (one safetensors file), with the conversion's error against the checkpoint's "
                       "own FP8 math")
    p.add_argument("checkpoint", metavar="CKPT",
                   help="a checkpoint folder (shards and model.safetensors.index.json) or file")
    add_flags(p, BuildSpec, only=("case", "preset", "owners", "tp"), defaults={"preset": None}, help={
        "case": f"whose weight inputs to write: one of {', '.join(CASES)}",
        "preset": f"one of: {', '.join(PRESETS)} (default: the checkpoint's hidden size decides)",
        "tp": "TP degree of the LM head: the rank's rows are vocab / TP", "owners": "LM head: token owners 2, 4 or 8"})
    add_flags(p, WeightSource)
    SEED.add_to(p, "seed of the projection's activations without --calibration")
    add_flags(p, BuildSpec, only=("tokens",), help={"tokens": "token count of those activations"})
    add_flags(p, Tolerance, only=("atol", "rtol", "max_error_ratio"),
              help={"atol": "the projection's absolute tolerance (default 0.03 x the reference's RMS)",
                    "rtol": "the projection's relative tolerance (default 0.03)",
                    "max_error_ratio": "the projection's outlier budget (default 0.02)"})
    CONVERT_OUT.add_to(p)
    FORCE.add_to(p, "replace --out if it exists")
    p.set_defaults(handler=_cmd_convert)
