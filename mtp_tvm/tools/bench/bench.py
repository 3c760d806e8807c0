"""``bench``: time a case's TVM build (a module file's: ``module_bench.py``) against what a user would run instead,
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
  answer ms per call, so drift in clock or load hits TVM and every peer alike; before the next batch the previous
  worker must have gone quiet (OpenBLAS's threads spin ~0.1 s after a call). Medians over rounds.
- **Load.** The 1-minute load average (``os.getloadavg``) just before the rounds, after each and after them all
  (``support.load_average``); a change by more than ``LOAD_CHANGE`` and by more than half is flagged in the
  table and the JSON (the bench's own timed worker counts in it too: up to ``threads``), and a load above the
  cores before or during the rounds marks every ratio unreliable (``load_average["unreliable"]``; the table's
  ratio rows say so).

Per T: every median ms (TVM's, each peer's); the roofline time ``max(bytes / bandwidth, FLOPs / peak)``, bytes being
what the case must move (every input read once, every output written once), FLOPs the useful ``2*T*K*N`` of its
GEMMs (``Stage.gemms``, T the real tokens, not the padded 16), the bandwidth the median of one read-stream probe
per round, timed just before TVM's batches (a shared machine's bandwidth drifts by tens of percent within a
minute: a probe once, before the rounds, made fractions above 100 %), the peak that of the instruction each GEMM runs on
(``gemm_kind``: its operands' dot product, ``vdpbf16ps`` or ``vpdpwssd``/``vpmaddwd``, where the build's assembly
has it, else the FP32 FMA), combined over the GEMMs by their FLOPs (``roofline_peak``); TVM's fraction of it
(roofline ms / tvm ms); the best peer (the fastest peer that ran) and ``tvm_vs_best_peer`` (its ms
over TVM's: above 1, TVM is faster).

The JSON (``BenchResult.as_dict``): ``isolation`` ("process"), ``threads``, ``load_average`` (``before``,
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
import itertools
import json
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from ...artifact.manifest import is_module_artifact, manifest_spec, read_manifest
from ...compiler.options import BuildSpec, ModuleSpec, split_options
from ...compiler.tensors import to_numpy
from ...contract.cases import TOKENS, Case, get_case
from ...contract.presets import Shapes
from ...ir.frontend_names import FRONTEND_NAMES
from ...passes.target import is_gpu, require_runs_here, target_json, usable_cores
from ...support.atomic_file import write_user_file
from ...support.errors import UsageError
from ...support.text_table import text_table
from ...support.timing import phase
from ..measure.peaks import FMA, Probes
from ..measure.profile import Profile, ProfileOptions, profile_options
from ..measure.roofline import bytes_moved, flops, gemm_work, roofline_ms, roofline_peak
from .module_bench import ModuleBenchOptions, ModuleBenchResult, bench_module_file
from .peer_worker import PEERS, PeerJob, peer_unavailable
from .race import Race, check_race_counts, cold_cache, require_count
from .tvm_worker import API, TVM, TvmJob
from .worker import InputFiles

BENCH_CASES = ("logits", "projection", "norm", "tail")  # every stage of each has peers (``STAGE_PEERS``)


# ---- options ----------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """How ``bench`` races (what it builds is a ``BuildSpec``): ``tokens`` the T sweep (an int or a sequence;
    empty: the spec's T); ``peers`` those of ``PEERS`` that race TVM (TVM always runs; empty: TVM alone);
    ``rounds`` timing rounds; ``number`` calls per timed batch (None: about 50 ms of each); ``threads`` every
    worker's thread count (None: every usable core); ``seed`` of the inputs; ``compare_schedules`` and
    ``compare_frontends`` more TVM builds (other schedules, other frontends) timed in the same rounds;
    ``profile`` (True or ``ProfileOptions``) every kernel of ``main`` at the first T; ``rpc = (HOST:PORT, key)``
    TVM timed on a server of a TVM RPC tracker (``tools/remote.py``);
    ``artifact`` a prebuilt artifact folder timed instead of a build (its manifest says what it is; TVM's runtime
    alone will do, as on a deployment machine); ``api`` also times the public API path (``tvm:api``, beside the
    kernel: ``bench_tvm.API``)."""

    tokens: tuple[int, ...] = ()
    peers: tuple[str, ...] = tuple(PEERS)
    rounds: int = 7
    number: int | None = None
    threads: int | None = None
    seed: int = 0
    compare_schedules: tuple[str, ...] = ()
    compare_frontends: tuple[str, ...] = ()
    profile: bool | ProfileOptions = False
    rpc: tuple[str, str] | None = None
    artifact: str | None = None
    api: bool = False

    def __post_init__(self):
        if not isinstance(self.api, bool):
            raise UsageError(f"api must be True or False, got {self.api!r}")
        if self.api and self.rpc is not None:
            raise UsageError("api times the Python API here; it cannot go with rpc")
        tokens = (self.tokens,) if isinstance(self.tokens, int) else tuple(self.tokens)
        for t in tokens:
            require_count("tokens", t)
        peers = (self.peers,) if isinstance(self.peers, str) else tuple(self.peers)
        unknown = [p for p in peers if p not in PEERS]
        if unknown:
            raise UsageError(f"unknown peer {unknown[0]!r}; choose from {', '.join(PEERS)} (TVM always runs)")
        check_race_counts(self.rounds, self.number, self.threads)
        if self.artifact is not None:
            clash = [flag for flag, given in (("compare_schedules", self.compare_schedules),
                                              ("compare_frontends", self.compare_frontends),
                                              ("profile", self.profile), ("rpc", self.rpc)) if given]
            if clash:
                raise UsageError(f"artifact: a prebuilt binary is timed as it is; {clash[0]} needs a build")
        object.__setattr__(self, "tokens", tuple(dict.fromkeys(tokens)))
        object.__setattr__(self, "peers", tuple(p for p in PEERS if p in peers))
        object.__setattr__(self, "compare_schedules", tuple(self.compare_schedules))
        object.__setattr__(self, "compare_frontends", tuple(self.compare_frontends))
        unknown = [f for f in self.compare_frontends if f not in FRONTEND_NAMES]
        if unknown:
            raise UsageError(f"compare_frontends: unknown frontend {unknown[0]!r}; choose from "
                             f"{', '.join(FRONTEND_NAMES)}")


_OPTION_FIELDS = {f.name for f in dataclasses.fields(BenchOptions)}
_SPEC_FIELDS = {f.name for f in dataclasses.fields(BuildSpec)}


def parse_tokens(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``: ``bench --tokens``, one T or a comma list."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--tokens takes T or a comma list of T such as 1,2,4,8,16; got {text!r}") from None


def parse_peers(text: str) -> tuple[str, ...]:
    """``"torch_bf16,torch_compile"`` -> a tuple (checked by ``BenchOptions``): ``bench --peers``."""
    return tuple(filter(None, (part.strip() for part in text.split(","))))


# ---- the result -------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TokensFigures:
    """The figures of one T: every name's median and samples (None and ``unavailable[name]`` = why, where
    it could not run), GFLOP/s and GB/s of the useful work, the roofline time and TVM's fraction of it, the
    best peer and TVM's ratio to it (best peer ms / tvm ms: above 1, TVM is faster). ``roofline_beaten_by``: the
    fastest name that ran faster than the roofline, which is then a wrong probe (its bandwidth or peak is below
    what that contender reached), not a bound: no fraction of it is given."""

    tokens: int
    shapes: dict
    median_ms: dict[str, float | None]
    samples_ms: dict[str, list[float]]
    unavailable: dict[str, str]
    gflops: dict[str, float]
    gbs: dict[str, float]
    flops: float
    bytes: float
    roofline_ms: float | None
    roofline_fraction: float | None
    best_peer: str | None
    best_peer_ms: float | None
    tvm_vs_best_peer: float | None
    roofline_beaten_by: str | None = None


def _str_keys(d: dict) -> dict:
    """JSON object keys: T as text."""
    return {str(k): _str_keys(v) if isinstance(v, dict) else v for k, v in d.items()}


@dataclasses.dataclass(frozen=True)
class BenchResult:
    """A bench run (see the module docstring); ``per_tokens``: T -> ``TokensFigures``."""

    case: str
    target: dict
    preset: str
    frontend: str
    schedule: str
    shapes: dict  # the sizes every T shares
    tokens: list[int]
    per_tokens: dict[int, TokensFigures]
    compile_seconds: dict[str, float | dict[int, float]]  # apart from every timed figure
    threads: int
    load_average: dict  # before, after, peak, cores, unreliable, warning: support.load_average.LoadWatch.report
    workers: dict[str, int]  # worker -> its pid
    peak_gflops: float | None
    peak_kind: str | None  # the instruction(s) ``peak_gflops`` is the peak of (the GEMMs' own)
    peaks: dict[str, float]  # measured GFLOP/s per instruction kind
    bandwidth_gbs: float | None  # the median of ``bandwidth_samples_gbs``
    bandwidth_samples_gbs: list[float]  # one read-bandwidth probe a round, beside TVM and the peers
    probes: str
    numpy_blas: list[dict]
    isa: dict | None  # the target ISA, its features and those the code uses (``bench_tvm.isa_record``)
    instruction_mix: dict[str, dict[str, int]]  # kernel -> family counts
    profile: Profile | None = None  # --profile: every kernel of main at the first T (tools/measure/profile.py)
    measured_on: str = "here"  # where TVM ran: here, or KEY@HOST:PORT (--rpc-tracker; no peers, no roofline)
    isolation: str = "process"  # TVM and each peer in a worker process of its own

    def as_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["per_tokens"] = {str(t): dataclasses.asdict(f) for t, f in self.per_tokens.items()}
        d["compile_seconds"] = _str_keys(self.compile_seconds)
        d["profile"] = None if self.profile is None else self.profile.as_dict()
        return {k: d[k] for k in ("isolation", "threads", "load_average", "workers", "case", "target", "preset",
                                  "frontend", "schedule", "shapes", "tokens", "measured_on", "isa",
                                  "instruction_mix", "peaks", "peak_kind", "peak_gflops", "bandwidth_gbs",
                                  "bandwidth_samples_gbs", "probes",
                                  "numpy_blas", "compile_seconds", "per_tokens", "profile")}

    def write_json(self, path: str | os.PathLike) -> None:
        write_user_file(path, lambda p: p.write_text(json.dumps(self.as_dict(), indent=1)))

    @property
    def names(self) -> list[str]:
        """Every name timed: tvm, its other builds, then the peers."""
        return list(dict.fromkeys(n for f in self.per_tokens.values() for n in f.median_ms))

    def table(self) -> str:
        figures = list(self.per_tokens.values())
        s, la = self.shapes, self.load_average
        head = [f"case={self.case} target={self.target['kind']} preset={self.preset} frontend={self.frontend} "
                f"schedule={self.schedule} D={s['hidden']} V={s['vocab_shard']}; TVM and every peer in its own "
                f"process, {self.threads} thread{'s' if self.threads > 1 else ''} each",
                f"load average (1 min) {la['before']:.2f} before the rounds, {la['after']:.2f} after"
                + (f"; WARNING: {la['warning']}" if la["warning"] else "")]
        rows = [("median ms", *(f"T={f.tokens}" for f in figures))]
        for name in self.names:
            label = f"tvm:{self.schedule}" if name == TVM else name
            rows.append((label, *("-" if f.median_ms.get(name) is None else f"{f.median_ms[name]:.3f}"
                                  for f in figures)))
        if self.measured_on == "here":
            rows.append(("roofline", *(f"{f.roofline_ms:.3f}" for f in figures)))
            rows.append(("tvm / roofline", *("probe low" if f.roofline_beaten_by else "-" if f.roofline_fraction is None
                                             else f"{100 * f.roofline_fraction:.0f}%" for f in figures)))
        rows.append(("best peer", *(f.best_peer or "-" for f in figures)))
        ratio = "best peer / tvm" + (" (UNRELIABLE: load)" if la.get("unreliable") else "")
        rows.append((ratio, *("-" if f.tvm_vs_best_peer is None else f"{f.tvm_vs_best_peer:.2f}x"
                              for f in figures)))
        body = text_table(rows, align_right=frozenset(range(1, len(rows[0]))))
        why_not = {}
        for f in figures:
            for name, why in f.unavailable.items():
                why_not.setdefault((name, why), []).append(str(f.tokens))
        notes = [f"unavailable: {name} (T={','.join(ts)}): {why}" for (name, why), ts in why_not.items()]
        compiles = "; ".join(f"{name} {v:.1f}" if not isinstance(v, dict) else
                             f"{name} " + ", ".join(f"T={t} {sec:.1f}" for t, sec in v.items())
                             for name, v in self.compile_seconds.items())
        notes.append(f"compile s (apart from the figures): {compiles}")
        if self.measured_on == "here":
            peaks = ", ".join(f"{kind} {gflops:.1f}" for kind, gflops in self.peaks.items())
            spread = (f" (median of {len(self.bandwidth_samples_gbs)} rounds, {min(self.bandwidth_samples_gbs):.1f}-"
                      f"{max(self.bandwidth_samples_gbs):.1f})" if self.bandwidth_samples_gbs else "")
            compute = ("no compute peak measured (a prebuilt artifact: " + self.probes + ")"
                       if self.peak_gflops is None else
                       f"useful FLOPs / {self.peak_gflops:.1f} GFLOP/s ({self.peak_kind}; measured peaks: {peaks})")
            notes.append(f"roofline: max(bytes / {self.bandwidth_gbs:.1f} GB/s{spread}, {compute})")
            beaten = {f.tokens: f.roofline_beaten_by for f in figures if f.roofline_beaten_by}
            if beaten:
                where = ", ".join(f"T={t} ({name} ran faster)" for t, name in beaten.items())
                notes.append(f"roofline WRONG at {where}: the probes understate this machine there, so no fraction "
                             "of it is given")
        else:
            notes.append(f"TVM timed on {self.measured_on}; peers and the roofline are measured only where bench runs")
        if self.isa is not None:
            have = [f for f in ("fma", "bf16_dot") if self.isa[f]] + ([f"int8_dot={self.isa['int8_dot']}"]
                                                                        if self.isa["int8_dot"] else [])
            notes.append(f"isa {self.isa['name']} ({self.isa['vector_bits']}-bit; {', '.join(have) or 'no FMA'}); "
                         f"the code uses {', '.join(self.isa['used']) or 'none of them'}")
        for kernel, counts in self.instruction_mix.items():
            notes.append(f"  {kernel}: " + ", ".join(f"{fam} {n}" for fam, n in counts.items() if n))
        return "\n".join([*head, *body, *notes])

    def plot(self, path: str | os.PathLike) -> None:
        """Median ms per name (TVM's builds, the peers), grouped by T (log scale: T sweeps span decades)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names, figures = self.names, list(self.per_tokens.values())
        width = 0.8 / max(len(names), 1)
        tab10 = plt.get_cmap("tab10").colors
        others = itertools.cycle(tab10[:2] + tab10[3:])  # every colour but TVM's green
        fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(figures) + 0.3 * len(names)) + 2.5, 4))
        for i, name in enumerate(names):
            xs = [j + (i - (len(names) - 1) / 2) * width for j, f in enumerate(figures)
                  if f.median_ms.get(name) is not None]
            ms = [f.median_ms[name] for f in figures if f.median_ms.get(name) is not None]
            ax.bar(xs, ms, width, label=f"tvm:{self.schedule}" if name == TVM else name,
                   color=tab10[2] if name == TVM else next(others))
        if self.measured_on == "here":
            for j, f in enumerate(figures):
                ax.hlines(f.roofline_ms, j - 0.45, j + 0.45, colors="black", linestyles="dashed",
                          label="roofline" if j == 0 else None)
        ax.set_xticks(range(len(figures)), [f"T={f.tokens}" for f in figures])
        ax.set_yscale("log")
        ax.set_ylabel("median ms per call (lower is better)")
        s = self.shapes
        ax.set_title(f"{self.case} {self.preset} V={s['vocab_shard']} on {self.target['kind']} (schedule "
                     f"{self.schedule}), {self.threads} threads, one process each", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        write_user_file(path, lambda p: fig.savefig(p, format="png", dpi=120))
        plt.close(fig)


# ---- the race ---------------------------------------------------------------------------------------------

def _figures(case: Case, s: Shapes, names: list[str], samples: dict[str, list[float]], unavailable: dict[str, str],
             peaks: dict[str, float] | None, bandwidth: float | None, used: set[str]) -> TokensFigures:
    """One T's figures; ``names``: TVM's builds and the peers, in the order the table shows them."""
    median = {n: statistics.median(samples[n]) for n in names if n in samples}
    useful, moved = flops(case, s, s.tokens), bytes_moved(case, s)
    tvm_ms = median.get(TVM)
    peak = None if peaks is None else roofline_peak(gemm_work(case, s, used), peaks)[0]
    roof = None if bandwidth is None else roofline_ms(useful, moved, peak, bandwidth)
    peers = {n: ms for n, ms in median.items() if not n.startswith(TVM)}
    best = min(peers, key=peers.get) if peers else None
    fastest = min(median, key=median.get) if median else None
    beaten = fastest if roof is not None and fastest is not None and median[fastest] < roof else None
    return TokensFigures(
        tokens=s.tokens, shapes=s.as_dict(), median_ms={n: median.get(n) for n in names},
        samples_ms=samples, unavailable=unavailable,
        gflops={n: useful / ms / 1e6 for n, ms in median.items()},
        gbs={n: moved / ms / 1e6 for n, ms in median.items()},
        flops=useful, bytes=moved, roofline_ms=roof,
        roofline_fraction=None if roof is None or tvm_ms is None or beaten else roof / tvm_ms,
        best_peer=best, best_peer_ms=peers.get(best),
        tvm_vs_best_peer=None if best is None or tvm_ms is None else peers[best] / tvm_ms, roofline_beaten_by=beaten)


def _portable_debug(debug):
    """``DebugOptions`` as they travel to the TVM worker: user passes only as a plugin file's path."""
    if debug.api_only_passes:
        raise UsageError("bench builds in a worker process: give extra passes as a pass plugin file "
                         "(--extra-passes FILE, or DebugOptions(extra_passes=load_pass_plugin(FILE)))")
    plugin = None if debug.extra_passes is None else str(debug.extra_passes.path)
    return dataclasses.replace(debug, extra_passes=None), plugin


def _of_module_file(spec, options, keywords: dict) -> bool:
    """Whether ``bench`` races a module file: its path, a ``ModuleSpec``, ``module=``, ``ModuleBenchOptions``, or a
    module file's artifact (its manifest says so)."""
    artifact = keywords.get("artifact", getattr(options, "artifact", None))
    return (isinstance(spec, (str, os.PathLike, ModuleSpec)) or "module" in keywords
            or isinstance(options, ModuleBenchOptions) or (artifact is not None and is_module_artifact(artifact)))


def _check_compare_schedules(spec: BuildSpec, options: BenchOptions) -> None:
    """An unknown name in ``compare_schedules`` is a typo, refused before anything is built."""
    if not options.compare_schedules:
        return
    from ...schedule.files import schedule_names  # the compiler's schedules: a prebuilt artifact's bench (TVM's
    # runtime alone) never loads them

    known = schedule_names(spec.resolved_target)
    unknown = [s for s in options.compare_schedules if s not in known]
    if unknown:
        where = spec.target if isinstance(spec.target, str) else spec.resolved_target.kind.name
        raise UsageError(f"compare_schedules: unknown schedule {unknown[0]!r} for target {where}; choose from "
                         f"{', '.join(known)}")


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
    def remote(self) -> str | None:
        return None if self.options.rpc is None else f"{self.options.rpc[1]}@{self.options.rpc[0]}"


def _plan(spec: BuildSpec | None, options: BenchOptions, keywords: dict) -> _Plan:
    if options.artifact is not None:
        given = [k for k in keywords if k in _SPEC_FIELDS]
        if spec is not None or given:
            raise UsageError(f"bench: an artifact's manifest says what it is; drop {given[0] if given else 'spec'}")
        spec = manifest_spec(read_manifest(options.artifact))
    spec, debug = split_options(spec or BuildSpec(case="logits"), None, keywords, "bench")
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
    _check_compare_schedules(spec, options)
    spec = dataclasses.replace(spec, tokens=sweep[0],
                               target=spec.target if isinstance(spec.target, (str, dict)) else target)
    return _Plan(spec, portable, plugin, options, case, shapes, target, gpu, options.threads or usable_cores(),
                 profiling)


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
    race.start(TVM, TvmJob(plan.spec, plan.debug, plan.plugin, plan.others, plan.sweep, files, o.number,
                           o.rpc, profiles=plan.profiling is not None, artifact=o.artifact, api=o.api))
    for p in o.peers:
        why = f"runs here; TVM runs on {plan.remote}" if plan.remote else peer_unavailable(p, plan.gpu)
        if why:
            for t in plan.sweep:
                race.unavailable[t][p] = why
        else:
            race.start(p, PeerJob(p, plan.case.name, plan.shapes, files, "cuda" if plan.gpu else "cpu",
                                  plan.threads, o.number), cold_cache(race.folder, p) if PEERS[p].compiles else None)


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
    with phase("build"):  # each worker builds or compiles what it times, one after the other
        race.set_up()
    with phase("run"):
        race.check(inputs.golden)
        load, bandwidths = race.time(plan.options.rounds, bandwidth=plan.remote is None)
        if plan.remote is not None:
            return _Timed(race, load, bandwidths, None, None)
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
    per_tokens = {t: _figures(plan.case, s, names, race.samples[t], race.unavailable[t], peaks, bandwidth, used)
                  for t, s in plan.shapes.items()}
    first = plan.shapes[plan.sweep[0]]
    peak, peak_kind = (None, None) if peaks is None else roofline_peak(gemm_work(plan.case, first, used), peaks)
    return BenchResult(
        case=plan.case.name, target=plan.target, preset=first.preset.name, frontend=details["frontend"],
        schedule=plan.spec.schedule,
        shapes={k: v for k, v in first.as_dict().items() if k not in ("batch", "seq", "tokens", "tokens_padded")},
        tokens=list(plan.sweep), per_tokens=per_tokens,
        compile_seconds={n: v for r in race.ready.values() for n, v in r.compile_seconds.items()},
        threads=plan.threads, load_average=timed.load,
        workers=race.pids, peak_gflops=peak, peak_kind=peak_kind, peaks=peaks or {},
        bandwidth_gbs=bandwidth, bandwidth_samples_gbs=timed.bandwidths,
        probes="not measured: TVM ran on a remote device" if probes is None else probes.how,
        numpy_blas=race.ready["numpy_fp32"].details["numpy_blas"] if "numpy_fp32" in race.ready else [],
        isa=details["isa"], instruction_mix=details["instruction_mix"], profile=timed.profiled,
        measured_on=plan.remote or "here")


def bench(spec: BuildSpec | ModuleSpec | str | os.PathLike | None = None,
          options: BenchOptions | ModuleBenchOptions | None = None, *, log: Callable[[str], None] | None = None,
          weights: dict | None = None, **keywords) -> BenchResult | ModuleBenchResult:
    """Build ``spec`` (default: the ``logits`` case) and race it against its peers as ``options`` say; see the
    module docstring. Keywords are the fields of ``BuildSpec``, ``DebugOptions`` and ``BenchOptions`` (``tokens``
    is the sweep: an int or a sequence) and override ``spec``/``options``. ``log`` hears the progress (the
    compiles may take minutes).
    ``weights``: some or all of the case's weight inputs by name (``load_weights``) in place of the seeded ones,
    for every peer.

    A module file (its path, a ``ModuleSpec``, ``module=``, ``ModuleBenchOptions`` or ``artifact=`` a module
    file's artifact) races its own torch model on its example inputs instead (``tools/bench/module_bench.py``:
    keywords ``target``, ``schedule`` and the fields of ``ModuleBenchOptions``) -> ``ModuleBenchResult``.

    ``compare_schedules`` / ``compare_frontends``: one that cannot be built here is listed as unavailable, with
    why. ``profile``: also
    time every kernel of ``main`` (``tools/measure/profile.py``) into ``result.profile`` (and ``profile.json`` into the
    run folder when dumping). ``rpc``: the weights are packed here, so the target must run here too; the peers
    and the roofline probes run only here, so they are not measured then.
    """
    if _of_module_file(spec, options, keywords):
        if weights is not None:
            raise UsageError("bench(): weights apply to a case (a module file runs on its example inputs); drop them")
        return bench_module_file(spec, options, log=log, **keywords)
    options = dataclasses.replace(options or BenchOptions(),
                                  **{k: keywords.pop(k) for k in list(keywords) if k in _OPTION_FIELDS})
    if weights is not None and options.artifact is not None:
        raise UsageError("weights replace the weights of a build; bench an artifact on its seeded weights, or drop "
                         "artifact")
    plan = _plan(spec, options, keywords)  # plan -> inputs -> time -> result
    with tempfile.TemporaryDirectory(prefix="mtp-bench-") as tmp, contextlib.ExitStack() as running:
        inputs = _write_inputs(plan, Path(tmp), weights)
        timed = _time(plan, inputs, running, Path(tmp), log or (lambda _message: None))
    return _result(plan, timed)
