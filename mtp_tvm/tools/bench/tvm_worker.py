"""``bench``'s TVM builds in their worker process (``tools/bench/worker.py``): the build (one binary for every
T: its token dim is symbolic) and every ``--compare-schedules`` / ``--compare-frontends`` build, each ``main``
timed by the library's ``time_evaluator`` with the weights packed once (``main_transform_params`` runs at setup,
outside the timing), here or on a TVM RPC server (``tools/remote.py``). The same worker measures the roofline
probes (the bandwidth once a round, beside TVM and the peers) and, with ``--profile``, every kernel of ``main``. It
reads its inputs as numpy arrays and runs no torch op.

It also says why the figures are what they are: the FMA / dot-product instructions in each kernel's assembly
(``instruction_mix``) and the ISA they come from (``isa_record``).
"""

from __future__ import annotations

import dataclasses
import time

from ...compiler.huge_pages import weight_pages, weights_on_huge_pages
from ...compiler.options import BuildSpec, DebugOptions
from ...compiler.runtime import Runnable
from ...compiler.tensors import to_host
from ...contract.cases import get_case
from ...passes.target import cpu_isa, device_for, is_gpu
from ...support.errors import MtpError
from ...verify.comparators import as_float32, flat_outputs
from ..measure.peaks import CopyProbe, ProbePlan, Probes, StreamProbe, measure_probes
from ..measure.profile import Profile, ProfileOptions, write_to_run_folder
from ..measure.profile import profile as profile_main
from ..measure.roofline import instruction_mix, kinds_used
from .worker import EXAMPLE, InputFiles, Ready, calls_per_batch

TVM = "tvm"
API = "tvm:api"  # the public path: ``bound.run`` on activations already on the device, outputs left there


def isa_record(target, used: set[str] | None) -> dict | None:
    """The target ISA as the schedules read it (``passes.target.CpuIsa``) and the features the code uses (None:
    not counted, a module file's artifact)."""
    if is_gpu(target):
        return None
    isa = cpu_isa(target)
    return {"name": isa.name, "vector_bits": isa.vector_bits, "fma": isa.fma, "bf16_dot": isa.bf16_dot,
            "int8_dot": isa.int8_dot, "bf16_tile": isa.bf16_tile, "int8_tile": isa.int8_tile,
            "used": None if used is None else sorted(used),
            "weight_pages": weight_pages(weights_on_huge_pages(target))}


@dataclasses.dataclass(frozen=True)
class TvmJob:
    """The TVM builds of one bench: ``spec`` built (its ``tokens``: the profile's T) with ``debug`` (user
    passes only as a plugin file, ``plugin``: a loaded module does not travel between processes), and once per
    other build of ``others`` (its name -> its spec: another schedule or frontend); timed at every T of
    ``tokens`` on ``inputs``, ``number`` calls per
    batch (None: about ``bench_worker.SAMPLE_MS``), here or on ``rpc = (HOST:PORT, key)``. ``profiles``: a
    ``profile`` call will follow, so a dumping build's run folder stays open for its ``profile.json``.
    ``artifact``: time this prebuilt artifact folder instead of building ``spec`` (``spec`` is its manifest's):
    nothing is compiled, so TVM's runtime alone will do, and the bandwidth is a device copy (``CopyProbe``). A
    module file's artifact has no ``spec``: it is timed at its stored example inputs (``worker.EXAMPLE``), every
    output returned. ``api``: also time ``API``, the public ``bound.run`` beside the kernel. ``read_bytes``: the
    bytes the case moves at its largest T, which the bandwidth probe reads (``ProbePlan.for_target``; None: its
    default size)."""

    spec: BuildSpec | None
    number: int | None
    debug: DebugOptions | None = None
    plugin: str | None = None
    others: tuple[tuple[str, BuildSpec], ...] = ()
    tokens: tuple[int, ...] = ()
    inputs: InputFiles | None = None
    rpc: tuple[str, str] | None = None
    profiles: bool = False
    artifact: str | None = None
    api: bool = False
    read_bytes: float | None = None

    def open(self) -> TvmWorker:
        return TvmWorker(self)


class TvmWorker:
    """The builds and their timers (build name -> T -> ``time_ms(number)``), made by ``setup``."""

    def __init__(self, job: TvmJob):
        self.job = job
        self.builds: dict[str, Runnable] = {}
        self.timers: dict[str, dict[int, tuple]] = {}  # build name -> T -> (ms per call of a batch, calls)
        self.arrays: dict[int, list] = {}
        self.stream: StreamProbe | CopyProbe | None = None  # the bandwidth probe (made at setup when TVM runs here)
        self.device = None

    def setup(self) -> Ready:
        job, ready = self.job, Ready()
        if job.spec is None:
            return self._example_inputs(ready)
        if job.artifact is not None:
            self._load_artifact(ready)
        else:
            self._build(ready)
        main = self.builds[TVM]
        weights = job.inputs.weights()  # the same objects for every T and build: packed once per build
        for tokens in job.tokens:
            named = {**job.inputs.activations_of(tokens), **weights}
            self.arrays[tokens] = [named[n] for n in main.input_specs]
        last = list(main.output_specs).index(get_case(job.spec.case).chain[-1].outputs[0].name)
        for name, build in self.builds.items():
            ready.outputs[name], self.timers[name] = {}, {}
            args = {t: build.device_args(a) for t, a in self.arrays.items()}
            remote = self._remote(build, args) if job.rpc is not None else None
            for tokens, a in args.items():
                ready.outputs[name][tokens] = as_float32(build.vm["main"](*a)[last].numpy())
                time_ms = remote.timer(tokens) if remote is not None else self._local(build, a)
                self.timers[name][tokens] = (time_ms, calls_per_batch(time_ms, job.number))
        if job.api:
            self._api_path(ready, main, weights, last)
        return ready

    def _api_path(self, ready: Ready, build: Runnable, weights: dict, last: int) -> None:
        """``API`` at every T: the weights bound once (copied to the device once), the activations torch tensors
        already on the binary's device (as a user holding them there passes them: shared through DLPack), the
        outputs left there (``outputs="torch"``); a batch ends with the device synchronised, as
        ``time_evaluator``'s does, so its figure is the kernel's plus what the API adds per call."""
        import torch

        from ...compiler.tensors import to_device

        bound, device = build.bind(weights), self.device
        ready.outputs[API], self.timers[API] = {}, {}
        for tokens in self.job.tokens:
            acts = {n: torch.from_dlpack(to_device(a, device))
                    for n, a in self.job.inputs.activations_of(tokens).items()}
            out = list(bound.run(acts, outputs="torch").values())[last]
            ready.outputs[API][tokens] = as_float32(out.cpu().float().numpy())

            def time_ms(number: int, acts=acts) -> float:
                t0 = time.perf_counter()
                for _ in range(number):
                    bound.run(acts, outputs="torch")
                device.sync()
                return (time.perf_counter() - t0) * 1e3 / number

            self.timers[API][tokens] = (time_ms, calls_per_batch(time_ms, self.job.number))

    def _build(self, ready: Ready) -> None:
        """The build of ``spec`` and of each of ``others``; the details only a build can tell."""
        from ...compiler.driver import compile, compile_open
        from ...passes.plugins import load_pass_plugin

        job = self.job
        debug = job.debug if job.plugin is None else dataclasses.replace(job.debug,
                                                                         extra_passes=load_pass_plugin(job.plugin))
        # a user error or a failed build: raised in the bench process
        compiled = compile_open(job.spec, debug) if job.profiles else compile(job.spec, debug)
        self.builds[TVM] = compiled
        ready.compile_seconds[TVM] = compiled.build_seconds
        for name, other in job.others:
            try:
                self.builds[name] = build = compile(other)
                ready.compile_seconds[name] = build.build_seconds
            except MtpError as e:  # e.g. no tuning database yet, or dlight on a CPU target: this one is missing
                ready.unavailable[name] = dict.fromkeys(job.tokens, str(e))
        if job.rpc is None:
            self.device = device_for(compiled.target)
            self.stream = StreamProbe(compiled.target, ProbePlan.for_target(compiled.target,
                                                                            read_bytes=job.read_bytes))
        mix = instruction_mix(compiled)
        used = kinds_used(mix)
        ready.details.update(instruction_mix=mix, kinds_used=sorted(used), isa=isa_record(compiled.target, used),
                             frontend=compiled.frontend, dump_dir=str(compiled.dump_dir) if compiled.dump_dir else None)

    def _load_artifact(self, ready: Ready) -> None:
        """The prebuilt artifact, loaded with TVM's runtime alone: neither its instructions nor the compute
        peaks are measured (both need the compiler), so its roofline is the memory term alone."""
        from ...artifact.load import load

        artifact = load(self.job.artifact)
        self.builds[TVM], self.device = artifact, artifact.device
        self.stream = CopyProbe(artifact.device, read_bytes=self.job.read_bytes)
        ready.details.update(instruction_mix={}, kinds_used=[], isa=None, frontend=artifact.manifest["frontend"],
                             dump_dir=None)

    def _example_inputs(self, ready: Ready) -> Ready:
        """A module file's artifact on its stored example inputs: every output, ``main`` timed there."""
        self._load_artifact(ready)
        artifact = self.builds[TVM]
        args = artifact.device_args([artifact.make_inputs()[n] for n in artifact.input_specs])
        outs = artifact.vm["main"](*args)
        ready.outputs[TVM] = {EXAMPLE: flat_outputs([to_host(o) for o in (outs if artifact.returns_tuple
                                                                           else [outs])])}
        time_ms = self._local(artifact, args)
        self.timers[TVM] = {EXAMPLE: (time_ms, calls_per_batch(time_ms, self.job.number))}
        return ready

    def _local(self, build: Runnable, args: list):
        vm, dev = build.vm, self.device
        return lambda number: vm.time_evaluator("main", dev, number=number, repeat=1)(*args).mean * 1e3

    def _remote(self, build: Runnable, args: dict[int, list]):
        from ..remote import RemoteMain

        return RemoteMain(build.executable, build.target, args, *self.job.rpc)

    def time_ms(self, name: str, tokens: int) -> float:
        """Milliseconds per call of build ``name``'s ``main`` over one batch at ``tokens``."""
        time_ms, calls = self.timers[name][tokens]
        return time_ms(calls)

    def bandwidth_gbs(self) -> float:
        """One read-bandwidth sample, timed in a round beside TVM and the peers."""
        return self.stream.gbs()

    def probes(self) -> Probes:
        """This machine's peaks and bandwidth, by the TVM probe kernels, in this worker's threads (a prebuilt
        artifact's: the bandwidth alone, by a device copy)."""
        if isinstance(self.stream, CopyProbe):
            return Probes(None, self.stream.gbs(5), f"copy: {self.stream.mib} MiB device to device, read + write "
                                                    "counted; compute peaks not measured (no compiler)")
        return measure_probes(self.builds[TVM].target, stream=self.stream)

    def profile(self, options: ProfileOptions, probes: Probes) -> Profile:
        """Every kernel of ``main`` at the build's T (the first of the sweep), into the run folder when dumping."""
        from ...compiler.compiled import finish_run

        compiled = self.builds[TVM]
        named = dict(zip(compiled.input_specs, self.arrays[compiled.shapes.tokens]))
        profiled = profile_main(compiled, named, options, probes=probes)
        if compiled.dump_dir is not None:
            write_to_run_folder(profiled, compiled.dump_dir)
        finish_run(compiled)  # the run folder is complete now (``TvmJob.profiles``)
        return profiled
