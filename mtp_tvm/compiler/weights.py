"""Weights held by identity: ``main_transform_params`` packs a set of weight objects once, and the objects stay
referenced (so their ids are not reused) and watched, so that an unchanged weight is never hashed or packed
again and a changed one is never served stale.

What counts as a change (``HeldWeight.change``): another object; a torch tensor whose version counter moved (every
in-place op bumps it; a numpy view of a torch tensor is watched through that tensor); a tensor or array
re-pointed, reshaped or re-typed in place. Numpy memory cannot be versioned, so a packed numpy weight is made
read-only (``flags.writeable = False``), with the numpy arrays it is a view of: an in-place write raises instead
of going unseen, and turning the flag back on counts as a change. Not watched: memory written behind numpy's and
torch's back (a writable memory map, a ``bytearray`` an array wraps, a tensor made by ``torch.from_numpy`` written
through its array). A torch inference tensor (made under ``torch.inference_mode()``) has no version counter:
nothing proves it unchanged (``is_tracked``).

Making the caller's array read-only is a side effect a user can be surprised by: the first time a process does it,
a ``ReadOnlyWeightWarning`` says so once, with what to pass instead (a torch tensor, or a copy). Versioning numpy
memory another way would cost a pass over every weight on every call (a hash or a compare), the cost the cache is
there to avoid.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch


class ReadOnlyWeightWarning(UserWarning):
    """A numpy weight of the caller's was made read-only by ``run``/``bind`` (said once per process)."""


_warned: list[bool] = []  # whether this process said it


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside mtp_tvm: the warning names the caller's line."""
    package = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _freeze(name: str, arrays: tuple[np.ndarray, ...]) -> None:
    """Make ``arrays`` (a weight and what it is a view of) read-only, saying so the first time."""
    if not _warned and any(a.flags.writeable for a in arrays):
        _warned.append(True)
        warnings.warn(f"mtp_tvm made numpy weight {name!r} read-only (and any array it is a view of): a packed "
                      "weight is reused while unchanged, and numpy memory has no version counter, so an in-place "
                      "write must raise instead of going unseen; pass a torch tensor, or a copy, to keep your array "
                      "writable (said once)", ReadOnlyWeightWarning, stacklevel=_caller_level())
    for a in reversed(arrays):  # a view cannot be made writeable again while its base is read-only
        a.flags.writeable = False


def _owning_tensor(x) -> torch.Tensor | None:
    """The torch tensor whose memory ``x`` is (a tensor, or a numpy view of one), if any."""
    while isinstance(x, np.ndarray):
        x = x.base
    return x if isinstance(x, torch.Tensor) else None


def _numpy_chain(x) -> tuple[np.ndarray, ...]:
    """``x`` and the numpy arrays it is a view of (none for a torch tensor)."""
    chain = []
    while isinstance(x, np.ndarray):
        chain.append(x)
        x = x.base
    return tuple(chain)


def _version(t: torch.Tensor | None) -> int | None:
    """The tensor's version counter; None for an inference tensor, which has none."""
    if t is None or t.is_inference():
        return None
    return t._version


def is_tracked(x) -> bool:
    """Whether an in-place change of ``x`` can be seen: false for a torch inference tensor (or a view of one)."""
    tensor = _owning_tensor(x)
    return tensor is None or _version(tensor) is not None


def _layout(x) -> tuple:
    """What an in-place re-point, reshape or re-type changes (``t.data = ...``, ``a.shape = ...``)."""
    if isinstance(x, torch.Tensor):
        return tuple(x.shape), x.stride(), x.dtype, x.device, x.data_ptr()
    return x.shape, x.strides, x.dtype


@dataclasses.dataclass(frozen=True)
class HeldWeight:
    """One weight object as it was packed, and what reveals an in-place change of it."""

    name: str
    source: object                       # the tensor or array passed, kept referenced so its id stays its own
    layout: tuple
    tensor: torch.Tensor | None          # the torch tensor owning the memory: the weight, or a numpy view's base
    version: int | None                  # ``tensor``'s version counter when packed
    frozen: tuple[np.ndarray, ...]       # the numpy arrays made read-only

    @classmethod
    def hold(cls, name: str, source) -> HeldWeight:
        """Record ``source`` as packed now, making its numpy arrays read-only."""
        tensor = _owning_tensor(source)
        frozen = _numpy_chain(source)
        _freeze(name, frozen)
        return cls(name, source, _layout(source), tensor, _version(tensor), frozen)

    def change(self) -> str | None:
        """How the weight changed in place since it was held (a phrase), None when it provably did not."""
        if self.tensor is not None and self.version is None:
            return "is a torch inference tensor (no version counter)"
        if self.tensor is not None and self.tensor._version != self.version:
            return "changed in place"
        if any(a.flags.writeable for a in self.frozen):
            return "was made writeable again"
        if _layout(self.source) != self.layout:
            return "was re-pointed, reshaped or re-typed in place"
        return None


@dataclasses.dataclass(frozen=True)
class PackedWeights:
    """``main``'s weight arguments on the device, made from the weight objects ``held``."""

    held: tuple[HeldWeight, ...]
    tensors: list

    def change(self) -> tuple[str, str] | None:
        """(name, how) of the first weight changed in place since it was packed; None when none did."""
        for h in self.held:
            how = h.change()
            if how is not None:
                return h.name, how
        return None

    def serves(self, weights: dict) -> bool:
        """Whether these packed weights are ``weights`` (name -> object) as they are now: the same objects,
        none changed in place."""
        return (len(weights) == len(self.held) and all(weights.get(h.name) is h.source for h in self.held)
                and self.change() is None)


class WeightCache:
    """The last weight set packed: reused while the same weight objects come back unchanged, else validated
    (``validate``: name -> object to arrays in order), held (read-only from then on) and packed (``transform``)."""

    def __init__(self):
        self._last: PackedWeights | None = None

    def get(self, weights: dict, validate: Callable[[dict], list], transform: Callable[[list], list]) -> PackedWeights:
        if self._last is None or not self._last.serves(weights):
            arrays = validate(weights)
            self._last = None  # the old set's device tensors go before the new ones are made (unless a bind holds them)
            held = tuple(HeldWeight.hold(n, w) for n, w in weights.items())  # before packing: what is packed is held
            self._last = PackedWeights(held, transform(arrays))
        return self._last
