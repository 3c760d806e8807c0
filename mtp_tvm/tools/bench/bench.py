"""``bench``: time a case's TVM build (a module file's: ``user_model.py``) against what a user would run instead,
TVM and each peer in a process of its own but side by side, at every T of a sweep, against this machine's roofline
(``tools/measure/roofline.py``), and say why: the ISA the build targets, the FMA / dot-product instructions in each
kernel's assembly, and the peak of the instruction the GEMMs run on.

What is timed (TVM and every peer compute the whole case, its stage chain, from the same seeded inputs):

- ``tvm``: the build's ``main`` (``tools/bench/tvm_worker.py``), one binary for every T (its token dim is symbolic),
  weights packed once, outside the timing; ``tvm:<schedule>`` for each of ``compare_schedules`` and
  ``tvm:frontend=<name>`` for each of ``compare_frontends`` (the same case written another way, e.g. imported
  from ``torch.export``), timed in the same rounds;
- the peers (``tools/bench/peer_worker.py``): torch eager BF16 and FP32, numpy FP32, the torch golden, and
  ``torch.compile`` (inductor, ``freezing``, static shapes: one compile per T) in its default mode and in
  ``max-autotune``.

How (``tools/bench/worker.py``):

- **Isolated.** TVM and each peer run in a worker process of their own (the TVM builds share one), so TVM's,
  torch's and OpenBLAS's thread pools never share a process, and every worker gets the same thread count
  (``threads``: ``TVM_NUM_THREADS``, ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``torch.set_num_threads``).
  The inputs are made once, here (``Case.make_inputs`` per T; the first T's weights serve every T), and reach
  the workers as ``.npz`` files; the TVM worker reads them as numpy and runs no torch op (but the API path's
  ``--api``: torch tensors on the binary's device, as a user passes them).
- **Ready before timed.** Every worker is started, then set up one after the other (so one's compile is not
  another's load): built or compiled, warmed up, its batch sized. Compile times (the TVM build, once;
  ``torch.compile``, per T, from an empty inductor cache: a cold compile) are reported apart, never inside a
  per-call figure.
- **Checked before timed.** Every output at each T is compared with the golden (``PEER_CHECK``,
  BF16-level tolerance): one that does not match is not timed, and is listed unavailable with why, as is one
  that cannot run here (a compile that raises, a torch without CUDA for a GPU build, numpy for a GPU build) or
  whose worker dies.
- **Side by side.** Round r asks each worker in turn, at each T, to time a batch of calls (about 50 ms) and
  answer ms per call (the first at each T after ``BenchOptions.warmup`` of untimed calls, every one after an untimed
  batch, as a stopwatch times a warm loop), so drift in clock or load hits TVM and every peer alike; before the
  next batch the previous worker must have gone quiet (after a batch OpenBLAS's threads burn ~0.1 s of CPU, TVM's
  pool ~0.05 s). Medians over rounds.
- **Load.** The 1-minute load average (``os.getloadavg``) just before the rounds, after each and after them all
  (``support.load_average``); a change by more than ``LOAD_CHANGE`` and by more than half is flagged in the
  table and the JSON (the bench's own timed worker counts in it too: up to ``threads``), and a load above the
  cores before or during the rounds marks every ratio unreliable (``load_average["unreliable"]``; the table's
  ratio rows say so).

Per T: every median ms (TVM's, each peer's); the roofline time ``max(bytes / bandwidth, FLOPs / peak)``, bytes being
what the case must move (every input read once, every output written once), FLOPs the useful ``2*T*K*N`` of its
GEMMs (``Stage.gemms``, T the real tokens, not the padded 16), the bandwidth the median of one read-stream probe
per round (reading as many bytes as the case moves at its largest T: ``ProbePlan.for_target``), timed just before
TVM's batches (a shared machine's bandwidth drifts by tens of percent within a
minute: a probe once, before the rounds, made fractions above 100 %), the peak that of the instruction each GEMM runs on
(``gemm_kind``: its operands' dot product, ``vdpbf16ps`` or ``vpdpwssd``/``vpmaddwd``, where the build's assembly
has it, else the FP32 FMA), combined over the GEMMs by their FLOPs (``roofline_peak``); TVM's fraction of it
(roofline ms / tvm ms); the best peer (the fastest peer that ran) and ``tvm_vs_best_peer`` (its ms
over TVM's: above 1, TVM is faster).

The JSON (``result.BenchResult.as_dict``): ``isolation`` ("process"), ``threads``, ``load_average`` (``before``,
``after``, ``warning``), ``workers`` (pid each), the case, target, preset, frontend, schedule and sizes;
``isa`` (the target's ISA, its features and those the code uses), ``instruction_mix`` (per kernel, static counts
of ``fma``, ``vdpbf16ps``, ``vpmaddwd``, ``vpdpwssd`` in its assembly), ``peaks`` (GFLOP/s per instruction kind
measured here), ``peak_kind`` and ``peak_gflops`` (the GEMMs' peak), ``bandwidth_gbs`` (the median of
``bandwidth_samples_gbs``, one a round); ``compile_seconds``
(name -> seconds, or T -> seconds for ``torch.compile``); and ``per_tokens`` (T -> ``median_ms``,
``samples_ms``, ``unavailable``, ``gflops``, ``gbs``, ``roofline_ms``, ``roofline_fraction`` (None where
``roofline_beaten_by`` names a contender that ran faster than the roofline), ``best_peer``,
``best_peer_ms``, ``tvm_vs_best_peer``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from ...artifact.manifest import is_module_artifact, manifest_spec, read_manifest
from ...compiler.arrays import to_numpy
from ...compiler.options import CASES, BuildSpec, DebugOptions, ModuleSpec
from ...contract.cases import TOKENS, Case, get_case
from ...contract.presets import Shapes
from ...passes.target import cpu_isa, is_gpu, require_runs_here, target_json, usable_cores
from ...support.errors import UsageError
from ...support.timing import phase
from ...verify.subject import ModuleSubject, Subject, subject_of
from ..measure.peaks import FMA, Probes
from ..measure.profile import Profile, ProfileOptions, profile_options
from ..measure.roofline import bytes_moved, gemm_work, roofline_peak
from .options import CASE, MODULE_FILE, BenchOptions
from .peer_isa import held_to, peer_env
from .peer_worker import PEERS, PeerJob, peer_unavailable
from .race import Race, compile_cache
from .result import BenchResult, tokens_figures
from .tvm_worker import API, TVM, TvmJob
from .user_model import race_user_model
from .worker import InputFiles

BENCH_CASES = ("logits", "projection", "norm", "tail")  # every stage of each has peers (``STAGE_PEERS``)
_OPTION_FIELDS = {f.name for f in dataclasses.fields(BenchOptions)}
_SPEC_FIELDS = {f.name for f in dataclasses.fields(BuildSpec)}


# ---- the race ---------------------------------------------------------------------------------------------

def _portable_debug(debug):
    """``DebugOptions`` as they travel to the TVM worker: user passes only as a plugin file's path."""
    if debug.api_only_passes:
        raise UsageError("bench builds in a worker process: give extra passes as a pass plugin file "
                         "(--extra-passes FILE, or DebugOptions(extra_passes=load_pass_plugin(FILE)))")
    plugin = None if debug.extra_passes is None else str(debug.extra_passes.path)
    return dataclasses.replace(debug, extra_passes=None), plugin


def _of_module_file(spec, options: BenchOptions, keywords: dict) -> bool:
    """Whether ``bench`` races a module file: its path, a ``ModuleSpec``, ``module=``, or a module file's artifact
    (its manifest says so)."""
    return (isinstance(spec, (str, os.PathLike, ModuleSpec, ModuleSubject)) or "module" in keywords
            or (options.artifact is not None and is_module_artifact(options.artifact)))


def require_known_schedules(spec: BuildSpec, names: tuple[str, ...], what: str = "compare_schedules") -> None:
    """An unknown name in ``names`` (``compare_schedules``) is a typo, refused before anything is built; ``what``
    names the option as the caller was given it (the CLI: ``--compare-schedules``)."""
    if not names:
        return
    from ...schedule.files import schedule_names  # the compiler's schedules: a prebuilt artifact's bench (TVM's
    # runtime alone) never loads them

    known = schedule_names(spec.resolved_target)
    unknown = [s for s in names if s not in known]
    if unknown:
        where = spec.target if isinstance(spec.target, str) else spec.resolved_target.kind.name
        raise UsageError(f"{what}: unknown schedule {unknown[0]!r} for target {where}; choose from {', '.join(known)}")


def _tvm_target(spec: BuildSpec, options: BenchOptions) -> tuple[dict, bool]:
    """(the target as JSON, whether it is a GPU) of the TVM build, refused unless it runs here (under RPC
    too: its weights are packed here). A prebuilt artifact's comes from its manifest: no compiler needed."""
    if options.artifact is not None:
        return spec.target, spec.target["kind"] == "cuda"
    tgt = spec.resolved_target
    require_runs_here(tgt)
    return target_json(tgt), is_gpu(tgt)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What one bench runs, every name and size checked before a worker starts."""

    spec: BuildSpec  # its tokens: the sweep's first T (the profile's)
    debug: object  # DebugOptions as they travel to the TVM worker (``_portable_debug``)
    plugin: str | None
    options: BenchOptions
    case: Case
    shapes: dict[int, Shapes]  # T -> sizes, for every T of the sweep
    target: dict
    gpu: bool
    threads: int
    profiling: ProfileOptions | None
    peer_isa: str | None  # the ISA the peers are held to (``peer_isa.PEER_ISA_ENV``; None: native)

    @property
    def sweep(self) -> tuple[int, ...]:
        return tuple(self.shapes)

    @property
    def others(self) -> tuple[tuple[str, BuildSpec], ...]:
        """The other TVM builds timed beside ``spec``: its name -> its spec."""
        o, spec = self.options, self.spec
        schedules = (s for s in dict.fromkeys(o.compare_schedules) if s != spec.schedule)
        frontends = (f for f in dict.fromkeys(o.compare_frontends) if f != spec.frontend)
        return (*((f"tvm:{s}", dataclasses.replace(spec, schedule=s)) for s in schedules),
                *((f"tvm:frontend={f}", dataclasses.replace(spec, frontend=f)) for f in frontends))

    @property
    def read_bytes(self) -> float:
        """The case's working set at its largest T: what the bandwidth probe reads."""
        return max(bytes_moved(self.case, s) for s in self.shapes.values())

    @property
    def remote(self) -> str | None:
        return None if self.options.rpc is None else f"{self.options.rpc[1]}@{self.options.rpc[0]}"


def _plan(spec: BuildSpec | None, options: BenchOptions, debug: DebugOptions | None, keywords: dict) -> _Plan:
    if options.artifact is not None:
        given = [k for k in keywords if k in _SPEC_FIELDS]
        if spec is not None or given:
            raise UsageError(f"bench: an artifact's manifest says what it is; drop {given[0] if given else 'spec'}")
        if debug is not None and debug != DebugOptions():
            raise UsageError("bench: an artifact is built already; debugging options (how TVM builds) cannot apply")
        spec = manifest_spec(read_manifest(options.artifact))
    subject, debug = subject_of(spec or BuildSpec(case="logits"), debug, keywords, "bench", CASES)
    spec = subject.spec
    if spec.case not in BENCH_CASES:
        raise UsageError(f"bench case must be one of {', '.join(BENCH_CASES)}, got {spec.case!r}")
    sweep = options.tokens or (spec.shapes().tokens,)
    case = get_case(spec.case)
    shapes = {t: spec.shapes(t) for t in sweep}
    for s in shapes.values():
        case.check_shapes(s)
    profiling = profile_options(options.profile)
    if profiling is not None and options.rpc is not None:
        raise UsageError("--profile times kernels here; it cannot go with --rpc-tracker")
    portable, plugin = _portable_debug(debug)
    target, gpu = _tvm_target(spec, options)
    require_known_schedules(spec, options.compare_schedules)
    spec = dataclasses.replace(spec, tokens=sweep[0],
                               target=spec.target if isinstance(spec.target, (str, dict)) else target)
    isa = None if gpu or options.artifact is not None else cpu_isa(spec.resolved_target).name
    return _Plan(spec, portable, plugin, options, case, shapes, target, gpu, options.threads or usable_cores(),
                 profiling, held_to(isa))


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """The seeded inputs of every T (one weight set for all), as the workers read them, and the golden output."""

    files: InputFiles
    golden: dict[int, object]


def _write_inputs(plan: _Plan, folder: Path, given: dict | None = None) -> _Inputs:
    case, sweep = plan.case, plan.sweep
    inputs = {t: {**case.make_inputs(s, plan.options.seed), **(given or {})} for t, s in plan.shapes.items()}
    specs = case.input_specs(plan.shapes[sweep[0]])
    activations = tuple(n for n, sp in specs.items() if TOKENS in sp.shape)
    weights = {n: v for n, v in inputs[sweep[0]].items() if n not in activations}  # one weight set for every T
    inputs = {t: {**{n: inputs[t][n] for n in activations}, **weights} for t in sweep}
    final = case.chain[-1].outputs[0].name
    golden = {t: case.golden(inputs[t], plan.shapes[t])[final] for t in sweep}
    files = InputFiles.write(folder, {n: sp.dtype for n, sp in specs.items()}, activations,
                             {t: {n: to_numpy(v) for n, v in inputs[t].items()} for t in sweep})
    return _Inputs(files, golden)


def _start_workers(plan: _Plan, race: Race, files: InputFiles) -> None:
    """The TVM worker, and one per peer that can run here (the others are unavailable, with why)."""
    o = plan.options
    race.start(TVM, TvmJob(plan.spec, o.number, plan.debug, plan.plugin, plan.others, plan.sweep, files, o.rpc,
                           profiles=plan.profiling is not None, artifact=o.artifact, api=o.api,
                           read_bytes=plan.read_bytes))
    for p in o.peers:
        why = f"runs here; TVM runs on {plan.remote}" if plan.remote else peer_unavailable(p, plan.gpu)
        if why:
            for t in plan.sweep:
                race.unavailable[t][p] = why
        else:
            race.start(p, PeerJob(p, plan.case.name, plan.shapes, files, "cuda" if plan.gpu else "cpu",
                                  plan.threads, o.number),
                       {**(compile_cache(race.folder, p) if PEERS[p].compiles else {}), **peer_env(plan.peer_isa)})


@dataclasses.dataclass
class _Timed:
    """What the race measured: the workers' answers and samples, the load, the bandwidth samples, the probes
    (None under RPC) and the profile."""

    race: Race
    load: dict
    bandwidths: list[float]
    probes: Probes | None
    profiled: Profile | None


def _time(plan: _Plan, inputs: _Inputs, running: contextlib.ExitStack, folder: Path, log) -> _Timed:
    race = Race(folder, plan.threads, plan.sweep, running, log)
    _start_workers(plan, race, inputs.files)
    load, bandwidths = race.run(inputs.golden, plan.peer_isa, plan.options.rounds, plan.options.warmup,
                                bandwidth=plan.remote is None)
    if plan.remote is not None:
        return _Timed(race, load, bandwidths, None, None)
    with phase("run"):
        probes = race.workers[TVM].call("probes")
        probes = dataclasses.replace(probes, bandwidth_gbs=statistics.median(bandwidths),
                                     how=f"{probes.how}; bandwidth: the median of one sample a round")
        profiled = None if plan.profiling is None else race.workers[TVM].call("profile", plan.profiling, probes)
    return _Timed(race, load, bandwidths, probes, profiled)


def _result(plan: _Plan, timed: _Timed) -> BenchResult:
    """The figures per T against the roofline, and everything that says how they were measured."""
    race, probes, o = timed.race, timed.probes, plan.options
    details = race.ready[TVM].details
    used = set(details["kinds_used"])
    peaks = None if probes is None or probes.peak_gflops is None else probes.peaks or {FMA: probes.peak_gflops}
    bandwidth = None if probes is None else probes.bandwidth_gbs
    names = [TVM, *([API] if o.api else []), *(name for name, _ in plan.others), *o.peers]
    per_tokens = {t: tokens_figures(plan.case, s, names, race.samples[t], race.unavailable[t], peaks, bandwidth, used)
                  for t, s in plan.shapes.items()}
    first = plan.shapes[plan.sweep[0]]
    peak, peak_kind = (None, None) if peaks is None else roofline_peak(gemm_work(plan.case, first, used), peaks)
    return BenchResult(
        case=plan.case.name, target=plan.target, preset=first.preset.name, frontend=details["frontend"],
        schedule=plan.spec.schedule,
        shapes={k: v for k, v in first.as_dict().items() if k not in ("batch", "seq", "tokens", "tokens_padded")},
        tokens=list(plan.sweep), per_tokens=per_tokens,
        compile_seconds={n: v for r in race.ready.values() for n, v in r.compile_seconds.items()},
        threads=plan.threads, warmup_s=o.warmup, load_average=timed.load,
        workers=race.pids, peak_gflops=peak, peak_kind=peak_kind, peaks=peaks or {},
        bandwidth_gbs=bandwidth, bandwidth_samples_gbs=timed.bandwidths,
        probes="not measured: TVM ran on a remote device" if probes is None else probes.how,
        numpy_blas=race.ready["numpy_fp32"].details["numpy_blas"] if "numpy_fp32" in race.ready else [],
        isa=details["isa"], instruction_mix=details["instruction_mix"], profile=timed.profiled,
        peers_held_to=plan.peer_isa,
        peer_isa={n: r.details["isa"] for n, r in race.ready.items() if n != TVM and "isa" in r.details},
        measured_on=plan.remote or "here")


def bench(spec: Subject | BuildSpec | ModuleSpec | str | os.PathLike | None = None,
          options: BenchOptions | None = None, *, debug: DebugOptions | None = None,
          log: Callable[[str], None] | None = None, weights: dict | None = None,
          **keywords) -> BenchResult:
    """Build ``spec`` (default: the ``logits`` case) and race it against its peers as ``options`` say; see the
    module docstring. Keywords are the fields of ``BuildSpec``, ``DebugOptions`` and ``BenchOptions`` (``tokens``
    is the sweep: an int or a sequence) and override ``spec``/``options``/``debug`` (how TVM's builds are made: a
    pass disabled or added, dumps; the peers are torch's). ``log`` hears the progress (the
    compiles may take minutes).
    ``weights``: some or all of the case's weight inputs by name (``load_weights``) in place of the seeded ones,
    for every peer.

    A module file (its path, a ``ModuleSpec``, ``module=`` or ``artifact=`` a module file's artifact) races its
    own torch model on its example inputs instead (``tools/bench/user_model.py``: keywords ``target``,
    ``schedule``, and of ``BenchOptions`` those a module file takes), into the same ``BenchResult``.

    ``compare_schedules`` / ``compare_frontends``: one that cannot be built here is listed as unavailable, with
    why. ``profile``: also
    time every kernel of ``main`` (``tools/measure/profile.py``) into ``result.profile`` (and ``profile.json`` into the
    run folder when dumping). ``rpc``: the weights are packed here, so the target must run here too; the peers
    and the roofline probes run only here, so they are not measured then.
    """
    if options is not None and not isinstance(options, BenchOptions):
        raise UsageError(f"bench() takes BenchOptions, got {type(options).__name__}")
    options = dataclasses.replace(options or BenchOptions(),
                                  **{k: keywords.pop(k) for k in list(keywords) if k in _OPTION_FIELDS})
    if _of_module_file(spec, options, keywords):
        if weights is not None:
            raise UsageError("bench(): weights apply to a case (a module file runs on its example inputs); drop them")
        return race_user_model(spec, options.for_kind(MODULE_FILE), debug=debug, log=log, **keywords)
    options = options.for_kind(CASE)
    if weights is not None and options.artifact is not None:
        raise UsageError("weights replace the weights of a build; bench an artifact on its seeded weights, or drop "
                         "artifact")
    plan = _plan(spec, options, debug, keywords)  # plan -> inputs -> time -> result
    with tempfile.TemporaryDirectory(prefix="mtp-bench-") as tmp, contextlib.ExitStack() as running:
        inputs = _write_inputs(plan, Path(tmp), weights)
        timed = _time(plan, inputs, running, Path(tmp), log or (lambda _message: None))
    return _result(plan, timed)
