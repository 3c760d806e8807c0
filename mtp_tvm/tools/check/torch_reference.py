"""The reference ``localize`` takes for a module file without ``--against``: eager torch, op by op. It names the
first op of the user's own torch model whose TVM value differs from eager torch's. The build runs once on the
file's example inputs with every kernel call recorded (``tools/kernel_calls.py``); torch runs the exported graph
TVM imported, node by node (``ir/graph_nodes.py``).

Each kernel call's output is partnered with a graph node: by name where the call binds a var named after one
(``ir/graph_nodes`` names them; a kernel that is one op keeps it), else, where fusion renamed it, with the node of
the same shape and dtype whose torch value is closest and near (``_distance``), in graph order after the previous
call's node. A call whose output no node has (an FP16 temporary a pass made, a weight repacked, scores with the
causal mask added) has no partner and is listed. The
first partnered call whose output fails ``assert_close`` (the file's tolerance, as ``check --module``) is
named with its node, the node's op, the ``nn.Module`` it ran in and the user's source line, and whether the
calls that made its inputs already differed: "this op computes differently" against "it received different
inputs". The first NaN/Inf is named too (``kernel_calls.nan_origin``).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import tvm
from tvm import relax

from ...compiler.arrays import dtype_name, to_numpy
from ...compiler.module_build import CompiledModule
from ...ir.graph_nodes import GraphNode, node_values
from ...ir.module_file import TORCH, to_torch
from ...support.atomic_file import write_user_file
from ...support.errors import UsageError
from ...support.text_table import text_table
from ...verify.comparators import Comparison
from ...verify.module_golden import assert_close
from ...verify.tolerances import ModuleTolerance
from .kernel_calls import PARAM, KernelCall, NanOrigin, nan_origin, record

BY_NAME, BY_VALUE = "name", "value"  # how a call was partnered with its node


@dataclasses.dataclass(frozen=True)
class OpDiff:
    """One kernel call against torch: its node (None: no partner), how it was partnered, the comparison of its
    output, and the calls that made its inputs and differed."""

    call: KernelCall
    var: str
    node: GraphNode | None
    how: str | None
    comparison: Comparison | None
    differing_inputs: tuple[str, ...] = ()

    @property
    def differs(self) -> bool:
        return self.comparison is not None and not self.comparison.passed

    def as_dict(self) -> dict:
        return {"call": self.call.name, "var": self.var, "node": None if self.node is None else
                dataclasses.asdict(self.node), "partnered_by": self.how,
                "comparison": None if self.comparison is None else self.comparison.as_dict(),
                "differing_inputs": list(self.differing_inputs)}


@dataclasses.dataclass(frozen=True)
class TorchLocalizeResult:
    """Every kernel call against torch, the first that differs, and the first NaN/Inf."""

    module: str
    build: str
    ops: tuple[OpDiff, ...]
    nan: NanOrigin | None

    @property
    def first(self) -> OpDiff | None:
        return next((d for d in self.ops if d.differs), None)

    @property
    def passed(self) -> bool:
        """No op differs from torch (a NaN/Inf is named, not judged: a causal mask's -inf is one)."""
        return self.first is None

    def describe_first(self) -> str:
        d = self.first
        if d is None:
            partnered = sum(1 for o in self.ops if o.node is not None)
            return f"every partnered kernel call is within tolerance ({partnered} of {len(self.ops)} calls)"
        c = d.comparison
        lines = [f"FIRST DIFFERING OP: {d.node.describe()}",
                 f"  computed by kernel call {d.call.name} (its output {d.var}, partnered by {d.how})",
                 f"  largest |diff| {c.max_abs_diff:.6g} at {c.worst_index}; {c.mismatches}/{c.numel} beyond "
                 f"{c.comparator}"]
        if d.differing_inputs:
            lines.append(f"  its inputs already differed (from {', '.join(d.differing_inputs)}): it received "
                         "different inputs")
        else:
            lines.append("  its inputs matched torch's (or have no torch counterpart): this op computes differently")
        return "\n".join(lines)

    def table(self) -> str:
        rows = [("call", "output", "node", "by", "max |diff|", "mismatches", "result")]
        first = self.first
        for d in self.ops:
            c = d.comparison
            rows.append((d.call.name, d.var, d.node.name if d.node else "-", d.how or "-",
                         "-" if c is None else f"{c.max_abs_diff:.3g}",
                         "-" if c is None else f"{c.mismatches}/{c.numel}",
                         "no partner" if c is None else "FIRST" if d is first else "ok" if c.passed else "DIFF"))
        lines = [f"localize {self.module}: [{self.build}] against eager torch, {len(self.ops)} kernel calls",
                 *text_table(rows, {4, 5}), self.describe_first(),
                 self.nan.describe() if self.nan else "NaN/Inf: none in any kernel call's output"]
        return "\n".join(lines)

    def write_json(self, path: str | os.PathLike) -> None:
        write_user_file(path, lambda p: p.write_text(json.dumps(self.as_dict(), indent=1)), what="localize report ")

    def as_dict(self) -> dict:
        first = self.first
        return {"module": self.module, "build": self.build, "passed": self.passed,
                "first": None if first is None else first.as_dict(), "ops": [d.as_dict() for d in self.ops],
                "nan": self.nan and self.nan.as_dict()}


def output_vars(compiled: CompiledModule) -> list[tuple[str, str]]:
    """(kernel, the var its call binds) of every ``R.call_tir`` of ``main``, in order."""
    call_tir = tvm.ir.Op.get("relax.call_tir")
    found = []
    for block in compiled.optimized_module["main"].body.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Call) and b.value.op.same_as(call_tir):
                found.append((b.value.args[0].name_hint, b.var.name))
    return found


def call_vars(calls: list[KernelCall], binds: list[tuple[str, str]]) -> list[str]:
    """The var each call binds: the calls follow the bindings in order, less those lowering made views (a
    reshape runs no kernel)."""
    found, rest = [], iter(binds)
    for call in calls:
        var = next((v for k, v in rest if k == call.kernel), None)
        if var is None:
            raise UsageError(f"kernel call {call.name} follows no R.call_tir binding of main: cannot name it")
        found.append(var)
    return found


NEAR = 0.1  # a by-value partner lies within this share of the node's largest magnitude (the FP16 norm: 1e-3)


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    """How far the call's output ``a`` lies from a node's value ``b``, as a share of ``b``'s largest magnitude;
    infinite where they cannot be one value: integers or booleans that differ, or NaN/Inf at other places (a
    causal mask's -inf beside the scores it masks)."""
    if a.dtype.kind in "biu":
        return 0.0 if np.array_equal(a, b) else float("inf")
    a, b = a.astype(np.float32), b.astype(np.float32)
    finite = np.isfinite(b)
    if not (np.array_equal(np.isfinite(a), finite) and np.array_equal(np.isnan(a), np.isnan(b))
            and np.array_equal(a[np.isinf(b)], b[np.isinf(b)])):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = float(np.abs(b[finite]).max())
    return float(np.abs(a[finite] - b[finite]).max()) / max(scale, np.finfo(np.float32).tiny)


def _partner(call: KernelCall, var: str, values: dict, nodes: dict[str, GraphNode], after: int,
             order: dict[str, int]) -> tuple[str | None, str | None]:
    """The node of ``call``'s output and how it was found (see the module docstring); ``values``: the nodes'
    torch values as numpy. A node found by value must be near the output (``_distance`` within ``NEAR``): a
    kernel that computes what no node holds (an attention mask added to its scores, a softmax torch runs inside
    one SDPA node) has no partner rather than the nearest stranger."""
    if len(call.outputs) != 1:
        return None, None
    shape, dtype = call.outputs[0]

    def fits(name: str) -> bool:
        v = values.get(name)
        return v is not None and v.shape == shape and dtype_name(v) == dtype

    if var in nodes and fits(var):
        return var, BY_NAME
    out = call.output_arrays[0]
    distances = {n: _distance(out, values[n]) for n in nodes if order[n] > after and fits(n)}
    best = min(distances, key=distances.get, default=None)
    if best is None or distances[best] > NEAR:
        return None, None
    return best, BY_VALUE


def compare_with_torch(compiled: CompiledModule, tolerance: ModuleTolerance) -> TorchLocalizeResult:
    """Record every kernel call of ``compiled`` on its example inputs and compare each with torch (see the module
    docstring)."""
    user = compiled.module_file
    if user.kind != TORCH or user.graph is None:
        raise UsageError(f"localize --module compares with torch op by op: {user.path.name} defines module() (a "
                         "TVMScript module), which has no torch graph; use --against to compare two builds")
    inputs = user.examples
    calls = record(compiled, inputs, keep=lambda _i: True)
    binds = call_vars(calls, output_vars(compiled))
    values = {name: to_numpy(v) for name, v in
              node_values(user.graph, tuple(to_torch(inputs[n]) for n in user.activation_names)).items()
              if hasattr(v, "shape") and hasattr(v, "dtype")}  # tensors (not sizes, not tuples)
    order = {name: i for i, name in enumerate(user.graph.nodes)}
    ops: list[OpDiff] = []
    after = -1
    for call, var in zip(calls, binds):
        name, how = _partner(call, var, values, user.graph.nodes, after, order)
        if name is None:
            ops.append(OpDiff(call, var, None, None, None))
            continue
        after = max(after, order[name]) if how == BY_VALUE else after
        comparison = assert_close(call.output_arrays[0], values[name], tolerance)
        differing = tuple(ops[src - 1].call.name for src in call.sources
                          if src not in (None, PARAM) and ops[src - 1].differs)
        ops.append(OpDiff(call, var, user.graph.nodes[name], how, comparison, differing))
    build = f"schedule={compiled.schedule} target={compiled.target.kind.name}"
    debug = " ".join(compiled.debug.replace(dump_passes=None).as_argv())
    return TorchLocalizeResult(user.path.name, build + (f" {debug}" if debug else ""), tuple(ops),
                                nan_origin(calls))
