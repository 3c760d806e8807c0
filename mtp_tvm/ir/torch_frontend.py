"""The third frontend: every stage is its torch golden (``contract/golden.py``, the very functions ``check``
compares against), exported with ``torch.export`` (each symbolic size of the stage's inputs a
``torch.export.Dim``), imported by TVM's ``from_exported_program``, made to follow the spec
(``ir/torch_to_spec.py``) and inlined into ``main``. It is what a user's model looks like to TVM: importer-made
IR, compiled by the same phases and scheduled by the same pattern rules as the Relax frontend's.

The stage's tensors are the exported program's *inputs* (not frozen parameters), so the weights stay ``main``'s
parameters in spec order: the weight packing is lifted into ``main_transform_params`` as for the other
frontends. Padding and unpadding are the Relax frontend's (token rows are model plumbing, not a stage's math).
"""

from __future__ import annotations

import warnings

import tvm
from tvm import relax, tirx
from tvm.sym import Analyzer

from ..contract import golden
from ..contract.cases import STAGES
from ..contract.presets import Shapes
from ..ir.frontends import RelaxFrontend
from ..ir.torch_to_spec import emit_rounding, to_spec
from ..support.lazy import lazy_module

torch = lazy_module("torch")  # imported by the first build through this frontend, not by importing the model

EXAMPLE_SIZE = 32  # a symbolic size's example value for tracing: not 0 or 1, which torch.export specialises


def _amax(node, importer):
    """``aten.amax``, which TVM 0.27's importer lacks: ``R.max`` over the same axes."""
    args = node.args
    keepdims = args[2] if len(args) > 2 else node.kwargs.get("keepdim", False)
    return importer.block_builder.emit(relax.op.max(importer.env[args[0]], axis=args[1], keepdims=keepdims))


def _clamp(node, importer):
    """``aten.clamp`` whose bound is a symbolic size (``idx.clamp(0, rows - 1)``): the importer broadcasts a bound
    as a tensor and fails on a size; ``R.clip`` takes it as a scalar."""
    bounds = [importer.env[a] if isinstance(a, torch.fx.Node) else a for a in node.args[1:3]]
    if not any(isinstance(getattr(b, "ty", None), tvm.ir.PrimType) for b in bounds):
        return importer._clamp(node)
    x = importer.env[node.args[0]]
    dtype = str(x.ty.dtype)
    lo, hi = (bounds + [None])[:2]
    lo = tirx.min_value(dtype) if lo is None else lo
    hi = tirx.max_value(dtype) if hi is None else hi
    return importer.block_builder.emit(relax.op.clip(x, lo, hi))


CUSTOM_CONVERTERS = {"amax.default": _amax, "clamp.default": _clamp}


def _as_module(fn, names: list[str]):
    """``fn(dict of named tensors) -> tuple`` as a module whose inputs are those tensors, in order."""

    class Golden(torch.nn.Module):
        def forward(self, *tensors):
            return tuple(fn(dict(zip(names, tensors))))

    return Golden()


def _example(args: dict) -> tuple[tuple, tuple]:
    """Zero tensors shaped as the Relax arguments and their ``dynamic_shapes``: one ``Dim`` per distinct symbolic
    size (values do not matter: the goldens have no data-dependent control flow)."""
    dims: dict = {}
    tensors, dynamic = [], []
    for expr in args.values():
        shape, spec = [], {}
        for axis, size in enumerate(expr.ty.shape):
            if isinstance(size, tirx.IntImm):
                shape.append(int(size))
            else:
                spec[axis] = dims.setdefault(str(size), torch.export.Dim(f"d{len(dims)}"))
                shape.append(EXAMPLE_SIZE)
        tensors.append(torch.zeros(shape, dtype=getattr(torch, str(expr.ty.dtype))))
        dynamic.append(spec or None)
    return tuple(tensors), (tuple(dynamic),)


def import_golden(fn, args: dict) -> tvm.IRModule:
    """``fn`` over tensors shaped as ``args`` (name -> Relax expression), exported and imported, to spec."""
    from tvm.relax.frontend.torch import from_exported_program  # imports torch

    tensors, dynamic = _example(args)
    with warnings.catch_warnings():  # torch's own deprecation inside export and its decompositions: not ours
        warnings.filterwarnings("ignore", message=".*LeafSpec", category=FutureWarning)
        program = torch.export.export(_as_module(fn, list(args)), tensors, dynamic_shapes=dynamic)
        mod = from_exported_program(program, keep_params_as_input=True, custom_convert_map=CUSTOM_CONVERTERS)
    return to_spec(mod)


class _Inliner:
    """Rewrites an imported function's expressions into ``main``'s: its parameters, symbolic sizes and kernels
    replaced by ``main``'s arguments, sizes and kernels (``bind_symbolic_vars`` refuses sizes that are free in
    the function, as ``main``'s token count is)."""

    def __init__(self, env: dict, sizes: dict, funcs: dict):
        self.env, self.sizes, self.funcs = env, sizes, funcs
        self.analyzer = Analyzer()  # its bound variables are substituted by ``simplify``
        for var, value in sizes.items():
            self.analyzer.bind(var, value)

    def size(self, expr):
        """``main``'s size expression as it is where the imported one is a size variable (FuseTIR matches buffer
        shapes structurally), else the expression with its variables substituted (simplified)."""
        return self.sizes.get(expr) if expr in self.sizes else self.analyzer.simplify(expr)

    def type(self, ty):
        if isinstance(ty, relax.TensorType) and ty.shape is not None:
            return relax.TensorType([self.size(d) for d in ty.shape], str(ty.dtype))
        return ty

    def __call__(self, expr):
        if isinstance(expr, relax.Var) and expr in self.env:
            return self.env[expr]
        if isinstance(expr, tvm.ir.GlobalVar):
            return self.funcs.get(expr, expr)
        if isinstance(expr, relax.Call):
            return relax.Call(self(expr.op) if isinstance(expr.op, tvm.ir.GlobalVar) else expr.op,
                              [self(a) for a in expr.args], expr.attrs, [self.type(t) for t in expr.ty_args])
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self(f) for f in expr.fields])
        if isinstance(expr, relax.TupleGetItem):
            return relax.TupleGetItem(self(expr.tuple_value), expr.index)
        if isinstance(expr, relax.ShapeExpr):
            return relax.ShapeExpr([self.size(d) for d in expr.values])
        if isinstance(getattr(expr, "ty", None), tvm.ir.PrimType):
            return self.size(expr)  # a size or scalar argument (prim values are PrimExprs)
        return expr  # tensor constants, data types, strings


class TorchFrontend(RelaxFrontend):
    """Each stage method exports its golden and inlines the imported function (``stage``)."""

    name = "torch"

    def stage(self, fn, args: dict, hint: str) -> list:
        """The outputs of ``fn`` (a golden over named tensors) applied to ``args``, emitted into ``main``."""
        mod = import_golden(fn, args)
        func = mod["main"]
        sizes = {}
        for param, expr in zip(func.params, args.values()):
            for own, ours in zip(param.ty.shape, expr.ty.shape):
                if isinstance(own, tirx.Var):
                    sizes[own] = ours
        funcs = {gv: self.bb.add_func(f, gv.name_hint) for gv, f in mod.functions_items()
                 if isinstance(f, tirx.PrimFunc)}
        inline = _Inliner(dict(zip(func.params, args.values())), sizes, funcs)
        (block,) = func.body.blocks
        for binding in block.bindings:
            value = inline(binding.value)
            inline.env[binding.var] = value if isinstance(value, relax.Tuple) else emit_rounding(self.bb, value, hint)
        out = inline(func.body.body)
        return list(out.fields) if isinstance(out, relax.Tuple) else [out]

    def projection(self, hidden, prev, w: dict, rows, d: int, eps: float):
        args = {p.name: w[p.name] for p in STAGES["projection"].params}
        args.update(hidden_states=hidden, prev_hidden_states=prev)  # padded
        (out,) = self.stage(lambda t: (golden.mtp_projection(t, eps),), args, "projection")
        return out

    def norm(self, x, gain, rows, d: int, eps: float):
        (out,) = self.stage(lambda t: (golden.shared_head_norm(t["x"], t["w"], eps),), {"x": x, "w": gain}, "norm")
        return out

    def logits(self, x, weight, rows, d: int, vocab_shard: int):
        (out,) = self.stage(lambda t: (golden.local_logits(t["x"], t["w"]),), {"x": x, "w": weight}, "logits")
        return out

    def lm_head(self, hidden, weight, row_indices, s: Shapes):
        """The golden on ``[owners, R, D]`` (the reshape from ``[T, D]`` is Relax's: T = owners * R exactly)."""
        tokens = hidden.ty.shape[0]
        owned = self.emit(relax.op.reshape(hidden, [s.owners, tokens // s.owners, s.hidden]), "hidden_out")

        def lm_head(t):
            logits = golden.compute_lm_head_logits(t["hidden"], t["weight"], t["rows"], s.tp)
            return logits, golden.sample_argmax(logits)

        return self.stage(lm_head, {"hidden": owned, "weight": weight, "rows": row_indices}, "lm_head")
