"""Build one case as one Relax ``IRModule``: a ``main`` that pads the tokens once, runs the stage chain on
padded rows, and returns every stage's output cut back to ``T`` rows.

The token count is the symbolic dim ``T`` of the module, so one binary serves every T; the pad to the tile of
16 happens inside, and pad rows are zero through every stage (a zero row norms, quantises and projects to 0).
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx

from ..ir.frontends import FRONTENDS
from ..spec.cases import ROWS, TOKENS, Case
from ..spec.presets import TOKEN_TILE, Shapes
from ..support.errors import UsageError

ACTIVATIONS = ("hidden_states", "prev_hidden_states")


def get_frontend(name: str):
    try:
        return FRONTENDS[name]
    except KeyError:
        raise UsageError(f"unknown frontend {name!r}; choose one of {', '.join(FRONTENDS)}") from None


def _symbolic_sizes(specs: dict, owners: int) -> dict:
    """The module's one free size: the token count, or the rows per owner when no input is token-major."""
    if any(TOKENS in spec.shape for spec in specs.values()):
        tokens = tirx.Var("tokens", "int64")  # not "T": that name clashes with TVMScript's T alias
        return {TOKENS: tokens, ROWS: tokens // owners}
    per_owner = tirx.Var("rows", "int64")
    return {TOKENS: per_owner * owners, ROWS: per_owner}


def build_relax_module(case: Case, shapes: Shapes, frontend: str, static_tokens: bool = False) -> tvm.IRModule:
    """The case's Relax module; ``main(*inputs in spec order) -> tuple(stage outputs)``.

    The token count is symbolic unless ``static_tokens``: then it is ``shapes.tokens`` (MetaSchedule tunes and
    applies records only on static shapes).
    """
    fe_cls = get_frontend(frontend)
    specs = case.input_specs(shapes)
    sizes = ({TOKENS: shapes.tokens, ROWS: shapes.tokens // shapes.owners} if static_tokens
             else _symbolic_sizes(specs, shapes.owners))
    tokens = sizes[TOKENS]
    rows = (tokens + TOKEN_TILE - 1) // TOKEN_TILE * TOKEN_TILE
    params = [relax.Var(name, relax.TensorType([sizes.get(d, d) for d in spec.shape], spec.dtype))
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
                if stage.name == "lm_head":  # token-major [T, D] in, static [owners, 8, ...] out: no padding
                    hidden = outputs[-1] if outputs else bb.emit(
                        relax.op.reshape(env[case.chain[0].hidden_input.name], (tokens, d)), "hidden_tokens")
                    outputs += fe.lm_head(hidden, env["lm_head_weight"], env["logit_row_indices"], shapes)
                    continue
                if stage.name == "projection":
                    x = fe.projection(padded["hidden_states"], padded["prev_hidden_states"], env, rows, d, shapes.eps)
                elif stage.name == "norm":
                    x = fe.norm(x, env["shared_head_norm_w"], rows, d, shapes.eps)
                elif stage.name == "logits":
                    x = fe.logits(x, env["lm_head_weight"], rows, d, shapes.vocab_shard)
                else:  # pragma: no cover - STAGES and this dispatch are kept in step by test_every_stage_builds
                    raise AssertionError(stage.name)
                out = stage.outputs[0]
                outputs.append(fe.unpad_rows(x, tokens, out.shape(shapes)[1], out.dtype, out.name))
            result = bb.emit_output(relax.Tuple(outputs))
        bb.emit_func_output(result)
    mod = bb.finalize()
    # Activations come first; the rest are weights, whose transforms (packing) LiftTransformParams hoists.
    mod["main"] = mod["main"].with_attr("num_input", num_activations(case, shapes))
    return mod


def num_activations(case: Case, shapes: Shapes) -> int:
    """How many leading inputs are per-call activations (``[T, ...]``); the weights follow them."""
    return leading_activations(case.input_specs(shapes))


def leading_activations(specs: dict) -> int:
    """The count of leading token-major (``T``) specs; ``main_transform_params`` takes the inputs after them."""
    token_major = ["T" in spec.shape for spec in specs.values()]
    n = token_major.count(True)
    assert token_major[:n] == [True] * n, "activations must precede weights in spec order"
    return n
