"""Moving tensors between torch, numpy and TVM without copies through FP32 (BF16 stays BF16), and without any
copy where an input already lives on the binary's device (``input_placement``)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import torch
import tvm

from ..support.choice import Choice
from ..support.errors import UsageError
from .arrays import dtype_name, read_npz, require_values, to_numpy, write_npz


def to_device(x: np.ndarray | tvm.runtime.Tensor, dev) -> tvm.runtime.Tensor:
    """A host array copied to ``dev``; a tensor already there (``input_placement``) passes as it is."""
    if isinstance(x, tvm.runtime.Tensor):
        return x
    return tvm.runtime.tensor(np.ascontiguousarray(x), dev)


def _device_of(x) -> str | None:
    """Where a torch or TVM tensor lives (``cpu``, ``cuda:0``, ``meta``), None for anything else (host data)."""
    if isinstance(x, torch.Tensor):
        return str(x.device)
    if isinstance(x, tvm.runtime.Tensor):
        return "cpu" if x.device.type == "cpu" else f"{x.device.type}:{x.device.index}"
    return None


def input_placement(name: str, x, dev) -> bool:
    """Whether input ``x`` is already where the binary on ``dev`` runs (then ``main`` takes it as it is, no
    copy): a torch tensor on that GPU, a TVM tensor on ``dev``. False for host data (numpy, a CPU torch tensor,
    a CPU TVM tensor for a GPU binary: validated as numpy, then shared or copied). The one place that decides
    where an input may live: a tensor on any other device (another GPU, a CUDA tensor for a CPU binary) is a
    ``UsageError`` naming both devices, never a silent copy. Torch's ``meta`` is no device to pass it to: a meta
    tensor has no values, and ``require_values`` says so (as ``to_numpy`` does of a sparse one)."""
    where = _device_of(x)
    if where == "meta":
        require_values(x)
    if where is None or (where == "cpu" and isinstance(x, torch.Tensor)):
        return False
    here = "cpu" if dev.type == "cpu" else f"{dev.type}:{dev.index}"
    if where in (here, "cpu"):
        return where == here
    raise UsageError(f"input {name!r} is on {where}, but this binary runs on {here}: pass it there"
                     + ("" if here == "cpu" else " or on the CPU"))


def _dtype_and_shape(x) -> tuple[str, tuple[int, ...]]:
    """A device tensor's dtype name and shape, read without touching its memory."""
    if isinstance(x, torch.Tensor):
        return str(x.dtype).removeprefix("torch."), tuple(x.shape)
    return str(x.dtype), tuple(int(d) for d in x.shape)


def shared_in_place(x) -> tvm.runtime.Tensor:
    """A tensor already on the binary's device (``input_placement``) as ``main``'s argument, shared through
    DLPack (no copy). A strided or unaligned torch tensor is first made compact by torch on that device (a device
    copy, never a host round trip): TVM's kernels assume compact, aligned buffers."""
    if isinstance(x, tvm.runtime.Tensor):
        return x
    x = x.detach()
    if not x.is_contiguous() or x.data_ptr() % TVM_ALIGNMENT:
        x = x.clone(memory_format=torch.contiguous_format)
    return tvm.runtime.from_dlpack(x)


TVM_ALIGNMENT = 64  # what ``tvm.runtime.from_dlpack`` demands: the compiled kernels may assume aligned buffers


def shared_with_device(x, a: np.ndarray | tvm.runtime.Tensor, dev) -> tvm.runtime.Tensor:
    """An input (``x`` as passed, ``a`` what ``validate_inputs`` made of it) on ``dev``: one already there passes
    as it is, a CPU torch tensor the kernels can read in place (contiguous, aligned) is shared through DLPack,
    anything else copied. Per call, a copy costs more than the small activation it moves: every buffer is cold
    after a kernel that streams the weights."""
    if (isinstance(x, torch.Tensor) and dev.type == "cpu" and x.device.type == "cpu" and x.is_contiguous()
            and x.data_ptr() % TVM_ALIGNMENT == 0):
        return tvm.runtime.from_dlpack(x.detach())
    return to_device(a, dev)


def as_argument(name: str, x, dev) -> tvm.runtime.Tensor:
    """An input ``main`` takes without validation (``device_args``: bench's and profile's own inputs), placed as
    ``run`` places it."""
    return shared_in_place(x) if input_placement(name, x, dev) else shared_with_device(x, to_numpy(x), dev)


class Outputs(Choice):
    """What ``run`` returns: ``numpy`` arrays on the host (copied from a GPU), ``torch`` tensors where ``main``
    left them (on the GPU for a CUDA binary; shared through DLPack, no copy), or ``tvm`` (the
    ``tvm.runtime.Tensor``s ``main`` returned, on its device)."""

    NUMPY = "numpy"
    TORCH = "torch"
    TVM = "tvm"


def to_host(t: tvm.runtime.Tensor) -> np.ndarray:
    """An output as numpy: shared through DLPack where numpy reads it (CPU memory, not BF16), else copied.
    ``main`` returns fresh tensors each call, so a shared output is never overwritten."""
    if t.device.type == "cpu" and str(t.dtype) != "bfloat16":
        return np.from_dlpack(t)
    return t.numpy()


def output_as(t: tvm.runtime.Tensor, outputs: Outputs):
    """One of ``main``'s outputs in the form ``outputs`` names; only ``numpy`` copies (from a GPU, or BF16)."""
    if outputs is Outputs.NUMPY:
        return to_host(t)
    return torch.from_dlpack(t) if outputs is Outputs.TORCH else t


FINITE_SCAN_CHUNK = 1 << 20  # elements per step of the non-finite scan: its temporaries stay small on 132 MB weights
_BF16_EXPONENT = 0x7F80       # a BF16 with every exponent bit set is Inf or NaN


def _all_finite(chunk: np.ndarray) -> bool:
    """Whether ``chunk`` (floating, flat, not empty) holds no NaN/Inf, in one pass; BF16 by its exponent bits."""
    if dtype_name(chunk) == "bfloat16":
        return int(np.bitwise_and(chunk.view(np.uint16), _BF16_EXPONENT).max()) != _BF16_EXPONENT
    return bool(np.isfinite(chunk).all())


def _non_finite(chunk: np.ndarray) -> np.ndarray:
    """Where ``chunk`` (floating, flat) is NaN or Inf; BF16 by its bit pattern, never widened to FP32."""
    if dtype_name(chunk) == "bfloat16":
        return np.bitwise_and(chunk.view(np.uint16), _BF16_EXPONENT) == _BF16_EXPONENT
    return ~np.isfinite(chunk)


def _require_finite(name: str, a: np.ndarray) -> None:
    """NaN/Inf in an input would surface as a confusing golden failure far downstream: name it here. Scanned in
    chunks (a contiguous array is never copied, nor BF16 widened); counted and located only when one is found."""
    if a.dtype.kind != "f" and dtype_name(a) != "bfloat16":
        return
    flat = a.reshape(-1)  # a view unless ``a`` is strided
    starts = range(0, flat.size, FINITE_SCAN_CHUNK)
    if all(_all_finite(flat[start:start + FINITE_SCAN_CHUNK]) for start in starts):
        return
    count, first = 0, None
    for start in starts:
        bad = _non_finite(flat[start:start + FINITE_SCAN_CHUNK])
        found = int(np.count_nonzero(bad))
        if found and first is None:
            first = start + int(np.argmax(bad))
        count += found
    where = tuple(int(i) for i in np.unravel_index(first, a.shape))
    raise UsageError(f"input {name!r} has {count} non-finite values (NaN/Inf), the first at {where}")


def require_mapping(inputs, what: str = "inputs") -> None:
    """Inputs are a dict of name -> tensor (a list or an array would fail deep inside)."""
    if not isinstance(inputs, Mapping) or not all(isinstance(k, str) for k in inputs):
        raise UsageError(f"{what} must be a dict of input name -> array, got {type(inputs).__name__}"
                         + (f" with keys {sorted(map(repr, inputs))}" if isinstance(inputs, Mapping) else ""))


def check_names(specs: dict, inputs: dict, owner: str, what: str = "inputs") -> None:
    """Refuse inputs missing from ``specs`` or not in them, naming both lists."""
    require_mapping(inputs, what)
    missing, extra = sorted(set(specs) - set(inputs)), sorted(set(inputs) - set(specs))
    if missing or extra:
        raise UsageError(f"{what} do not match {owner}: missing {missing}, unexpected {extra}")


_RAW_BYTES_HINT = (" (raw bytes: numpy's np.load reads BF16 and the other ml_dtypes types of an .npz so; "
                   "mtp_tvm.read_inputs(path) restores them)")


def validate_inputs(specs: dict, inputs: dict, owner: str, what: str = "inputs",
                    dev=None) -> tuple[list[np.ndarray | tvm.runtime.Tensor], dict[str, int]]:
    """Check named inputs against ``specs`` (anything with ``.shape`` and ``.dtype``; a ``str`` dim is symbolic
    and binds to the first size seen) and return them in spec order, with the bound dims: host data as numpy
    arrays (scanned for NaN/Inf), and, given the binary's device ``dev``, tensors already on it as TVM tensors
    sharing their memory (dtype and shape checked, not scanned). Every message names the input and both shapes;
    ``owner`` says what the specs belong to, ``what`` which of its inputs they are ("weights", "activations")."""
    check_names(specs, inputs, owner, what)
    arrays, bound = [], {}
    for name, spec in specs.items():
        x = inputs[name]
        resident = dev is not None and input_placement(name, x, dev)
        a = shared_in_place(x) if resident else to_numpy(x)
        dtype, shape = _dtype_and_shape(x) if resident else (dtype_name(a), a.shape)
        if dtype != spec.dtype:
            raw = not resident and a.dtype.kind == "V"
            raise UsageError(f"input {name!r} has dtype {a.dtype.str if raw else dtype}, expected {spec.dtype}"
                             + (_RAW_BYTES_HINT if raw else ""))
        if len(shape) != len(spec.shape) or any(
                got != (bound.setdefault(want, got) if isinstance(want, str) else want)
                for got, want in zip(shape, spec.shape)):
            expected = tuple(bound.get(d, d) if isinstance(d, str) else d for d in spec.shape)
            raise UsageError(f"input {name!r} has shape {shape}, expected {expected}")
        if not resident:  # a scan on the device would cost a kernel and a synchronisation per call
            _require_finite(name, a)
        arrays.append(a)
    if any(size < 1 for size in bound.values()):  # T, or R rows per owner
        raise UsageError(f"inputs have 0 tokens ({', '.join(f'{d}={v}' for d, v in bound.items())}); need >= 1")
    return arrays, bound


def read_inputs(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` that ``mtp-tvm inputs``/``run`` (or ``write_inputs``) wrote, BF16 and float8
    restored from raw bytes: what ``run``/``bind`` take."""
    return read_npz(path)


def write_inputs(path: str | os.PathLike, arrays: Mapping[str, object]) -> None:
    """Write named arrays (numpy or torch, any dtype including BF16) as ``read_inputs`` and ``mtp-tvm run
    --inputs`` read them back, bit for bit."""
    require_mapping(arrays, "arrays")
    write_npz(path, arrays)
