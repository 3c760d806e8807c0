"""What ``bench`` measured, of a case or a module file alike: per size (each T of a case's sweep, a module file's
example inputs) every median and sample, the roofline and TVM's fraction of it, the best peer (``TokensFigures``,
made by ``size_figures``), and the whole race as a table, a JSON document and a plot (``BenchResult``)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import statistics

from ...contract.cases import Case
from ...contract.presets import Shapes
from ...support.atomic_file import write_user_file
from ...support.text_table import text_table
from ..measure.peaks import BF16_TILE, INT8_TILE
from ..measure.profile import Profile
from ..measure.roofline import bytes_moved, flops, gemm_work, roofline_ms, roofline_peak
from .options import STOPWATCH_WARMUP_S, shared_compile_cache
from .tvm_worker import TVM
from .worker import EXAMPLE


@dataclasses.dataclass(frozen=True)
class TokensFigures:
    """The figures of one size (a T, or a module file's ``EXAMPLE`` inputs): every name's median and samples (None and
    ``unavailable[name]`` = why, where it could not run), GFLOP/s and GB/s of the useful work, the roofline time and
    TVM's fraction of it, the best peer and TVM's ratio to it (best peer ms / tvm ms: above 1, TVM is faster).
    ``roofline_beaten_by``: the fastest name that ran faster than the roofline, which is then a wrong probe (its
    bandwidth or peak is below what that contender reached), not a bound: no fraction of it is given."""

    tokens: int | str  # T, or ``EXAMPLE``
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
    """A bench run (see the module docstring); ``per_tokens``: size -> ``TokensFigures``. A module file's run reads
    as ``check``'s result of it does: ``case`` its name, ``preset`` ``NO_PRESET``, ``frontend`` its kind,
    ``shapes`` its example inputs' (name -> shape), one size (``EXAMPLE``) whose roofline is the memory term alone
    (a module declares no GEMMs, so its FLOPs are not counted), and ``module`` its path."""

    case: str
    target: dict
    preset: str
    frontend: str
    schedule: str
    shapes: dict  # the sizes every T shares; a module file's: its example inputs' shapes
    tokens: list[int | str]  # the sweep; a module file's: [EXAMPLE]
    per_tokens: dict[int | str, TokensFigures]
    compile_seconds: dict[str, float | dict[int, float]]  # apart from every timed figure
    threads: int
    warmup_s: float  # untimed seconds of each contender at each size before its first timed batch
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
    peers_held_to: str | None = None  # the build's ISA, which the peers were held to (None: native peers)
    peer_isa: dict[str, dict] = dataclasses.field(default_factory=dict)  # peer -> ``peer_isa.ran_isa``
    profile: Profile | None = None  # --profile: every kernel of main at the first T (tools/measure/profile.py)
    measured_on: str = "here"  # where TVM ran: here, or KEY@HOST:PORT (--rpc-tracker; no peers, no roofline)
    isolation: str = "process"  # TVM and each peer in a worker process of its own
    module: str | None = None  # the module file timed (None: a case)
    # the compiled peers' shared inductor cache (``$MTP_TVM_INDUCTOR_CACHE``: warm compiles), None: cold compiles
    compile_cache: str | None = dataclasses.field(
        default_factory=lambda: None if (c := shared_compile_cache()) is None else str(c))

    def as_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["per_tokens"] = {str(t): dataclasses.asdict(f) for t, f in self.per_tokens.items()}
        d["compile_seconds"] = _str_keys(self.compile_seconds)
        d["profile"] = None if self.profile is None else self.profile.as_dict()
        return {k: d[k] for k in ("isolation", "threads", "warmup_s", "load_average", "workers", "module", "case",
                                  "target", "preset", "frontend", "schedule", "shapes", "tokens", "measured_on", "isa",
                                  "peers_held_to", "peer_isa", "instruction_mix", "peaks", "peak_kind", "peak_gflops",
                                  "bandwidth_gbs", "bandwidth_samples_gbs", "probes", "numpy_blas",
                                  "compile_seconds", "compile_cache", "per_tokens", "profile")}

    def write_json(self, path: str | os.PathLike) -> None:
        write_user_file(path, lambda p: p.write_text(json.dumps(self.as_dict(), indent=1)))

    def isa_of(self, name: str) -> str:
        """The ISA ``name`` ran: a TVM build's target's (``amx`` where its code uses the tiles, as a peer's
        oneDNN kernel says it), a peer's as it measured it ("-": not known)."""
        if name.startswith(TVM):
            tvm_isa = self.isa or {}
            found = "amx" if {BF16_TILE, INT8_TILE} & set(tvm_isa.get("used") or ()) else tvm_isa.get("name")
        else:
            found = self.peer_isa.get(name, {}).get("name")
        return found or "-"

    @property
    def names(self) -> list[str]:
        """Every name timed: tvm, its other builds, then the peers."""
        return list(dict.fromkeys(n for f in self.per_tokens.values() for n in f.median_ms))

    def table(self) -> str:
        figures = list(self.per_tokens.values())
        s, la = self.shapes, self.load_average
        what = (f"module {self.module} ({self.frontend}) target={self.target['kind']} schedule={self.schedule} "
                f"inputs {', '.join(f'{n}{shape}' for n, shape in s.items())}" if self.module else
                f"case={self.case} target={self.target['kind']} preset={self.preset} frontend={self.frontend} "
                f"schedule={self.schedule} D={s['hidden']} V={s['vocab_shard']}")
        head = [f"{what}; TVM and every peer in its own process, {self.threads} thread"
                f"{'s' if self.threads > 1 else ''} each",
                f"load average (1 min) {la['before']:.2f} before the rounds, {la['after']:.2f} after"
                + (f"; WARNING: {la['warning']}" if la["warning"] else "")
                + (f"; warm-up {self.warmup_s:g} s, under a stopwatch's {STOPWATCH_WARMUP_S:g} s"
                   if self.warmup_s < STOPWATCH_WARMUP_S else "")]
        rows = [("median ms", "isa", *(size_label(f.tokens) for f in figures))]
        for name in self.names:
            label = f"tvm:{self.schedule}" if name == TVM else name
            rows.append((label, self.isa_of(name), *("-" if f.median_ms.get(name) is None
                                                     else _ms(f.median_ms[name]) for f in figures)))
        if self.measured_on == "here":
            rows.append((self._roofline, "", *(_ms(f.roofline_ms) for f in figures)))
            rows.append((f"tvm / {self._roofline}", "", *("probe low" if f.roofline_beaten_by else "-"
                                                 if f.roofline_fraction is None else f"{100 * f.roofline_fraction:.0f}%"
                                                 for f in figures)))
        rows.append(("best peer", "", *(f.best_peer or "-" for f in figures)))
        ratio = "best peer / tvm" + (" (UNRELIABLE: load)" if la.get("unreliable") else "")
        rows.append((ratio, "", *("-" if f.tvm_vs_best_peer is None else f"{f.tvm_vs_best_peer:.2f}x"
                                  for f in figures)))
        body = text_table(rows, align_right=frozenset(range(2, len(rows[0]))))
        why_not = {}
        for f in figures:
            for name, why in f.unavailable.items():
                why_not.setdefault((name, why), []).append(str(f.tokens))
        notes = [f"unavailable: {name}" + ("" if self.module else f" (T={','.join(ts)})") + f": {why}"
                 for (name, why), ts in why_not.items()]
        compiles = "; ".join(f"{name} {v:.1f}" if not isinstance(v, dict) else
                             f"{name} " + ", ".join(f"T={t} {sec:.1f}" for t, sec in v.items())
                             for name, v in self.compile_seconds.items())
        cache = ("cold" if self.compile_cache is None else
                 f"torch.compile from the shared inductor cache in {self.compile_cache}, not cold")
        notes.append(f"compile s (apart from the figures; {cache}): {compiles}")
        if self.measured_on == "here":
            peaks = ", ".join(f"{kind} {gflops:.1f}" for kind, gflops in self.peaks.items())
            spread = (f" (median of {len(self.bandwidth_samples_gbs)} rounds, {min(self.bandwidth_samples_gbs):.1f}-"
                      f"{max(self.bandwidth_samples_gbs):.1f})" if self.bandwidth_samples_gbs else "")
            compute = ("no compute peak measured (a prebuilt artifact: " + self.probes + ")"
                       if self.peak_gflops is None else
                       f"useful FLOPs / {self.peak_gflops:.1f} GFLOP/s ({self.peak_kind}; measured peaks: {peaks})")
            notes.append(f"memory floor: {figures[0].bytes / 1e6:.2f} MB (inputs, parameters, outputs once) / "
                         f"{self.bandwidth_gbs:.1f} GB/s{spread}; a module declares no GEMMs, so its FLOPs are not "
                         "counted" if self.module else
                         f"roofline: max(bytes / {self.bandwidth_gbs:.1f} GB/s{spread}, {compute})")
            beaten = {f.tokens: f.roofline_beaten_by for f in figures if f.roofline_beaten_by}
            if beaten:
                where = ", ".join(f"{size_label(t)} ({name} ran faster)" for t, name in beaten.items())
                notes.append(f"roofline WRONG at {where}: the probes understate this machine there, so no fraction "
                             "of it is given")
        else:
            notes.append(f"TVM timed on {self.measured_on}; peers and the roofline are measured only where bench runs")
        if self.isa is not None:
            have = ([f for f in ("fma", "bf16_dot") if self.isa[f]]
                    + ([f"int8_dot={self.isa['int8_dot']}"] if self.isa["int8_dot"] else [])
                    + [f for f in ("bf16_tile", "int8_tile") if self.isa.get(f)])
            notes.append(f"isa {self.isa['name']} ({self.isa['vector_bits']}-bit; {', '.join(have) or 'no FMA'}); "
                         + ("its instructions not counted" if self.isa["used"] is None else
                            f"the code uses {', '.join(self.isa['used']) or 'none of them'}")
                         + (f"; packed weights on {self.isa['weight_pages']}" if self.isa.get("weight_pages") else ""))
        if self.peer_isa:
            notes.append("isa: tvm's the target's; each peer's the widest its code ran (aten's dispatch, oneDNN's and "
                         "MKL's kernels, inductor's instructions, OpenBLAS, numpy: JSON peer_isa); peers "
                         + (f"held to {self.peers_held_to}" if self.peers_held_to else "native"))
        for kernel, counts in self.instruction_mix.items():
            notes.append(f"  {kernel}: " + ", ".join(f"{fam} {n}" for fam, n in counts.items() if n))
        return "\n".join([*head, *body, *notes])

    @property
    def _roofline(self) -> str:
        """The roofline's name in the table and plot: a module file's is its memory floor."""
        return "memory floor" if self.module else "roofline"

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
                          label=self._roofline if j == 0 else None)
        ax.set_xticks(range(len(figures)), [size_label(f.tokens) for f in figures])
        ax.set_yscale("log")
        ax.set_ylabel("median ms per call (lower is better)")
        what = self.case if self.module else f"{self.case} {self.preset} V={self.shapes['vocab_shard']}"
        ax.set_title(f"{what} on {self.target['kind']} (schedule {self.schedule}), {self.threads} threads, one "
                     "process each", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        write_user_file(path, lambda p: fig.savefig(p, format="png", dpi=120))
        plt.close(fig)


def _ms(ms: float) -> str:
    """A median in the table: to the microsecond, to a tenth of one below a millisecond (a small model's)."""
    return f"{ms:.3f}" if ms >= 1 else f"{ms:.4f}"


def size_label(size: int | str) -> str:
    """A size as the table and plot head it: ``T=8``, or a module file's ``example`` inputs."""
    return size if size == EXAMPLE else f"T={size}"


def tokens_figures(case: Case, s: Shapes, names: list[str], samples: dict[str, list[float]],
                   unavailable: dict[str, str], peaks: dict[str, float] | None, bandwidth: float | None,
                   used: set[str]) -> TokensFigures:
    """A case's figures at one T: its useful FLOPs and bytes (``tools/measure/roofline.py``), its GEMMs' peak."""
    peak = None if peaks is None else roofline_peak(gemm_work(case, s, used), peaks)[0]
    return size_figures(s.tokens, s.as_dict(), names, samples, unavailable, flops(case, s, s.tokens),
                        bytes_moved(case, s), peak, bandwidth)


def size_figures(size: int | str, shapes: dict, names: list[str], samples: dict[str, list[float]],
                 unavailable: dict[str, str], useful: float, moved: float, peak: float | None,
                 bandwidth: float | None) -> TokensFigures:
    """One size's figures against the roofline of ``useful`` FLOPs at ``peak`` and ``moved`` bytes at ``bandwidth``;
    ``names``: TVM's builds and the peers, in the order the table shows them."""
    median = {n: statistics.median(samples[n]) for n in names if n in samples}
    tvm_ms = median.get(TVM)
    roof = None if bandwidth is None else roofline_ms(useful, moved, peak, bandwidth)
    peers = {n: ms for n, ms in median.items() if not n.startswith(TVM)}
    best = min(peers, key=peers.get) if peers else None
    fastest = min(median, key=median.get) if median else None
    beaten = fastest if roof is not None and fastest is not None and median[fastest] < roof else None
    return TokensFigures(
        tokens=size, shapes=shapes, median_ms={n: median.get(n) for n in names},
        samples_ms=samples, unavailable=unavailable,
        gflops={n: useful / ms / 1e6 for n, ms in median.items()},
        gbs={n: moved / ms / 1e6 for n, ms in median.items()},
        flops=useful, bytes=moved, roofline_ms=roof,
        roofline_fraction=None if roof is None or tvm_ms is None or beaten else roof / tvm_ms,
        best_peer=best, best_peer_ms=peers.get(best),
        tvm_vs_best_peer=None if best is None or tvm_ms is None else peers[best] / tvm_ms, roofline_beaten_by=beaten)
