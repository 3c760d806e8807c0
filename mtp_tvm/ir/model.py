"""Build one case as one Relax ``IRModule``: a ``main`` that pads the tokens once, runs the stage chain on
padded rows, and returns every stage's output cut back to ``T`` rows.

The token count is the symbolic dim ``T`` of the module, so one binary serves every T; the pad to the tile of
16 happens inside, and pad rows are zero through every stage (a zero row norms, quantises and projects to 0).
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx

from ..contract.cases import ROWS, TOKENS, ArgKind, Case, FrontendCall, leading_activations
from ..contract.presets import TOKEN_TILE, Shapes
from ..ir.frontend_names import FRONTEND_NAMES, check_frontend
from ..ir.frontends import RelaxFrontend, TIRFrontend
from ..ir.torch_frontend import TorchFrontend
from ..support.rounding import ceil_to

FRONTENDS = dict(zip(FRONTEND_NAMES, (RelaxFrontend, TIRFrontend, TorchFrontend)))


def get_frontend(name: str):
    return FRONTENDS[check_frontend(name)]


def _symbolic_sizes(specs: dict, owners: int) -> dict:
    """The module's one free size: the token count, or the rows per owner when no input is token-major."""
    if any(TOKENS in spec.shape for spec in specs.values()):
        tokens = tirx.Var("tokens", "int64")  # not "T": that name clashes with TVMScript's T alias
        return {TOKENS: tokens, ROWS: tokens // owners}
    per_owner = tirx.Var("rows", "int64")
    return {TOKENS: per_owner * owners, ROWS: per_owner}


def _stage_args(call: FrontendCall, x, rows, shapes: Shapes, env: dict, padded: dict) -> list:
    """The arguments ``call`` names (see ``FrontendCall``): ``x`` the stage's activation, ``rows`` the padded
    token count, ``env`` the module's inputs by name, ``padded`` its token-major inputs padded to ``rows``."""
    resolve = {ArgKind.X: lambda _: x, ArgKind.PADDED_ROWS: lambda _: rows, ArgKind.SHAPES: lambda _: shapes,
               ArgKind.INPUTS: lambda _: env, ArgKind.INPUT: env.__getitem__, ArgKind.PADDED: padded.__getitem__,
               ArgKind.SHAPE: lambda attr: getattr(shapes, attr)}
    return [resolve[a.kind](a.name) for a in call.args]


def build_relax_module(case: Case, shapes: Shapes, frontend: str) -> tvm.IRModule:
    """The case's Relax module; ``main(*inputs in spec order) -> tuple(stage outputs)``. Each stage is the
    frontend method its ``Stage.frontend`` names, called with the arguments it names.

    The token count is symbolic (MetaSchedule's static workloads are made per kernel: ``schedule.tuned``). The
    module is the same whatever the schedule: the schedule phase decides the rows each GEMM runs.
    """
    fe_cls = get_frontend(frontend)
    specs = case.input_specs(shapes)
    sizes = _symbolic_sizes(specs, shapes.owners)
    tokens = sizes[TOKENS]
    rows = ceil_to(tokens, TOKEN_TILE)
    params = [relax.Var(name, relax.TensorType([sizes.get(d, d) for d in spec.shape], spec.dtype))
              for name, spec in specs.items()]
    env = dict(zip(specs, params))
    bb = relax.BlockBuilder()
    fe = fe_cls(bb, tokens)
    opening = case.chain[0].hidden_input
    with bb.function("main", params):
        with bb.dataflow():
            padded = {name: fe.pad_rows(env[name], rows, spec.shape[1], spec.dtype, f"{name}_padded")
                      for name, spec in specs.items() if spec.shape[0] == TOKENS}
            x = padded.get(opening.name) if opening is not None else None  # the padded activation
            x_tokens = None  # the token-major activation: the previous stage's first output
            outputs = []
            for stage in case.chain:
                call = stage.frontend
                if not call.padded and x_tokens is None:  # the stage opens the case
                    x_tokens = bb.emit(relax.op.reshape(env[opening.name], (tokens, shapes.hidden)), "hidden_tokens")
                args = _stage_args(call, x if call.padded else x_tokens, rows, shapes, env, padded)
                result = getattr(fe, call.method)(*args)
                if call.padded:
                    out = stage.outputs[0]
                    x = result
                    x_tokens = fe.unpad_rows(x, tokens, out.shape(shapes)[1], out.dtype, out.name)
                    outputs.append(x_tokens)
                else:  # it ends the chain (``Case`` checks)
                    outputs += result
            result = bb.emit_output(relax.Tuple(outputs))
        bb.emit_func_output(result)
    mod = bb.finalize()
    # Activations come first; the rest are weights, whose transforms (packing) LiftTransformParams hoists.
    mod["main"] = mod["main"].with_attr("num_input", leading_activations(specs))
    return mod


