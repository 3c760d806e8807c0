"""Every kernel call of ``main`` with what went in and what came out: the record that ``localize`` compares
between two builds and that ``check --nan-check`` searches for the first non-finite value.

A call's arguments are the ``R.call_tir`` inputs of the module entering lowering (``optimized_module``), then
its outputs; which is which is read from that call. The VM reuses memory between calls, so values are copied
when they are current: inputs just before the call, outputs just after it. Each output buffer is zeroed just
before its call, so elements a kernel leaves unwritten (padded rows past the rows it computes) read 0 in every
build and every run, never stale memory that could pass for a NaN or a difference.

A tensor input is traced to where it came from: an argument of ``main`` (a case input, or a weight in the
build's packed layout) or the output of an earlier call (matched by its data pointer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax

from ...compiler.arrays import NUMPY_DTYPES, dtype_name, to_numpy
from ...compiler.driver import CompiledCase
from ...support.errors import MtpError
from ..measure.profile import kernel_names, watch_calls

PARAM = "param"  # the source of a tensor input that is an argument of main

Sig = tuple[tuple[int, ...], str]  # a tensor's shape and dtype


@dataclasses.dataclass
class KernelCall:
    """One call of ``main``: ``index`` counts from 1 in call order. ``sources[i]`` says where tensor input i
    came from: ``PARAM`` or the index of the call that wrote it (None: neither, e.g. a view). ``args`` is
    the call's argument list as ``("in", i)``, ``("scalar", value)``, ``("out", j)``. The arrays are kept only
    for the calls asked for."""

    index: int
    kernel: str
    inputs: tuple[Sig, ...]
    outputs: tuple[Sig, ...]
    args: tuple[tuple, ...]
    sources: tuple
    nonfinite_inputs: int = 0
    nonfinite_outputs: tuple[int, ...] = ()
    first_nonfinite: tuple[int, tuple[int, ...]] | None = None  # (output, index) of the first NaN/Inf
    input_arrays: tuple[np.ndarray, ...] | None = dataclasses.field(default=None, repr=False)
    output_arrays: tuple[np.ndarray, ...] | None = dataclasses.field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"#{self.index} {self.kernel}"

    @property
    def nbytes(self) -> int:
        """What keeping this call's arrays costs."""
        return sum(int(np.prod(s, dtype=np.int64)) * NUMPY_DTYPES[d].itemsize for s, d in self.inputs + self.outputs)

    def describe_inputs(self, calls: list[KernelCall]) -> str:
        """Its inputs' shapes and where each came from, for a report."""
        parts = []
        for kind, value in self.args:
            if kind == "scalar":
                parts.append(str(value))
            elif kind == "in":
                (shape, dtype), src = self.inputs[value], self.sources[value]
                where = "main's argument" if src == PARAM else "?" if src is None else f"from {calls[src - 1].name}"
                parts.append(f"{list(shape)} {dtype} ({where})")
        return "; ".join(parts)


def input_counts(compiled: CompiledCase) -> dict[str, int]:
    """Kernel -> how many leading arguments of its calls are inputs (its ``R.call_tir`` argument tuple)."""
    if compiled.optimized_module is None:
        raise MtpError("this build kept no module entering lowering, so its kernel calls cannot be read")
    call_tir = tvm.ir.Op.get("relax.call_tir")
    counts: dict[str, int] = {}

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(call_tir):
            counts[expr.args[0].name_hint] = len(expr.args[1].fields)

    relax.analysis.post_order_visit(compiled.optimized_module["main"].body, visit)
    return counts


def _sig(t) -> Sig:
    return tuple(int(n) for n in t.shape), str(t.dtype)


def _nonfinite(a: np.ndarray) -> np.ndarray | None:
    """Where ``a`` is NaN/Inf (None for integer arrays, which cannot be)."""
    if a.dtype.kind != "f" and dtype_name(a) != "bfloat16":
        return None
    return ~np.isfinite(a.astype(np.float32, copy=False))


def record(compiled: CompiledCase, inputs: dict, keep: Callable[[int], bool] = lambda _i: False) -> list[KernelCall]:
    """Run ``main`` of ``compiled`` once on ``inputs`` (name -> tensor) and return every kernel call, in order;
    the arrays of the calls ``keep(index)`` accepts are kept."""
    counts = input_counts(compiled)
    args = compiled.device_args([to_numpy(inputs[n]) for n in compiled.input_specs])
    params = {a.data_ptr() for a in args if isinstance(a, tvm.runtime.Tensor)}
    writer: dict[int, int] = {}  # data pointer -> the last call that wrote it
    calls: list[KernelCall] = []

    def on_call(kernel: str, before: bool, call_args: tuple) -> None:
        if kernel not in counts:
            raise MtpError(f"kernel {kernel} is not called through R.call_tir: its outputs cannot be told")
        n = counts[kernel]
        ins = [a for a in call_args[:n] if isinstance(a, tvm.runtime.Tensor)]
        outs = [a for a in call_args[n:] if isinstance(a, tvm.runtime.Tensor)]
        if before:
            index = len(calls) + 1
            arrays = [t.numpy() for t in ins]
            bad = [_nonfinite(a) for a in arrays]
            listed, numbered = [], {"in": iter(range(len(ins))), "out": iter(range(len(outs)))}
            for pos, a in enumerate(call_args):
                if isinstance(a, tvm.runtime.Tensor):
                    kind = "in" if pos < n else "out"
                    listed.append((kind, next(numbered[kind])))
                else:  # a symbolic size (T), passed by value
                    listed.append(("scalar", int(a)))
            sources = tuple(PARAM if t.data_ptr() in params else writer.get(t.data_ptr()) for t in ins)
            calls.append(KernelCall(index, kernel, tuple(_sig(t) for t in ins), tuple(_sig(t) for t in outs),
                                    tuple(listed), sources,
                                    sum(int(b.sum()) for b in bad if b is not None),
                                    input_arrays=tuple(arrays) if keep(index) else None))
            for t in outs:
                t.copyfrom(np.zeros(_sig(t)[0], NUMPY_DTYPES[str(t.dtype)]))
            return
        call = calls[-1]
        arrays = [t.numpy() for t in outs]
        bad = [_nonfinite(a) for a in arrays]
        call.nonfinite_outputs = tuple(0 if b is None else int(b.sum()) for b in bad)
        first = next((j for j, count in enumerate(call.nonfinite_outputs) if count), None)
        if first is not None:
            where = np.unravel_index(int(np.argmax(bad[first])), arrays[first].shape)
            call.first_nonfinite = (first, tuple(int(i) for i in where))
        if keep(call.index):
            call.output_arrays = tuple(arrays)
        for t in outs:
            writer[t.data_ptr()] = call.index

    watch_calls(compiled.vm, args, kernel_names(compiled), on_call)
    return calls


@dataclasses.dataclass(frozen=True)
class NanOrigin:
    """The first kernel call whose output holds NaN/Inf. ``inputs_finite`` False: its inputs already held some
    (an argument of main), so it is where they were first seen, not where they arose."""

    index: int
    kernel: str
    output: int
    count: int
    first_at: tuple[int, ...]
    inputs_finite: bool

    def describe(self, build: str = "") -> str:
        where = f"{build} " if build else ""
        cause = ("while its inputs held none: this kernel made them" if self.inputs_finite else
                 "but its inputs already held some")
        return (f"first non-finite value in the {where}build: call #{self.index} {self.kernel}, output {self.output} "
                f"holds {self.count} NaN/Inf (the first at {self.first_at}), {cause}")

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def nan_origin(calls: list[KernelCall]) -> NanOrigin | None:
    """The first call whose output holds a non-finite value (None: no call's does)."""
    for c in calls:
        if c.first_nonfinite is not None:
            j, at = c.first_nonfinite
            return NanOrigin(c.index, c.kernel, j, c.nonfinite_outputs[j], at, c.nonfinite_inputs == 0)
    return None
