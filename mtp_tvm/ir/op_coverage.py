"""A user's torch model into Relax with the importer's everyday gaps filled, and what is still missing said
before the build, naming the torch operator, the user's source line and why.

TVM 0.27's ``from_exported_program`` imports ``x.max(dim=1)`` as ``R.topk(k=1)``; ``min.dim`` and ``amin`` have no
converter at all, and ``group_norm``'s makes invalid IR. ``CONVERTERS`` replaces those with our own, each made of
operators that lower: ``R.max``/``R.argmax`` for values and indices along a dim, the group norm as a reshape, mean
and variance. ``topk``, ``sort``, ``argsort``, ``cumsum`` and ``cumprod`` stay the importer's Relax operators, which
no legalisation lowers but the pipeline's library dispatch turns into TVM's kernels for the target
(``DISPATCHED_OPS``; its GPU kernels on CUDA, where TOPI's generic ones had no schedule).

``import_program`` runs the importer with them and checks every operator the importer makes on the way, so a
gap that remains (no converter, a converter that fails, or a Relax operator with no legalisation) is one
``UsageError``: ``torch op aten.X at FILE:LINE (the user's code): why``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import tvm
from tvm import relax

from ..ir.graph_nodes import ExportedGraph, import_named, source_line
from ..ir.torch_frontend import CUSTOM_CONVERTERS
from ..support.errors import UsageError
from ..support.lazy import lazy_module

torch = lazy_module("torch")

# The sort, scan and sampling operators: no legalisation, but the pipeline's first pass turns them into TVM's
# kernels for the target (``passes.pipeline.library_dispatch``, as TVM's default pipelines do)
DISPATCHED_OPS = frozenset({"relax.sort", "relax.argsort", "relax.topk", "relax.cumsum", "relax.cumprod",
                            "relax.bucketize", "relax.multinomial_from_uniform"})
# Relax operators that need no legalisation: the VM runs them, or later passes lower them
_RUNTIME_OPS = frozenset({"relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed",
                          "relax.call_pure_packed", "relax.shape_of", "relax.null_value", "relax.print",
                          "relax.assert_op", "relax.make_closure", "relax.invoke_closure", "relax.tensor_to_shape",
                          "relax.shape_to_tensor", "relax.hint_on_device", "relax.to_vdevice"})


def _arg(node, position: int, name: str, default):
    """Argument ``name`` of an aten call, given by position or keyword (export drops defaults)."""
    if len(node.args) > position:
        return node.args[position]
    return node.kwargs.get(name, default)


def _emit(importer, expr):
    return importer.block_builder.emit(expr)


def _reduce_with_index(reduce, arg_reduce):
    """``aten.max.dim`` / ``min.dim``: the values and their indices along ``dim`` (the first index of a tie, as
    torch), as a tuple."""

    def convert(node, importer):
        x = importer.env[node.args[0]]
        dim, keepdim = _arg(node, 1, "dim", None), _arg(node, 2, "keepdim", False)
        values = _emit(importer, reduce(x, axis=dim, keepdims=keepdim))
        indices = _emit(importer, arg_reduce(x, axis=dim, keepdims=keepdim))
        return _emit(importer, relax.Tuple([values, indices]))

    return convert


def _amin(node, importer):
    """``aten.amin``: ``R.min`` over the same axes (the importer has ``amax`` only through ours)."""
    return _emit(importer, relax.op.min(importer.env[node.args[0]], axis=_arg(node, 1, "dim", None),
                                        keepdims=_arg(node, 2, "keepdim", False)))


def _native_group_norm(node, importer):
    """``aten.native_group_norm`` (what ``group_norm`` decomposes to): the channels in ``groups`` groups, each
    normalised by its mean and (biased) variance, then the per-channel affine; with the mean and the inverse
    deviation per (sample, group), as torch returns them."""
    x = importer.env[node.args[0]]
    weight, bias = node.args[1], node.args[2]
    groups, eps = node.args[6], node.args[7]
    shape = x.ty.shape
    dtype = str(x.ty.dtype)
    grouped = _emit(importer, relax.op.reshape(x, [shape[0], groups, -1]))
    mean = _emit(importer, relax.op.mean(grouped, axis=[2], keepdims=True))
    centred = _emit(importer, relax.op.subtract(grouped, mean))
    var = _emit(importer, relax.op.mean(relax.op.multiply(centred, centred), axis=[2], keepdims=True))
    inv = _emit(importer, relax.op.rsqrt(relax.op.add(var, relax.const(eps, dtype))))
    out = _emit(importer, relax.op.reshape(relax.op.multiply(centred, inv), shape))
    per_channel = [shape[1]] + [1] * (len(shape) - 2)
    if weight is not None:
        out = _emit(importer, relax.op.multiply(out, relax.op.reshape(importer.env[weight], per_channel)))
    if bias is not None:
        out = _emit(importer, relax.op.add(out, relax.op.reshape(importer.env[bias], per_channel)))
    stats = [relax.op.reshape(s, [shape[0], groups]) for s in (mean, inv)]
    return _emit(importer, relax.Tuple([out, *(_emit(importer, s) for s in stats)]))


def _slice(node, importer):
    """``aten.slice.Tensor`` up to a symbolic size that torch proved in bounds (``self.cos[:s]`` of a RoPE table
    with ``s <= `` its rows, from ``dynamic_shapes()``'s bounds): the importer's ``strided_slice`` assumes in bounds,
    so its size is ``s`` as torch's is. The importer's own checks it, and its size stays ``min(s, rows)``, which
    no later shape equals: every op after it has an unknown shape and FoldConstant cannot build it."""
    import torch

    start, end, step = _arg(node, 2, "start", None), _arg(node, 3, "end", None), _arg(node, 4, "step", 1)
    dim = _arg(node, 1, "dim", 0)
    size = getattr(node.meta.get("val"), "shape", None)
    end_size = end.meta.get("val") if isinstance(end, torch.fx.Node) else None
    if (start in (None, 0) and step == 1 and isinstance(end_size, torch.SymInt) and size is not None
            and str(size[dim]) == str(end_size)):
        x = importer.env[node.args[0]]
        return _emit(importer, relax.op.strided_slice(x, [dim], [0], [importer.env[end]], [1], assume_inbound=True))
    return importer._slice(node)


CONVERTERS = {
    **CUSTOM_CONVERTERS,
    "slice.Tensor": _slice,
    "max.dim": _reduce_with_index(relax.op.max, relax.op.argmax),
    "min.dim": _reduce_with_index(relax.op.min, relax.op.argmin),
    "amin.default": _amin,
    "native_group_norm.default": _native_group_norm,
}


def _where(node, path: Path) -> str:
    return source_line(node, path) or "(no source line recorded)"


def _op_name(node) -> str:
    return f"aten.{node.target.__name__}"


def _unlowerable(expr, bb) -> str | None:
    """The Relax operator ``expr`` (a converter's result, or the fields of a tuple of them) is bound to when
    no legalisation lowers it."""
    value = bb.lookup_binding(expr) if isinstance(expr, relax.Var) else expr
    if isinstance(value, relax.Tuple):
        return next(filter(None, (_unlowerable(f, bb) for f in value.fields)), None)
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        name = value.op.name
        if name not in _RUNTIME_OPS | DISPATCHED_OPS and value.op.get_attr("FLegalize") is None:
            return name
    return None


def _checked(name: str, ours):
    """The converter of ``name`` (ours, or the importer's own), its failure and its unlowerable result named
    with the node's torch op and source line."""

    def convert(node, importer):
        if ours is not None:
            result = ours(node, importer)
        else:
            if "_mtp_originals" not in importer.__dict__:  # the importer's own, bound to it
                importer._mtp_originals = type(importer).create_convert_map(importer)
            result = importer._mtp_originals[name](node)
        relax_op = _unlowerable(result, importer.block_builder)
        if relax_op is not None:
            raise _Gap(node, f"TVM's importer makes it {relax_op}, which no legalisation lowers (the build would "
                             "fail in the VM's code generator)")
        return result

    return convert


def refuse_custom_ops(program, path: Path) -> None:
    """A ``torch.library`` operator of the user's in ``program``: one line naming it and its source line. Its
    definition lives in the user's file, which runs in a child process only, so neither the parent's
    ``torch.export.load`` nor TVM's importer could know it."""
    for node in program.graph.nodes:
        namespace = getattr(node.target, "namespace", None) if node.op == "call_function" else None
        if namespace is not None and namespace not in ("aten", "prims"):
            raise UsageError(f"module file {path}: custom operator {namespace}::{node.target._opname} at "
                             f"{_where(node, path)}: TVM imports torch's own operators only; write it with "
                             "torch operators")


class _Gap(Exception):
    def __init__(self, node, why: str):
        super().__init__(why)
        self.node, self.why = node, why


def import_program(program, path: Path) -> tuple[tvm.IRModule, ExportedGraph]:
    """``from_exported_program`` of the user's exported ``program`` (parameters kept as inputs) with our
    converters, its bindings named after their FX nodes (``ir/graph_nodes.py``), and the decomposed graph it
    imported; every operator it cannot import or lower is a ``UsageError`` naming it and its source line."""
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    with warnings.catch_warnings():  # decomposed here, so every node we check is one the importer converts
        warnings.filterwarnings("ignore", category=FutureWarning)
        program = program.run_decompositions()
    known = set(ExportedProgramImporter().create_convert_map()) | set(CONVERTERS)
    nodes = [n for n in program.graph.nodes if n.op == "call_function"]
    missing = next((n for n in nodes if n.target.__name__ not in known), None)
    if missing is not None:
        raise UsageError(f"module file {path}: torch op {_op_name(missing)} at {_where(missing, path)}: "
                         "TVM 0.27's importer has no converter for it (nor has mtp_tvm's ir/op_coverage.py); "
                         "rewrite it with supported ops")
    convert_map = {n.target.__name__: _checked(n.target.__name__, CONVERTERS.get(n.target.__name__))
                   for n in nodes}
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)
            return import_named(program, path, convert_map)  # decomposed above
    except _Gap as gap:
        raise UsageError(f"module file {path}: torch op {_op_name(gap.node)} at {_where(gap.node, path)}: "
                         f"{gap.why}") from None
    except Exception as e:  # a converter's own failure: the operator in this use is not supported
        failing = _failing_node(e, nodes)
        where = (f"torch op {_op_name(failing)} at {_where(failing, path)}: " if failing is not None else "")
        raise UsageError(f"module file {path}: TVM's from_exported_program cannot import model(): {where}"
                         f"{type(e).__name__}: {_last_line(e)}") from None


def _last_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[-1] if text else ""


def _failing_node(error: BaseException, nodes: list):
    """The graph node whose converter raised ``error``: the ``node`` argument of the innermost converter frame."""
    tb = error.__traceback__
    found = None
    while tb is not None:
        node = tb.tb_frame.f_locals.get("node")
        if node is not None and getattr(node, "op", None) == "call_function" and node in nodes:
            found = node
        tb = tb.tb_next
    return found
