"""``convert``: a DeepSeek checkpoint's MTP weights as a case's W8A8 inputs (``tools/convert``)."""

from __future__ import annotations

import argparse
import sys

from ..contract.cases import CASES
from ..verify.tolerances import RatioTolerance
from .common import DEFAULTS, add_checkpoint_args, checkpoint_options


def _cmd_convert(args) -> int:
    """A DeepSeek checkpoint's MTP weights as a case's W8A8 inputs, with the conversion's cost."""
    from ..tools.convert.convert import WeightSource, convert

    given = {f: getattr(args, f) for f in ("atol", "rtol", "max_error_ratio") if getattr(args, f) is not None}
    source = WeightSource(args.checkpoint, args.case, args.preset, args.tp, owners=args.owners,
                          **checkpoint_options(args))
    result = convert(source, args.out, seed=args.seed, tokens=args.tokens,
                     tolerance=RatioTolerance(**given) if given else None,
                     log=lambda line: print(line, file=sys.stderr, flush=True))
    print(result.table())
    if not result.passed:
        print(f"the converted projection FAILED against the checkpoint's own: nothing was written ({args.out} is as "
              "it was)")
    return 0 if result.passed else 1


def add_convert_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("convert", parents=[common], help="a DeepSeek checkpoint's MTP weights as a case's W8A8 "
                                                         "weight inputs (one "
                       "safetensors file), with the conversion's error against the checkpoint's own FP8 math")
    p.add_argument("checkpoint", metavar="CKPT", help="a checkpoint folder (shards and model.safetensors.index.json) "
                                                      "or file")
    p.add_argument("--case", default=DEFAULTS.case, help=f"whose weight inputs to write: one of {', '.join(CASES)} "
                   f"(default {DEFAULTS.case})")
    p.add_argument("--preset", default=None, help="tiny, flash or pro (default: the checkpoint's hidden size decides)")
    p.add_argument("--tp", type=int, default=None, help="TP degree of the LM head: the rank's rows are vocab / TP "
                                                        "(default 2)")
    p.add_argument("--owners", type=int, default=None, help="LM head: token owners 2, 4 or 8 (default 2)")
    add_checkpoint_args(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the projection's activations without --calibration "
                                                       "(default 0)")
    p.add_argument("--tokens", type=int, default=None, help="token count of those activations (default the preset's "
                                                            "B*S = 8)")
    p.add_argument("--atol", type=float, default=None, help="the projection's absolute tolerance (default 0.03 x the "
                                                            "reference's RMS)")
    p.add_argument("--rtol", type=float, default=None, help="the projection's relative tolerance (default 0.03)")
    p.add_argument("--max-error-ratio", type=float, default=None, help="the projection's outlier budget (default 0.02)")
    p.add_argument("--out", required=True, metavar="FILE.safetensors", help="the converted weights to write")
    p.set_defaults(handler=_cmd_convert)
