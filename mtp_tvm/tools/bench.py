"""``bench``: time a case's TVM build against the libraries a user would call instead, interleaved in one run,
next to this machine's measured peaks and memory bandwidth (``tools/roofline.py``), and say why: the ISA the
build targets, the FMA / dot-product instructions in each kernel's assembly, and the peak of the instruction
the GEMMs actually run on.

Contenders (each computes the whole case, stage after stage, from the same seeded inputs; a stage's peers are
its ``Stage.peers``):

- ``tvm``: the compiled module's ``main`` (``time_evaluator``), weights already packed (``main_transform_params``
  runs once, at load, outside the timing);
- ``torch_bf16``: the matching torch ops in BF16 (``F.linear`` for the GEMMs, ``F.rms_norm``);
- ``torch_fp32`` / ``numpy_fp32``: the same in FP32 (weights converted once, outside the timing);
- ``torch_golden``: the golden implementation (``mtp_tvm.golden``), what the checks compare against.

Rounds interleave the contenders (round r times every contender once), so drift in clock speed or load hits
all of them alike; medians over rounds are reported.

FLOP/s of a contender counts the useful ``2*T*K*N`` of its GEMMs (``Stage.gemms``, T the real tokens, not the
padded 16), and so does the roofline: ``min(peak, FLOPs / bytes x bandwidth)``, bytes being what the case must
read and write (weights once, activations, outputs). The peak is that of the instruction each GEMM runs on
(``gemm_kind``: its operands' dot product, ``vdpbf16ps`` or ``vpdpwssd``/``vpmaddwd``, where the build's
assembly has it, else the FP32 FMA), combined over the case's GEMMs by their FLOPs (``roofline_peak``), so a
kernel on dot products is not judged against an FMA peak it can pass.

The JSON adds to the figures: ``frontend``; ``isa`` (the target's ISA name, vector bits, its features and
those the code uses); ``instruction_mix`` (per kernel of the assembly, the count of each instruction family:
``fma``, ``vdpbf16ps``, ``vpmaddwd``, ``vpdpwssd``; static counts in the code, not executed ones); ``peaks``
(GFLOP/s per instruction kind measured here) and ``peak_kind`` (which of them ``peak_gflops`` is).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import time
from typing import Callable

import torch

from ..compiler.driver import CompiledCase, compile
from ..compiler.options import BuildSpec, split_options
from ..compiler.tensors import NUMPY_DTYPES, to_numpy
from ..passes.target import cpu_isa, device_for, is_gpu, resolve_target, target_json
from ..spec.cases import TOKENS, Case, Stage
from ..spec.presets import Shapes
from ..support.atomic_file import write_user_file
from ..support.errors import MtpError, UsageError
from ..support.text_table import text_table
from .code_stats import assembly_kernels
from .profile import Profile, ProfileOptions, profile_options, write_to_run_folder
from .profile import profile as profile_main
from .roofline import BF16_DOT, FMA, INT8_DOT, measure_probes

BENCH_CASES = ("logits", "projection", "norm", "tail")  # every stage of each has ``peers``


# ---- FLOPs and bytes -------------------------------------------------------------------------------------

def flops(case: Case, s: Shapes, rows: int) -> float:
    """``2*M*K*N`` over every GEMM of the case's stages (``Stage.gemms``), token rows counted as ``rows``."""
    return float(sum(2 * (rows if m == TOKENS else m) * k * n for st in case.chain for m, k, n in st.gemms(s)))


def bytes_moved(compiled: CompiledCase) -> float:
    """Every input read once and every output written once: the least traffic any implementation needs."""
    t = compiled.shapes.tokens
    specs = (*compiled.input_specs.values(), *compiled.output_specs.values())
    return float(sum(math.prod(sp.concrete(t)) * NUMPY_DTYPES[sp.dtype].itemsize for sp in specs))


# ---- why: instructions and their peaks --------------------------------------------------------------------

DOT_OF_DTYPE = {"bfloat16": BF16_DOT, "int8": INT8_DOT}  # GEMM operand dtype -> the dot product it can run on
FAMILIES = {FMA: ("fma",), BF16_DOT: ("vdpbf16ps",), INT8_DOT: ("vpmaddwd", "vpdpwssd")}  # code_stats families


def instruction_mix(compiled: CompiledCase) -> dict[str, dict[str, int]]:
    """Kernel -> its FMA and dot-product instruction counts in the build's assembly (``code_stats``), for the
    kernels that have any; empty for a GPU build."""
    if is_gpu(compiled.target):
        return {}
    asm = "\n".join(m.inspect_source("asm") for m in compiled.executable.mod.imports if m.kind == "llvm")
    families = [f for fams in FAMILIES.values() for f in fams]
    return {name: {f: code.families.get(f, 0) for f in families} for name, code in sorted(assembly_kernels(asm).items())
            if any(code.families.get(f) for f in families)}


def kinds_used(mix: dict[str, dict[str, int]]) -> set[str]:
    """The instruction kinds (``fma``, ``bf16_dot``, ``int8_dot``) whose instructions the code contains."""
    return {kind for kind, fams in FAMILIES.items() if any(counts.get(f) for counts in mix.values() for f in fams)}


def gemm_kind(dtype: str, used: set[str]) -> str:
    """The instruction a GEMM of ``dtype`` operands runs on: its dot product where the build's code has it
    (``used``), else the FP32 FMA (an int8 GEMM without one widens and multiplies: the FMA peak bounds it)."""
    dot = DOT_OF_DTYPE.get(dtype)
    return dot if dot in used else FMA


def gemm_dtype(stage: Stage, s: Shapes) -> str:
    """A stage's GEMM operand dtype: that of its largest input that is not token-major (its weight)."""
    weights = [p for p in stage.params if TOKENS not in p.shape(s)]
    return max(weights, key=lambda p: math.prod(d for d in p.shape(s) if isinstance(d, int))).dtype if weights \
        else "float32"


def gemm_work(case: Case, s: Shapes, used: set[str]) -> dict[str, float]:
    """Useful FLOPs (T real rows) per instruction kind the case's GEMMs run on."""
    work: dict[str, float] = {}
    for st in case.chain:
        kind = gemm_kind(gemm_dtype(st, s), used)
        for m, k, n in st.gemms(s):
            work[kind] = work.get(kind, 0.0) + 2.0 * (s.tokens if m == TOKENS else m) * k * n
    return work


def roofline_peak(work: dict[str, float], peaks: dict[str, float]) -> tuple[float, str]:
    """``(GFLOP/s, which)``: the peak the GEMMs' FLOPs can reach, each kind at its measured peak (a kind without
    a probe on this target at the FMA's), combined by FLOPs (the time at each peak adds up). No GEMMs: FMA."""
    used = {kind: peaks.get(kind, peaks[FMA]) for kind in work}
    if not used:
        return peaks[FMA], FMA
    seconds = sum(f / used[kind] for kind, f in work.items())
    label = " + ".join(kind if kind in peaks else f"{kind} (no probe: fma)" for kind in sorted(work))
    return sum(work.values()) / seconds, label


def isa_record(compiled: CompiledCase, used: set[str]) -> dict | None:
    """The target ISA as the schedules read it (``passes.target.CpuIsa``) and the features the code uses."""
    if is_gpu(compiled.target):
        return None
    isa = cpu_isa(compiled.target)
    return {"name": isa.name, "vector_bits": isa.vector_bits, "fma": isa.fma, "bf16_dot": isa.bf16_dot,
            "int8_dot": isa.int8_dot, "used": sorted(used)}


# ---- contenders ------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Peer:
    """A non-TVM contender: ``stage(st, inputs, shapes) -> f(x) -> y`` (weights prepared there, once, outside
    the timing) and ``activation(hidden)``, the case's hidden input as this contender reads it."""

    stage: Callable[[Stage, dict, Shapes], Callable]
    activation: Callable[[torch.Tensor], object]


def _torch_peer(dtype: torch.dtype) -> _Peer:
    return _Peer(lambda st, t, s: st.peers.torch(t, s, dtype), lambda x: x.to(dtype))


def _golden_peer(st: Stage, t: dict, s: Shapes) -> Callable:
    return lambda x: st.golden(x, t, s)[0]


PEERS = {"torch_bf16": _torch_peer(torch.bfloat16), "torch_fp32": _torch_peer(torch.float32),
         "numpy_fp32": _Peer(lambda st, t, s: st.peers.numpy(t, s), lambda x: x.float().numpy()),
         "torch_golden": _Peer(_golden_peer, lambda x: x)}
CONTENDERS = ("tvm", *PEERS)


def peer_runner(case: Case, peer: str, inputs: dict[str, torch.Tensor], s: Shapes) -> Callable[[], object]:
    """The whole case (its stage chain, each stage's ``Stage.peers``) for one peer, as a zero-argument callable."""
    how = PEERS[peer]
    stages = [how.stage(st, inputs, s) for st in case.chain]
    opening = case.chain[0].hidden_input
    x0 = None if opening is None else how.activation(inputs[opening.name])

    def run():
        x = x0
        for f in stages:
            x = f(x)
        return x

    return run


# ---- timing ----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class BenchResult:
    case: str
    target: dict
    preset: str
    schedule: str
    shapes: dict
    median_ms: dict[str, float | None]  # None: the contender could not run here (see ``unavailable``)
    samples_ms: dict[str, list[float]]
    unavailable: dict[str, str]
    gflops: dict[str, float]
    gbs: dict[str, float]
    speedup: dict[str, float]  # peer median / tvm median
    peak_gflops: float
    bandwidth_gbs: float
    roofline_gflops: float
    roofline_fraction: float
    peak_fraction: float
    build_seconds: float
    probes: str
    numpy_blas: list[dict]
    frontend: str = "tir"
    isa: dict | None = None  # the target ISA, its features and those the code uses (``isa_record``)
    instruction_mix: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)  # kernel -> family counts
    peaks: dict[str, float] = dataclasses.field(default_factory=dict)  # measured GFLOP/s per instruction kind
    peak_kind: str = FMA  # the instruction(s) ``peak_gflops`` is the peak of (the GEMMs' own)
    profile: Profile | None = None  # --profile: every kernel of main (tools/profile.py)
    measured_on: str = "here"  # where TVM ran: here, or KEY@HOST:PORT (--rpc-tracker; no peers, no roofline)

    def as_dict(self) -> dict:
        d = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in dataclasses.asdict(self).items()}
        if self.profile is not None:
            d["profile"] = self.profile.as_dict()
        return d

    def write_json(self, path: str | os.PathLike) -> None:
        write_user_file(path, lambda p: p.write_text(json.dumps(self.as_dict(), indent=1)))

    def table(self) -> str:
        rows = [("contender", "median ms", "GFLOP/s", "GB/s", "tvm speed-up")]
        for name, ms in self.median_ms.items():
            if ms is None:
                rows.append((name, "-", "-", "-", self.unavailable[name]))
                continue
            rows.append((name if name != "tvm" else f"tvm:{self.schedule}", f"{ms:.3f}", f"{self.gflops[name]:.1f}",
                         f"{self.gbs[name]:.1f}", "-" if name == "tvm" else f"{self.speedup[name]:.2f}x"))
        lines = text_table(rows)
        s = self.shapes
        head = (f"case={self.case} target={self.target['kind']} preset={self.preset} frontend={self.frontend} "
                f"schedule={self.schedule} T={s['tokens']} (padded {s['tokens_padded']}) D={s['hidden']} "
                f"V={s['vocab_shard']} build={self.build_seconds:.2f}s")
        peaks = ", ".join(f"{kind} {gflops:.1f}" for kind, gflops in self.peaks.items())
        tail = (f"peak {self.peak_gflops:.1f} GFLOP/s ({self.peak_kind}; measured peaks: {peaks}), bandwidth "
                f"{self.bandwidth_gbs:.1f} GB/s; tvm at {100 * self.peak_fraction:.0f}% of peak and "
                f"{100 * self.roofline_fraction:.0f}% of the roofline ({self.roofline_gflops:.1f} GFLOP/s) on the "
                f"{s['tokens']} useful rows") if self.measured_on == "here" else (
                f"TVM timed on {self.measured_on}; peers and the roofline are measured only where bench runs")
        why = []
        if self.isa is not None:
            have = [f for f in ("fma", "bf16_dot") if self.isa[f]] + ([f"int8_dot={self.isa['int8_dot']}"]
                                                                        if self.isa["int8_dot"] else [])
            why.append(f"isa {self.isa['name']} ({self.isa['vector_bits']}-bit; {', '.join(have) or 'no FMA'}); "
                       f"the code uses {', '.join(self.isa['used']) or 'none of them'}")
        for kernel, counts in self.instruction_mix.items():
            why.append(f"  {kernel}: " + ", ".join(f"{fam} {n}" for fam, n in counts.items() if n))
        return "\n".join([head, *lines, tail, *why])

    def plot(self, path: str | os.PathLike) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = [n for n, ms in self.median_ms.items() if ms is not None]
        fig, ax = plt.subplots(figsize=(7, 3.5))
        bars = ax.bar(names, [self.median_ms[n] for n in names],
                      color=["tab:green" if n == "tvm" else "tab:gray" for n in names])
        ax.bar_label(bars, labels=[f"{self.median_ms[n]:.2f} ms\n{self.gflops[n]:.0f} GF/s" for n in names],
                     fontsize=8)
        ax.set_ylabel("median ms (lower is better)")
        s = self.shapes
        ax.set_title(f"{self.case} {self.preset} T={s['tokens']} V={s['vocab_shard']} on {self.target['kind']} "
                     f"(schedule {self.schedule})", fontsize=9)
        ax.margins(y=0.25)
        fig.tight_layout()
        write_user_file(path, lambda p: fig.savefig(p, format="png", dpi=120))
        plt.close(fig)


def peer_unavailable(peer: str, gpu: bool) -> str | None:
    """Why ``peer`` cannot run against a GPU build here, or None."""
    if gpu and peer == "numpy_fp32":
        return "numpy runs on the host CPU, not the GPU"
    if gpu and peer != "tvm" and not torch.cuda.is_available():
        return f"this torch ({torch.__version__}) has no CUDA"
    return None


def _time_python(fn: Callable, number: int, sync: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    sync()
    return (time.perf_counter() - t0) / number


def numpy_blas_info() -> list[dict]:
    """Which BLAS kernels numpy runs (threadpoolctl), so the numpy figure can be read correctly."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [{k: str(v) for k, v in i.items() if k in ("internal_api", "version", "architecture", "num_threads")}
            for i in threadpool_info()]


def _local_timer(compiled: CompiledCase, inputs: dict) -> Callable[[int], float]:
    """``time_ms(number)``: ``main`` here, weights packed once."""
    vm, dev = compiled.vm, device_for(compiled.target)
    args = compiled.device_args([to_numpy(inputs[n]) for n in compiled.input_specs])
    return lambda number: vm.time_evaluator("main", dev, number=number, repeat=1)(*args).mean * 1e3


def _remote_timer(rpc: tuple[str, str]) -> Callable[[CompiledCase, dict], Callable[[int], float]]:
    """Like ``_local_timer``, on a server of the RPC tracker ``rpc = (HOST:PORT, key)`` (``tools/remote.py``)."""
    from .remote import RemoteMain

    def timer(compiled: CompiledCase, inputs: dict) -> Callable[[int], float]:
        args = compiled.device_args([to_numpy(inputs[n]) for n in compiled.input_specs])  # weights packed here
        return RemoteMain(compiled.executable, compiled.target, args, *rpc).time_ms

    return timer


def _remote_result(compiled: CompiledCase, schedule: str, samples: dict, unavailable: dict,
                   where: str) -> BenchResult:
    """A bench of TVM contenders timed on a remote device: medians and FLOP/s; no peers, peaks or roofline
    (those are measured where bench runs, which is not where TVM ran)."""
    c, s = compiled.case, compiled.shapes
    median = {p: statistics.median(v) for p, v in samples.items()}
    useful, moved = flops(c, s, s.tokens), bytes_moved(compiled)
    nan = float("nan")
    return BenchResult(
        case=c.name, target=target_json(compiled.target), preset=s.preset.name, schedule=schedule,
        shapes=s.as_dict(), median_ms={**median, **dict.fromkeys(unavailable)}, samples_ms=samples,
        unavailable=unavailable, gflops={p: useful / (ms / 1e3) / 1e9 for p, ms in median.items()},
        gbs={p: moved / (ms / 1e3) / 1e9 for p, ms in median.items()},
        speedup={p: ms / median["tvm"] for p, ms in median.items()}, peak_gflops=nan, bandwidth_gbs=nan,
        roofline_gflops=nan, roofline_fraction=nan, peak_fraction=nan, build_seconds=compiled.build_seconds,
        probes="not measured: TVM ran on a remote device", numpy_blas=[], frontend=compiled.frontend,
        measured_on=where)


def bench(spec: BuildSpec | None = None, *, rounds: int = 7, number: int | None = None,
          contenders: tuple[str, ...] = CONTENDERS, seed: int = 0, compare_schedules: tuple[str, ...] = (),
          profile: bool | ProfileOptions = False, rpc: tuple[str, str] | None = None, **options) -> BenchResult:
    """Build ``spec`` (default: the ``logits`` case; keywords: the fields of ``BuildSpec`` and ``DebugOptions``,
    as for ``compile``), then time every contender ``rounds`` times, interleaved; see the module docstring.

    ``compare_schedules`` adds one TVM contender ``tvm:<name>`` per other schedule (``none``, ``tuned``,
    ``dlight`` ...), timed in the same rounds; one that cannot be built here is listed as unavailable, with why.
    ``profile`` (True, or ``ProfileOptions``): also time every kernel of ``main``
    (``tools/profile.py``) into ``result.profile`` (and ``profile.json`` into the run folder when dumping).
    ``rpc=("HOST:PORT", key)``: time the TVM contenders on a server of a TVM RPC tracker (``tools/remote.py``;
    the weights are packed here, so the target must run here too); the peers and the roofline probes run only
    here, so they are not measured then.
    """
    spec, debug = split_options(spec or BuildSpec(case="logits"), None, options, "bench")
    if spec.case not in BENCH_CASES:
        raise UsageError(f"bench case must be one of {', '.join(BENCH_CASES)}, got {spec.case!r}")
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown or "tvm" not in contenders:
        raise UsageError(f"contenders must include tvm and come from {', '.join(CONTENDERS)}; got {unknown}")
    if rounds < 1:
        raise UsageError(f"rounds must be >= 1, got {rounds}")
    schedule = spec.schedule
    profiling = profile_options(profile)
    if profiling is not None and rpc is not None:
        raise UsageError("--profile times kernels here; it cannot go with --rpc-tracker")
    if profiling is not None or rpc is not None:  # kernels timed here; under RPC the weights packed here
        from .check import _require_runs_here

        _require_runs_here(resolve_target(spec.target))
    compiled = compile(spec, debug)
    c, s, tgt = compiled.case, compiled.shapes, compiled.target
    gpu = tgt.kind.name == "cuda"
    torch.set_num_threads(int(tgt.attrs.get("num-cores", os.cpu_count() or 1)) if not gpu else torch.get_num_threads())
    inputs = c.make_inputs(s, seed)
    timer = _remote_timer(rpc) if rpc is not None else _local_timer
    variants = {"tvm": timer(compiled, inputs)}  # contender -> (ms per call over ``number`` calls)
    first = variants["tvm"](1)  # warm up, and size the batch of calls per sample to about 50 ms
    n = number or max(1, min(200, int(50 / max(first, 1e-3))))
    tdev = "cuda" if gpu and torch.cuda.is_available() else "cpu"
    peer_inputs = {k: v.to(tdev) for k, v in inputs.items()}
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    unavailable = {p: why for p in contenders if (why := peer_unavailable(p, gpu))}
    if rpc is not None:
        unavailable.update({p: f"runs here; TVM runs on {rpc[1]}@{rpc[0]}" for p in contenders if p != "tvm"})
    runners = {p: peer_runner(c, p, peer_inputs, s) for p in contenders if p != "tvm" and p not in unavailable}
    for other in dict.fromkeys(compare_schedules):
        if other == schedule:
            continue
        try:
            variants[f"tvm:{other}"] = timer(compile(dataclasses.replace(spec, schedule=other)), inputs)
        except MtpError as e:  # e.g. no tuning database yet, or dlight on a CPU target
            unavailable[f"tvm:{other}"] = str(e)
    for r in runners.values():
        r()
    sync()
    samples: dict[str, list[float]] = {p: [] for p in (*variants, *runners)}
    for _ in range(rounds):
        for p, time_ms in variants.items():
            samples[p].append(time_ms(n))
        for p, r in runners.items():
            samples[p].append(_time_python(r, n, sync) * 1e3)
    if rpc is not None:
        return _remote_result(compiled, schedule, samples, unavailable, f"{rpc[1]}@{rpc[0]}")
    probes = measure_probes(tgt)
    profiled = None if profiling is None else profile_main(compiled, inputs, profiling, probes=probes)
    if profiled is not None and compiled.dump_dir is not None:
        write_to_run_folder(profiled, compiled.dump_dir)
    median = {p: statistics.median(v) for p, v in samples.items()}
    timed = dict(median)
    median.update(dict.fromkeys(unavailable))  # every contender is a key; None where it could not run
    useful = flops(c, s, s.tokens)
    moved = bytes_moved(compiled)
    tvm_s = median["tvm"] / 1e3
    mix = instruction_mix(compiled)
    used = kinds_used(mix)
    peaks = probes.peaks or {FMA: probes.peak_gflops}
    peak, peak_kind = roofline_peak(gemm_work(c, s, used), peaks)
    # attainable = min(peak, intensity x bandwidth) on the useful rows only (the padded ones are not work a
    # user asked for); a kernel without GEMMs (the norm) is judged on bandwidth
    roofline = min(peak, useful / moved * probes.bandwidth_gbs)
    fraction = (useful / tvm_s / 1e9) / roofline if useful else (moved / tvm_s / 1e9) / probes.bandwidth_gbs
    return BenchResult(
        case=c.name, target=target_json(tgt), preset=s.preset.name, schedule=schedule, shapes=s.as_dict(),
        median_ms=median, samples_ms=samples,
        unavailable=unavailable,
        gflops={p: useful / (ms / 1e3) / 1e9 for p, ms in timed.items()},
        gbs={p: moved / (ms / 1e3) / 1e9 for p, ms in timed.items()},
        speedup={p: ms / median["tvm"] for p, ms in timed.items()},
        peak_gflops=peak, bandwidth_gbs=probes.bandwidth_gbs, roofline_gflops=roofline,
        roofline_fraction=fraction,
        peak_fraction=(useful / tvm_s / 1e9) / peak,
        build_seconds=compiled.build_seconds, probes=probes.how, numpy_blas=numpy_blas_info(), profile=profiled,
        frontend=compiled.frontend, isa=isa_record(compiled, used), instruction_mix=mix, peaks=peaks,
        peak_kind=peak_kind)
