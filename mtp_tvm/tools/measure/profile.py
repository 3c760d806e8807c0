"""``--profile``: the time of every kernel ``main`` calls, its share of the measured ``main``, and what it
achieves against this machine's roofline (``tools/measure/roofline.py``).

TVM 0.27's Relax VM has no profiler (``VirtualMachine(profile=True)`` is gone), so the profile is made in two
steps:

1. **Which kernels, with which arguments.** ``main`` runs once with a VM instrument (``set_instrument``), which
   sees every call instruction: the calls to the build's kernels (the PrimFuncs of the module entering lowering,
   ``CompiledCase.optimized_module``) are kept with their very arguments; VM builtins (allocation, shape
   matching) and the shape functions the VM lowering adds are not kernels and stay in "VM/other".
2. **How long each takes.** Each kernel call is timed on its recorded arguments by the library's own
   ``time_evaluator`` (C++ loop, device synchronised), and ``main`` by the VM's; rounds interleave ``main`` and
   every kernel (round r times each once), and medians over rounds are reported. A sample lasts about
   ``sample_ms`` (calls per sample sized from a first call).

Shares are of the measured ``main``; the remainder ``main - sum(kernels)`` is the row "VM/other" (the VM's
instructions between kernels: allocation from the pool, shapes, tuples; also any cache effect of running a
kernel alone). So the rows add up to ``main``; ``coverage`` (the kernels' sum over ``main``) says how much of
``main`` the kernels explain.

Work of a kernel: bytes are its tensor arguments' sizes (each read or written once: the least traffic); FLOPs are
those of the GEMMs its stage declares (``Stage.gemms``, ``2*T*K*N`` on the T useful rows, as ``bench`` counts
them). A GEMM belongs to the first kernel, in call order from the previous GEMM's on, that reads a tensor of
``K*N`` elements (the weight, packed or not) next to tensors of another size (a copy or transpose of the
weight is not the GEMM); a kernel given no GEMM is judged on bandwidth alone. Roofline fraction: the roofline
time of its work over its measured time, by ``bench``'s model (``roofline.py``: ``max(bytes / bandwidth, FLOPs /
peak)``, the peak that of the instruction each of its GEMMs runs on in this build's code).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import tvm

from ...compiler.arrays import to_numpy
from ...contract.cases import TOKENS
from ...instrument.report import PROFILE_FILE
from ...instrument.run_folder import update_index
from ...passes.target import device_for, target_json
from ...support import atomic_file
from ...support.errors import UsageError
from ...support.text_table import text_table
from ...verify.results import sizes_text
from .peaks import FMA, Probes, measure_probes
from .roofline import gemm_dtype, gemm_kind, instruction_mix, kinds_used, roofline_ms, roofline_peak

if TYPE_CHECKING:  # a prebuilt artifact's bench imports this module with TVM's runtime alone
    from ...compiler.driver import CompiledCase

OTHER = "VM/other"


@dataclasses.dataclass(frozen=True)
class ProfileOptions:
    """How a profile is timed: ``rounds`` interleaved rounds (medians over them), samples of about
    ``sample_ms`` each."""

    rounds: int = 11
    sample_ms: float = 10.0

    def __post_init__(self):
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise UsageError(f"profile rounds must be an integer >= 1, got {self.rounds!r}")
        if not isinstance(self.sample_ms, (int, float)) or not self.sample_ms > 0:
            raise UsageError(f"profile sample_ms must be a positive number, got {self.sample_ms!r}")


@dataclasses.dataclass(frozen=True)
class KernelTime:
    """One kernel call of ``main``: ``name`` is the kernel (``kernel#2`` for its second call in ``main``)."""

    name: str
    kernel: str
    ms: float                       # median over rounds
    share: float                    # of the measured main time
    bytes: float                    # its tensor arguments, each read or written once
    gbs: float
    flops: float | None = None      # the GEMMs its stage declares that it runs; None: none
    gflops: float | None = None
    gemms: tuple[tuple[int, int, int], ...] = ()  # (M, K, N), M the useful rows
    roofline_fraction: float | None = None  # roofline ms / ms (``roofline.roofline_ms``)
    samples_ms: tuple[float, ...] = ()
    peak_kind: str | None = None  # the instruction(s) its GEMMs' peak is that of; None: no GEMM (bandwidth alone)


@dataclasses.dataclass(frozen=True)
class Profile:
    """Every kernel of ``main`` with its time and share, the measured ``main``, and the rest ("VM/other")."""

    case: str
    target: dict
    preset: str
    schedule: str
    shapes: dict
    kernels: tuple[KernelTime, ...]
    main_ms: float                  # measured: the VM's time_evaluator of main, median over rounds
    main_samples_ms: tuple[float, ...]
    rounds: int
    peak_gflops: float | None = None  # the FP32 FMA's
    bandwidth_gbs: float | None = None
    probes: str | None = None
    peaks: dict[str, float] = dataclasses.field(default_factory=dict)  # GFLOP/s per instruction kind

    @property
    def kernels_ms(self) -> float:
        return sum(k.ms for k in self.kernels)

    @property
    def other_ms(self) -> float:
        """``main`` minus its kernels: the VM's own instructions (negative: kernels ran slower alone)."""
        return self.main_ms - self.kernels_ms

    @property
    def coverage(self) -> float:
        """The kernels' summed time over the measured ``main`` (1.0: the kernels are all of main)."""
        return self.kernels_ms / self.main_ms

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(kernels_ms=self.kernels_ms, other_ms=self.other_ms, other_share=self.other_ms / self.main_ms,
                 coverage=self.coverage)
        return d

    def write_json(self, path: str | os.PathLike) -> None:
        atomic_file.write_user_file(path, lambda p: p.write_text(json.dumps(self.as_dict(), indent=1)),
                                    what="profile ")

    def table(self) -> str:
        def opt(v, fmt):
            return "-" if v is None else format(v, fmt)

        rows = [("kernel", "ms", "share", "GB/s", "GFLOP/s", "roofline")]
        for k in self.kernels:
            rows.append((k.name, f"{k.ms:.4f}", f"{100 * k.share:.1f}%", f"{k.gbs:.1f}", opt(k.gflops, ".1f"),
                         opt(None if k.roofline_fraction is None else 100 * k.roofline_fraction, ".0f") +
                         ("%" if k.roofline_fraction is not None else "")))
        rows.append((OTHER, f"{self.other_ms:.4f}", f"{100 * self.other_ms / self.main_ms:.1f}%", "", "", ""))
        rows.append(("main (measured)", f"{self.main_ms:.4f}", "100.0%", "", "", ""))
        lines = text_table(rows, {1, 2, 3, 4, 5})
        lines.insert(-1, lines[1])  # a rule above the total
        s = self.shapes
        head = (f"profile of main: case={self.case} target={self.target['kind']} preset={self.preset} "
                f"schedule={self.schedule} {sizes_text(s)}; medians of {self.rounds} "
                "interleaved rounds")
        tail = (f"kernels {self.kernels_ms:.4f} ms = {100 * self.coverage:.1f}% of the measured main "
                f"{self.main_ms:.4f} ms (ratio {self.coverage:.3f}); {OTHER} is the rest")
        if self.peak_gflops is not None:
            peaks = ", ".join(f"{kind} {gflops:.1f}" for kind, gflops in self.peaks.items())
            tail += (f"\nroofline: max(bytes / {self.bandwidth_gbs:.1f} GB/s, FLOPs / the peak of the instruction "
                     f"each GEMM runs on) (measured peaks, GFLOP/s: {peaks}); FLOPs are the stage's GEMMs on the "
                     "useful rows, bytes the kernel's arguments; data in cache can pass the bandwidth")
        return "\n".join([head, *lines, tail])


# ---- what main calls --------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Call:
    kernel: str
    args: tuple

    @property
    def tensors(self) -> list:
        return [a for a in self.args if isinstance(a, tvm.runtime.Tensor)]

    @property
    def bytes(self) -> float:
        return float(sum(math.prod(t.shape) * tvm.DataType(str(t.dtype)).bits // 8 for t in self.tensors))


def kernel_names(compiled: CompiledCase) -> set[str] | None:
    """The build's kernels: the PrimFuncs of the module entering lowering (None when it was not kept)."""
    mod = compiled.optimized_module
    if mod is None:
        return None
    return {gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}


def watch_calls(vm, args: list, kernels: set[str] | None, on_call: Callable[[str, bool, tuple], None]) -> None:
    """Run ``main`` once with an instrument that calls ``on_call(kernel, before, args)`` just before and just
    after each call of one of the build's ``kernels`` (VM builtins are not kernels)."""

    def instrument(_func, symbol, before, _ret, *call_args):
        if not symbol.startswith("vm.") and (kernels is None or symbol in kernels):
            on_call(symbol, bool(before), tuple(call_args))
        return 0  # VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    try:
        vm["main"](*args)
    finally:
        vm.set_instrument(None)


def record_calls(vm, args: list, kernels: set[str] | None) -> list[_Call]:
    """Run ``main`` once and return its kernel calls, in order, with their arguments."""
    calls: list[_Call] = []
    watch_calls(vm, args, kernels, lambda kernel, before, a: calls.append(_Call(kernel, a)) if before else None)
    return calls


def assign_gemms(compiled: CompiledCase, calls: list[_Call]) -> dict[int, list[tuple[str, tuple[int, int, int]]]]:
    """Call index -> the GEMMs it runs, each as (its operand dtype, (M, K, N)), M the useful rows (see the module
    docstring). A user's module file declares no GEMMs: its kernels are timed, without GFLOP/s or roofline."""
    if not hasattr(compiled, "case"):
        return {}
    s = compiled.shapes
    found: dict[int, list] = {}
    used: dict[int, int] = {}  # call -> how many of its weight-sized tensors a GEMM took
    start = 0
    for stage in compiled.case.chain:
        for m, k, n in stage.gemms(s):
            rows = s.tokens if m == TOKENS else m
            for i in range(start, len(calls)):
                sizes = [math.prod(t.shape) for t in calls[i].tensors]
                weights = sizes.count(k * n)
                if weights > used.get(i, 0) and len(sizes) > weights:
                    used[i] = used.get(i, 0) + 1
                    found.setdefault(i, []).append((gemm_dtype(stage, s), (rows, k, n)))
                    start = i
                    break
    return found


# ---- timing -----------------------------------------------------------------------------------------------

def _module_with(mods, symbol: str):
    """The module of the import tree ``mods`` that defines ``symbol`` (the VM's library, or one it imports)."""
    for mod in mods:
        if mod.implements_function(symbol, query_imports=False):
            return mod
        found = _module_with(mod.imports, symbol)
        if found is not None:
            return found
    return None


_PROBES: dict[tuple[str, int | None], Probes] = {}


def probes_for(target, read_bytes: float | None = None) -> Probes:
    """``measure_probes(target)``, its read probe reading ``read_bytes`` (a working set, to the MiB), once per
    target, size and process."""
    key = (json.dumps(target_json(target), sort_keys=True), None if read_bytes is None else int(read_bytes) >> 20)
    if key not in _PROBES:
        _PROBES[key] = measure_probes(target, read_bytes=read_bytes)
    return _PROBES[key]


def profile(compiled: CompiledCase, inputs: dict | None = None, options: ProfileOptions = ProfileOptions(), *,
            seed: int = 0, probes: Probes | None = None) -> Profile:
    """Profile ``main`` of ``compiled`` on ``inputs`` (default: the case's seeded inputs of ``seed``): every kernel
    call's median time, its share of the measured ``main``, GB/s, GFLOP/s and roofline fraction (``probes``: the
    measured peak and bandwidth, measured here when not given)."""
    tgt = compiled.target
    dev = device_for(tgt)  # a GPU target without a GPU: its one-line error
    if inputs is None:
        inputs = compiled.make_inputs(seed=seed)
    args = compiled.device_args([to_numpy(inputs[n]) for n in compiled.input_specs])
    vm = compiled.vm
    calls = record_calls(vm, args, kernel_names(compiled))
    timers = []
    for call in calls:
        mod = _module_with(vm.module.imports, call.kernel)  # the VM's library and below
        if mod is None:
            raise UsageError(f"--profile: kernel {call.kernel} of main is not in the built library")
        timers.append(mod)

    def evaluator(mod, name, call_args, first):
        number = max(1, min(10_000, math.ceil(options.sample_ms / 1e3 / max(first, 1e-7))))
        f = mod.time_evaluator(name, dev, number=number, repeat=1)
        return lambda: float(f(*call_args).mean) * 1e3

    once = lambda mod, name, a: float(mod.time_evaluator(name, dev, number=1, repeat=1)(*a).mean)  # noqa: E731
    once(vm.module, "main", args)  # warm up
    runs = [evaluator(vm.module, "main", args, once(vm.module, "main", args))]
    runs += [evaluator(mod, call.kernel, call.args, once(mod, call.kernel, call.args))
             for mod, call in zip(timers, calls)]
    samples: list[list[float]] = [[] for _ in runs]
    for _ in range(options.rounds):
        for i, run in enumerate(runs):
            samples[i].append(run())
    medians = [statistics.median(v) for v in samples]
    main_ms = medians[0]
    # the read probe reads the largest call's working set: the bandwidth depends on it where the cache is large
    probes = probes if probes is not None else probes_for(tgt, max((c.bytes for c in calls), default=None))
    gemms = assign_gemms(compiled, calls)
    used = kinds_used(instruction_mix(compiled)) if gemms else set()  # what the GEMMs run on in this code
    peaks = probes.peaks or {FMA: probes.peak_gflops}
    counts: dict[str, int] = {}
    kernels = []
    for i, (call, ms) in enumerate(zip(calls, medians[1:])):
        counts[call.kernel] = counts.get(call.kernel, 0) + 1
        n = counts[call.kernel]
        moved, seconds = call.bytes, ms / 1e3
        work: dict[str, float] = {}  # useful FLOPs per instruction kind its GEMMs run on
        for dtype, (m, k, n_) in gemms.get(i, ()):
            kind = gemm_kind(dtype, used)
            work[kind] = work.get(kind, 0.0) + 2.0 * m * k * n_
        flops = sum(work.values()) or None
        gflops = flops / seconds / 1e9 if flops else None
        peak, peak_kind = roofline_peak(work, peaks) if work else (None, None)
        fraction = roofline_ms(flops or 0.0, moved, peak, probes.bandwidth_gbs) / ms
        kernels.append(KernelTime(call.kernel if n == 1 else f"{call.kernel}#{n}", call.kernel, ms, ms / main_ms,
                                  moved, moved / seconds / 1e9, flops, gflops, tuple(g for _, g in gemms.get(i, ())),
                                  fraction, tuple(samples[i + 1]), peak_kind))
    name, preset, shapes = ((compiled.case.name, compiled.shapes.preset.name, compiled.shapes.as_dict())
                            if hasattr(compiled, "case") else (compiled.name, "-", compiled.module_file.example_shapes))
    return Profile(name, target_json(tgt), preset, compiled.schedule, shapes, tuple(kernels),
                   main_ms, tuple(samples[0]), options.rounds, probes.peak_gflops, probes.bandwidth_gbs, probes.how,
                   dict(peaks))


def write_to_run_folder(p: Profile, run: Path) -> Path:
    """``profile.json`` into a run folder (atomically), and its index and ``index.html`` re-rendered with it."""
    path = Path(run) / PROFILE_FILE
    try:
        atomic_file.write_text(path, json.dumps(p.as_dict(), indent=1))
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}") from None
    update_index(Path(run), profile=PROFILE_FILE)
    return path


def profile_options(profile: bool | ProfileOptions | None) -> ProfileOptions | None:
    """A ``profile=`` keyword as options: False/None is off, True the defaults."""
    if profile is None or profile is False:
        return None
    if profile is True:
        return ProfileOptions()
    if not isinstance(profile, ProfileOptions):
        raise UsageError(f"profile must be True, False or a ProfileOptions, got {profile!r}")
    return profile
