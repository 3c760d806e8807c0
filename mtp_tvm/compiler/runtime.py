"""Running a built module, shared by fresh builds (``CompiledCase``) and loaded artifacts (``Artifact``): inputs
validated against the specs, weights packed once per distinct weight set by ``main_transform_params``, outputs
back as numpy.
"""

from __future__ import annotations

import hashlib
import os
import warnings

import numpy as np
import tvm
from tvm import relax

from ..compiler.tensors import to_device, validate_inputs
from ..ir.model import leading_activations
from ..passes.target import usable_cores
from ..spec.cases import TensorSpec
from ..support.errors import BuildError

TRANSFORM_PARAMS = "main_transform_params"  # made by LiftTransformParams from main's weight transforms
THREADS_ENV = "TVM_NUM_THREADS"


def runtime_threads() -> int:
    """The TVM runtime's worker threads: every core this process may use (``os.sched_getaffinity``) unless
    ``TVM_NUM_THREADS`` says otherwise. TVM's own default halves the reported concurrency, which is one
    thread on a 2-vCPU VM while torch and numpy use both. The pool reads the variable when it starts, so this
    runs before the first module does; a pool already started with another count is reported, not hidden."""
    wanted = os.environ.setdefault(THREADS_ENV, str(usable_cores()))
    actual = int(tvm.get_global_func("runtime.NumThreads")())
    if str(actual) != wanted:
        warnings.warn(f"the TVM thread pool already runs {actual} threads; {THREADS_ENV}={wanted} applies to "
                      "new processes only", RuntimeWarning, stacklevel=2)
    return actual


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


class Runnable:
    """``run(inputs) -> outputs`` for anything holding a Relax executable: a fresh build and a loaded artifact
    differ only in where their specs, module and device come from (``_runtime``) and in what they check about
    the bound sizes (``_check_sizes``). Subclasses hold ``_vm`` (None until the first run) and ``_weights``."""

    input_specs: dict[str, TensorSpec]
    output_specs: dict[str, TensorSpec]
    _vm: relax.VirtualMachine | None
    _weights: WeightCache

    def _runtime(self) -> tuple[tvm.runtime.Module, tvm.runtime.Device, str]:
        """(executable or library, device, how to name this binary in messages)."""
        raise NotImplementedError

    def _check_sizes(self, bound: dict[str, int]) -> None:
        """Refuse symbolic sizes (``T``, ``R``) this binary cannot run; nothing to check by default."""

    @property
    def num_input(self) -> int:
        """How many leading inputs are activations (the rest are weights, ``main_transform_params``'s input)."""
        return leading_activations(self.input_specs)

    @property
    def vm(self) -> relax.VirtualMachine:
        if self._vm is None:
            runtime_threads()
            module, device, name = self._runtime()
            vm = relax.VirtualMachine(module, device)
            if not vm.module.implements_function("main"):  # e.g. a user pass returned an empty module
                raise BuildError(f"{name} has no function 'main' to run: a pass of the build removed it "
                                 "(check the extra passes or --pass-plugin)")
            self._vm = vm
        return self._vm

    def device_args(self, arrays: list[np.ndarray]) -> list:
        """``main``'s arguments (see ``main_args``)."""
        return main_args(self.vm, self._runtime()[1], arrays, self.num_input, self._weights)

    def run(self, inputs: dict) -> dict[str, np.ndarray]:
        """Run on named inputs (numpy with ``ml_dtypes.bfloat16`` for BF16, or torch); returns numpy outputs."""
        arrays, bound = validate_inputs(self.input_specs, inputs, self._runtime()[2])
        if bound:
            self._check_sizes(bound)
        outs = self.vm["main"](*self.device_args(arrays))
        return {name: outs[i].numpy() for i, name in enumerate(self.output_specs)}
