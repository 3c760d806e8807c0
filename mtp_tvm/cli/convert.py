"""``convert``: a DeepSeek checkpoint's MTP weights as a case's W8A8 inputs (``tools/convert``)."""

from __future__ import annotations

import argparse
import sys

from ..compiler.options import BuildSpec
from ..support.flags import add_flags, options_from
from ..tools.convert.convert import WeightSource  # no TVM, no torch
from ..verify.tolerances import RatioTolerance, Tolerance
from .common import SEED


def _cmd_convert(args) -> int:
    """A DeepSeek checkpoint's MTP weights as a case's W8A8 inputs, with the conversion's cost."""
    from ..tools.convert.convert import convert

    given = {f: getattr(args, f) for f in ("atol", "rtol", "max_error_ratio") if getattr(args, f) is not None}
    source = options_from(args, WeightSource, path=args.checkpoint)
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
    add_flags(p, WeightSource)
    SEED.add_to(p, "seed of the projection's activations without --calibration")
    add_flags(p, BuildSpec, only=("tokens",), help={"tokens": "token count of those activations"})
    add_flags(p, Tolerance, only=("atol", "rtol", "max_error_ratio"),
              help={"atol": "the projection's absolute tolerance (default 0.03 x the reference's RMS)",
                    "rtol": "the projection's relative tolerance (default 0.03)",
                    "max_error_ratio": "the projection's outlier budget (default 0.02)"})
    p.add_argument("--out", required=True, metavar="FILE.safetensors", help="the converted weights to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.set_defaults(handler=_cmd_convert)
