"""Build one case as one Relax ``IRModule``: a ``main`` that pads the tokens once, runs the stage chain on
padded rows, and returns every stage's output cut back to ``T`` rows.

The token count is the symbolic dim ``T`` of the module, so one binary serves every T; the pad to the tile of
16 happens inside, and pad rows are zero through every stage (a zero row norms, quantises and projects to 0).
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx

from .cases import Case
from .config import TOKEN_TILE, Shapes
from .errors import UsageError
from .kernels.frontend import FRONTENDS

ACTIVATIONS = ("hidden_states", "prev_hidden_states")


def get_frontend(name: str):
    try:
        return FRONTENDS[name]
    except KeyError:
        raise UsageError(f"unknown frontend {name!r}; choose one of {', '.join(FRONTENDS)}") from None


def build_relax_module(case: Case, shapes: Shapes, frontend: str) -> tvm.IRModule:
    """The case's Relax module; ``main(*inputs in spec order) -> tuple(stage outputs)``."""
    fe_cls = get_frontend(frontend)
    tokens = tirx.Var("tokens", "int64")  # not "T": that name clashes with TVMScript's T alias
    rows = (tokens + TOKEN_TILE - 1) // TOKEN_TILE * TOKEN_TILE
    specs = case.input_specs(shapes)
    params = [relax.Var(name, relax.TensorType([tokens if d == "T" else d for d in spec.shape], spec.dtype))
              for name, spec in specs.items()]
    env = dict(zip(specs, params))
    d = shapes.hidden
    bb = relax.BlockBuilder()
    fe = fe_cls(bb)
    with bb.function("main", params):
        with bb.dataflow():
            padded = {a: fe.pad_rows(env[a], rows, d, "bfloat16", f"{a}_padded") for a in ACTIVATIONS if a in env}
            x = padded.get("hidden_states")
            outputs = []
            for stage in case.chain:
                if stage.name == "projection":
                    x = fe.projection(padded["hidden_states"], padded["prev_hidden_states"], env, rows, d, shapes.eps)
                elif stage.name == "norm":
                    x = fe.norm(x, env["shared_head_norm_w"], rows, d, shapes.eps)
                elif stage.name == "logits":
                    x = fe.logits(x, env["lm_head_weight"], rows, d, shapes.vocab_shard)
                else:  # pragma: no cover - STAGES and this dispatch are kept in step by test_every_stage_builds
                    raise AssertionError(stage.name)
                outputs.append(fe.unpad_rows(x, tokens, stage.output_cols(shapes), stage.output_dtype, stage.output))
            result = bb.emit_output(relax.Tuple(outputs))
        bb.emit_func_output(result)
    mod = bb.finalize()
    # Activations come first; the rest are weights, whose transforms (packing) LiftTransformParams hoists.
    mod["main"] = mod["main"].with_attr("num_input", num_activations(case, shapes))
    return mod


def num_activations(case: Case, shapes: Shapes) -> int:
    """How many leading inputs are per-call activations (``[T, ...]``); the weights follow them."""
    token_major = ["T" in spec.shape for spec in case.input_specs(shapes).values()]
    n = token_major.count(True)
    assert token_major[:n] == [True] * n, "activations must precede weights in spec order"
    return n
