"""TODO docstring for compiler/runtime"""

from __future__ import annotations

import hashlib

import numpy as np
from tvm import relax

from ..compiler.tensors import to_device

TRANSFORM_PARAMS = "main_transform_params"  # made by LiftTransformParams from main's weight transforms


def main_args(vm: relax.VirtualMachine, dev, arrays: list[np.ndarray], num_input: int, cache: "WeightCache") -> list:
    """``main``'s arguments: the activations on the device, then the weights as ``main_transform_params`` made
    them (packed), transformed once per distinct set of weights. Shared by fresh builds and loaded artifacts."""
    acts, weights = arrays[:num_input], arrays[num_input:]
    if not vm.module.implements_function(TRANSFORM_PARAMS):
        return [to_device(a, dev) for a in arrays]
    packed = cache.get(weights, lambda: list(vm[TRANSFORM_PARAMS]([to_device(w, dev) for w in weights])))
    return [to_device(a, dev) for a in acts] + packed


class WeightCache:
    """The transformed (packed) weights of the last weight set seen, keyed by a digest of the weights' bytes:
    packing happens once per weight set, and a changed weight is never served stale."""

    def __init__(self):
        self._key: bytes | None = None
        self._value: list | None = None

    @staticmethod
    def digest(weights: list[np.ndarray]) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        for w in weights:
            h.update(str((w.dtype.str, w.shape)).encode())
            h.update(np.ascontiguousarray(w).view(np.uint8).data)
        return h.digest()

    def get(self, weights: list[np.ndarray], make) -> list:
        key = self.digest(weights)
        if key != self._key:
            self._key, self._value = key, make()
        return self._value
