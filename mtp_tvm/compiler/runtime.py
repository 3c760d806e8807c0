"""Running a built module, shared by fresh builds (``CompiledCase``) and loaded artifacts (``Artifact``): inputs
validated against the specs, weights validated and packed by ``main_transform_params`` once per set of weight
objects (``compiler.weights``), outputs back as numpy (or, ``outputs="torch"``/``"tvm"``, left on the device).
``bind`` keeps one packed set for a loop of ``run(activations)`` that costs the kernel and a small constant.
Inputs already on the binary's device (torch CUDA tensors, TVM tensors) are shared through DLPack, not copied
(``tensors.input_placement``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings

import tvm
from tvm.runtime.vm import VirtualMachine

from ..compiler.huge_pages import on_huge_pages
from ..compiler.options import check_graph_rows
from ..compiler.tensors import (
    Outputs,
    as_argument,
    check_names,
    output_as,
    require_mapping,
    shared_with_device,
    to_device,
    validate_inputs,
)
from ..compiler.weights import PackedWeights, WeightCache, is_tracked
from ..contract.cases import Case, TensorDecl, leading_activations
from ..contract.presets import Shapes
from ..passes.target import usable_cores
from ..support.env import env_int
from ..support.errors import BuildError, UsageError

TRANSFORM_PARAMS = "main_transform_params"  # made by LiftTransformParams from main's weight transforms
THREADS_ENV = "TVM_NUM_THREADS"


def threads_wanted() -> int:
    """The TVM runtime's worker threads: every core this process may use (``os.sched_getaffinity``) unless
    ``TVM_NUM_THREADS`` says otherwise, from 1 to those cores (more threads only wait on each other, and a
    thousand of them hung the process at exit). Put back into the environment, where TVM's pool reads it when it
    starts and MetaSchedule's local workers inherit it."""
    cores = usable_cores()
    threads = env_int(THREADS_ENV, 1, cores, cores, " (1 to the cores this process may use)")
    os.environ[THREADS_ENV] = str(threads)
    return threads


def runtime_threads() -> int:
    """``threads_wanted()``, set before the first module runs. TVM's own default halves the reported concurrency,
    which is one thread on a 2-vCPU VM while torch and numpy use both. A pool already started with another count
    is reported, not hidden."""
    wanted = threads_wanted()
    actual = int(tvm.get_global_func("runtime.NumThreads")())
    if actual != wanted:
        warnings.warn(f"the TVM thread pool already runs {actual} threads; {THREADS_ENV}={wanted} applies to "
                      "new processes only", RuntimeWarning, stacklevel=2)
    return actual


@dataclasses.dataclass(frozen=True)
class CallPlan:
    """What every call needs, worked out once per runnable (its specs are made anew on each access)."""

    activation_specs: dict[str, TensorDecl]
    weight_specs: dict[str, TensorDecl]
    output_names: tuple[str, ...]
    device: tvm.runtime.Device
    owner: str  # how messages name the binary


class Runnable:
    """``run(inputs) -> outputs`` for anything holding a Relax executable: a fresh build and a loaded artifact
    differ only in where their specs, module and device come from (``_runtime``) and in what they check about
    the bound sizes (``_check_sizes``). Subclasses hold ``_vm`` (None until the first run) and ``_weights``."""

    input_specs: dict[str, TensorDecl]
    output_specs: dict[str, TensorDecl]
    _vm: VirtualMachine | None
    _weights: WeightCache

    def _runtime(self) -> tuple[tvm.runtime.Module, tvm.runtime.Device, str]:
        """(executable or library, device, how to name this binary in messages)."""
        raise NotImplementedError

    def _check_sizes(self, bound: dict[str, int]) -> None:
        """Refuse symbolic sizes (``T``, ``R``) this binary cannot run; nothing to check by default."""

    @property
    def cuda_graph(self) -> bool:
        """Whether ``main`` replays CUDA graphs (``BuildSpec.cuda_graph``): sizes up to ``CUDA_GRAPH_ROWS``."""
        return False

    @property
    def huge_page_weights(self) -> bool:
        """Whether the packed weights are copied onto huge pages (``compiler.huge_pages``), as the build decided."""
        return False

    def sized(self, tokens: int | None = None) -> tuple[Case, Shapes]:
        """This binary's case and its sizes at ``tokens`` (default: the build's), refused (``UsageError``) where
        the binary cannot run them."""
        raise NotImplementedError

    def make_inputs(self, tokens: int | None = None, seed: int = 0) -> dict:
        """The seeded inputs ``check`` draws for this binary at ``tokens`` (default: the build's T): torch
        tensors in spec order, bitwise the same for one seed, ready for ``run`` (``mtp-tvm inputs`` writes them)."""
        case, shapes = self.sized(tokens)
        return case.make_inputs(shapes, seed)

    @property
    def num_input(self) -> int:
        """How many leading inputs are activations (the rest are weights, ``main_transform_params``'s input)."""
        return leading_activations(self.input_specs)

    @property
    def vm(self) -> VirtualMachine:
        if self._vm is None:
            runtime_threads()
            module, device, name = self._runtime()
            vm = VirtualMachine(module, device)
            if not vm.module.implements_function("main"):  # e.g. a user pass returned an empty module
                raise BuildError(f"{name} has no function 'main' to run: a pass of the build removed it "
                                 "(check the extra passes: extra_passes, --extra-passes)")
            self._vm = vm
        return self._vm

    @functools.cached_property
    def _plan(self) -> CallPlan:
        _, device, owner = self._runtime()
        specs, n = self.input_specs, self.num_input
        return CallPlan(dict(list(specs.items())[:n]), dict(list(specs.items())[n:]), tuple(self.output_specs),
                        device, owner)

    @property
    def activation_specs(self) -> dict[str, TensorDecl]:
        """The leading inputs, which every call passes (``BoundCase.run``'s)."""
        return dict(self._plan.activation_specs)

    @property
    def weight_specs(self) -> dict[str, TensorDecl]:
        """The inputs after the activations, packed once (``bind``'s)."""
        return dict(self._plan.weight_specs)

    def _pack(self, weights: dict) -> PackedWeights:
        """``weights`` (name -> tensor) as ``main`` takes them: the last packed set while the same objects come
        back unchanged, else validated and transformed by ``main_transform_params`` (moved to the device when
        the build packs none), on huge pages where the build says so (``huge_page_weights``)."""
        vm, plan = self.vm, self._plan

        def transform(arrays: list) -> list:
            on_device = [to_device(w, plan.device) for w in arrays]
            if not vm.module.implements_function(TRANSFORM_PARAMS):
                return on_device
            packed = list(vm[TRANSFORM_PARAMS](on_device))
            return [on_huge_pages(t) for t in packed] if self.huge_page_weights else packed

        return self._weights.get(
            weights, lambda w: validate_inputs(plan.weight_specs, w, plan.owner, "weights", plan.device)[0],
            transform)

    def _activation_args(self, activations: dict) -> list:
        """The activations validated (dtype, shape, sizes this binary runs, finite) and on the device."""
        plan = self._plan
        arrays, bound = validate_inputs(plan.activation_specs, activations, plan.owner, "activations", plan.device)
        if bound:
            self._check_sizes(bound)
            if self.cuda_graph:
                check_graph_rows(bound, plan.owner)
        return [shared_with_device(activations[name], a, plan.device)
                for name, a in zip(plan.activation_specs, arrays)]

    @property
    def returns_tuple(self) -> bool:
        """Whether ``main`` returns a tuple of outputs (every case's does) or one tensor (a module file's may)."""
        return True

    def _graph_weights(self, weights: list) -> None:
        """A CUDA graph replays the device pointers it captured, the weights' among them: other weights than
        those of the last call (a rebind, another set passed to ``run``) get a fresh VM, whose graphs are
        captured anew, never a replay reading the old (maybe freed) weights."""
        held = getattr(self, "_graph_held", None)
        if held is not None and (len(held) != len(weights) or any(a is not b for a, b in zip(held, weights))):
            module, device, _ = self._runtime()
            self._vm = VirtualMachine(module, device)
        self._graph_held = list(weights)

    def _call_main(self, args: list, outputs: str = Outputs.NUMPY) -> dict:
        form = Outputs.parse(outputs, "outputs")
        if self.cuda_graph:
            self._graph_weights(args[self.num_input:])
        outs = self.vm["main"](*args)
        if isinstance(outs, tvm.runtime.Tensor) == self.returns_tuple:  # a module artifact's manifest says which
            raise UsageError(f"{self._plan.owner}: main returned {'one tensor' if self.returns_tuple else 'a tuple'}"
                             f", but its description says {'a tuple' if self.returns_tuple else 'one tensor'}")
        outs = outs if self.returns_tuple else [outs]
        return {name: output_as(outs[i], form) for i, name in enumerate(self._plan.output_names)}

    def device_args(self, arrays: list) -> list:
        """``main``'s arguments for inputs in spec order (the activations not validated: ``bench`` and
        ``profile`` pass the case's own), the weights packed as ``run`` packs them."""
        n, plan = self.num_input, self._plan
        packed = self._pack(dict(zip(plan.weight_specs, arrays[n:])))
        return [as_argument(name, a, plan.device) for name, a in zip(plan.activation_specs, arrays[:n])] \
            + packed.tensors

    def run(self, inputs: dict, outputs: str = Outputs.NUMPY) -> dict:
        """Run on named inputs (numpy with ``ml_dtypes.bfloat16`` for BF16, torch, or TVM tensors); returns the
        outputs by name, as numpy arrays by default (``outputs``: ``"torch"`` or ``"tvm"`` leaves them on the
        binary's device, no copy: ``tensors.Outputs``). An input already on the binary's device (a torch CUDA
        tensor for a CUDA build) is used in place, checked for dtype and shape but not scanned for NaN/Inf;
        one on another device is refused. The weights are validated and packed on the first call and again only
        when they are other objects or changed in place (``compiler.weights``): a numpy weight is read-only from
        then on. For a loop, ``bind`` the weights once and pass only the activations."""
        plan = self._plan
        check_names({**plan.activation_specs, **plan.weight_specs}, inputs, plan.owner)
        packed = self._pack({name: inputs[name] for name in plan.weight_specs})
        return self._call_main(self._activation_args({name: inputs[name] for name in plan.activation_specs})
                               + packed.tensors, outputs)

    def bind(self, weights: dict) -> BoundCase:
        """Validate and pack ``weights`` (name -> tensor: every input after the activations, ``weight_specs``)
        once, for ``BoundCase.run(activations)``."""
        return BoundCase(self, weights)


class BoundCase:
    """A runnable with its weights bound: validated (names, dtypes, shapes, finite) and packed once, so that
    ``run(activations)`` validates only the activations and calls ``main``. A bound weight must not change: a
    numpy one is read-only, and a torch one changed in place (its version counter moved) is refused with a
    one-line error until ``rebind``, never served stale."""

    def __init__(self, runnable: Runnable, weights: dict):
        self.runnable = runnable
        self.rebind(weights)

    def rebind(self, weights: dict) -> None:
        """Bind ``weights`` anew (after an in-place change, or other weights): packed again unless they are the
        objects last packed, unchanged. A torch inference tensor is refused: its changes cannot be seen."""
        require_mapping(weights, "weights")
        untracked = [name for name, w in weights.items() if not is_tracked(w)]
        if untracked:
            raise UsageError(f"weight {untracked[0]!r} is a torch inference tensor (made under "
                             "torch.inference_mode()), whose in-place changes cannot be seen: bind one made outside "
                             "inference_mode, or pass it to run() with the activations")
        self._packed = self.runnable._pack(weights)

    def device_args(self, activations: dict) -> list:
        """``main``'s arguments: the activations validated and on the device, then the bound packed weights
        (time ``main`` on them with ``vm.time_evaluator``)."""
        changed = self._packed.change()
        if changed is not None:
            name, how = changed
            raise UsageError(f"weight {name!r} {how} since bind; call rebind")
        return self.runnable._activation_args(activations) + self._packed.tensors

    def run(self, activations: dict, outputs: str = Outputs.NUMPY) -> dict:
        """Run on the activations (named like ``run``'s, the leading inputs: ``activation_specs``); returns the
        outputs as ``Runnable.run`` does (numpy by default; ``outputs="torch"``/``"tvm"``: on the device). Bound
        on the device (torch CUDA weights, or host weights copied there once), the weights stay there."""
        return self.runnable._call_main(self.device_args(activations), outputs)
