"""``bench``: time a case's TVM build against the libraries a user would call instead, interleaved in one run,
next to this machine's measured FMA peak and memory bandwidth.

Contenders (each computes the whole case, stage after stage, from the same seeded inputs):

- ``tvm``: the compiled module's ``main`` (``time_evaluator``), weights already packed (``main_transform_params``
  runs once, at load, outside the timing);
- ``torch_bf16``: the matching torch ops in BF16 (``F.linear`` for the GEMMs, ``F.rms_norm``);
- ``torch_fp32`` / ``numpy_fp32``: the same in FP32 (weights converted once, outside the timing);
- ``torch_golden``: the golden implementation (``mtp_tvm.golden``), what the checks compare against.

Rounds interleave the contenders (round r times every contender once), so drift in clock speed or load hits
all of them alike; medians over rounds are reported.

Probes (ours, built with TVM for the same target): ``fma_peak`` runs independent FP32 FMA chains in registers,
``vector_lanes`` wide, on every core (GPU: every thread); ``stream_read`` sums a buffer far larger than the
caches. FLOP/s of a contender counts the useful ``2*T*K*N`` of its GEMMs; the roofline uses the FLOPs TVM
executes (rows padded to 16) and the bytes it must read (weights once, activations, outputs).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
import tvm
from tvm.script import tirx as T

from ..compiler.driver import CompiledCase, compile
from ..compiler.tensors import NUMPY_DTYPES, to_numpy
from ..passes.target import device_for, target_json
from ..spec import golden
from ..spec.cases import Case
from ..spec.presets import INT8_AMAX_EPS, INT8_SCALE_MAX, Shapes, padded_tokens
from ..support.atomic_file import write_user_file
from ..support.errors import MtpError, UsageError
from ..support.text_table import text_table

CONTENDERS = ("tvm", "torch_bf16", "torch_fp32", "numpy_fp32", "torch_golden")
TORCH_DTYPES = {"torch_bf16": torch.bfloat16, "torch_fp32": torch.float32}
BENCH_CASES = ("logits", "projection", "norm", "tail")


# ---- FLOPs and bytes -------------------------------------------------------------------------------------

def gemm_shapes(case: Case, s: Shapes) -> list[tuple[int, int]]:
    """``(K, N)`` of every GEMM the case runs (the norm's few FLOPs per element are not counted)."""
    per_stage = {"projection": [(s.hidden, s.hidden)] * 2, "logits": [(s.hidden, s.vocab_shard)], "norm": []}
    return [kn for st in case.stages for kn in per_stage[st]]


def flops(case: Case, s: Shapes, rows: int) -> float:
    return float(sum(2 * rows * k * n for k, n in gemm_shapes(case, s)))


def bytes_moved(compiled: CompiledCase) -> float:
    """Every input read once and every output written once: the least traffic any implementation needs."""
    t = compiled.shapes.tokens
    specs = (*compiled.input_specs.values(), *compiled.output_specs.values())
    return float(sum(math.prod(sp.concrete(t)) * NUMPY_DTYPES[sp.dtype].itemsize for sp in specs))


# ---- probes ----------------------------------------------------------------------------------------------

def fma_probe(blocks: int, threads: int, iters: int, chains: int, lanes: int, gpu: bool):
    """``blocks x threads`` workers, each running ``chains`` independent chains of ``lanes``-wide FP32 FMAs,
    ``iters`` long, in registers. CPU: blocks are cores (parallel), lanes one vector; GPU: bound to
    blockIdx/threadIdx, one lane per thread."""
    block_loop = functools.partial(T.thread_binding, thread="blockIdx.x") if gpu else T.parallel
    thread_loop = functools.partial(T.thread_binding, thread="threadIdx.x") if gpu else T.serial
    lane_loop = T.unroll if gpu else T.vectorized
    scope = "local" if gpu else "global"  # CPU: a small "global" scratch is a stack array LLVM keeps in registers

    @T.prim_func(s_tir=True)
    def fma_peak(a: T.Buffer((blocks * threads, lanes), "float32"),
                 out: T.Buffer((blocks * threads, chains, lanes), "float32")):
        T.func_attr({"tir.noalias": True})
        for b in block_loop(blocks):
            for t in thread_loop(threads):
                with T.sblock("worker"):
                    vp = T.axis.spatial(blocks * threads, b * threads + t)
                    acc = T.sblock_alloc_buffer((chains, lanes), "float32", scope=scope)
                    for c in T.unroll(chains):
                        for lane in lane_loop(lanes):
                            acc[c, lane] = a[vp, lane] + T.Cast("float32", c)
                    for _ in range(iters):
                        for c in T.unroll(chains):
                            for lane in lane_loop(lanes):
                                acc[c, lane] = acc[c, lane] * a[vp, lane] + a[vp, lane]
                    for c in T.unroll(chains):
                        for lane in lane_loop(lanes):
                            out[vp, c, lane] = acc[c, lane]

    return fma_peak


def stream_probe(parallel: int, steps: int, lanes: int):
    """Sum ``parallel`` slices of ``steps * lanes`` FP32 each into ``lanes`` partial sums: a pure read stream."""

    @T.prim_func(s_tir=True)
    def stream_read(a: T.Buffer((parallel, steps, lanes), "float32"), out: T.Buffer((parallel, lanes), "float32")):
        T.func_attr({"tir.noalias": True})
        for p, lane, i in T.grid(parallel, lanes, steps):
            with T.sblock("sum"):
                vp, vl, vi = T.axis.remap("SSR", [p, lane, i])
                with T.init():
                    out[vp, vl] = T.float32(0)
                out[vp, vl] = out[vp, vl] + a[vp, vi, vl]

    return stream_read


def _schedule_stream(func, gpu: bool):
    """CPU: slices in parallel, lanes vectorised. GPU: slices over blocks, lanes over threads (coalesced)."""
    sch = tvm.s_tir.Schedule(func)
    p, lane, i = sch.get_loops("sum")
    if gpu:
        sch.bind(p, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
    else:
        sch.reorder(p, i, lane)
        acc = sch.cache_write("sum", 0, "global")  # partial sums in registers (a stack array LLVM promotes)
        sch.reverse_compute_at(acc, p)
        sch.parallel(p)
        sch.vectorize(lane)
        sch.vectorize(sch.get_loops(acc)[-1])
        sch.decompose_reduction("sum", i)
    return sch.mod


@dataclasses.dataclass
class Probes:
    peak_gflops: float
    bandwidth_gbs: float
    how: str


@dataclasses.dataclass(frozen=True)
class ProbePlan:
    """Sizes of the two probes for one device: FMA workers ``blocks x threads``, each ``chains`` x ``lanes``
    FMAs ``iters`` times; the stream reads ``stream_parallel`` slices into ``stream_lanes`` partial sums."""

    gpu: bool
    blocks: int
    threads: int
    lanes: int
    chains: int
    iters: int
    stream_parallel: int
    stream_lanes: int
    stream_bytes: int

    @classmethod
    def for_target(cls, target, multiprocessors: int | None = None) -> ProbePlan:
        if target.kind.name == "cuda":
            sms = multiprocessors or device_for(target).multi_processor_count
            return cls(True, sms * 8, 256, 1, 8, 20_000, sms * 8, 1024, 1 << 30)
        cores = int(target.attrs.get("num-cores", os.cpu_count() or 1))
        return cls(False, cores, 1, 16 if _has_avx512() else 8, 12, 100_000, cores, 64, 256 << 20)

    @property
    def stream_steps(self) -> int:
        return self.stream_bytes // 4 // self.stream_parallel // self.stream_lanes

    def build(self, target):
        """The two probe kernels, compiled for ``target`` (a GPU build needs no GPU)."""
        fma = tvm.compile(fma_probe(self.blocks, self.threads, self.iters, self.chains, self.lanes, self.gpu),
                          target=target)
        stream = tvm.compile(_schedule_stream(stream_probe(self.stream_parallel, self.stream_steps,
                                                           self.stream_lanes), self.gpu), target=target)
        return fma, stream


def measure_probes(target, rounds: int = 5) -> Probes:
    """The FP32 FMA peak and read bandwidth of the target device, by our own TVM kernels (best of ``rounds``)."""
    dev = device_for(target)
    plan = ProbePlan.for_target(target)
    fma, stream = (ex.jit() for ex in plan.build(target))
    workers = plan.blocks * plan.threads
    a = tvm.runtime.tensor(np.full((workers, plan.lanes), 0.999, np.float32), dev)
    o = tvm.runtime.tensor(np.zeros((workers, plan.chains, plan.lanes), np.float32), dev)
    t_fma = fma.time_evaluator("main", dev, number=3, repeat=rounds)(a, o)
    peak = 2.0 * workers * plan.iters * plan.chains * plan.lanes / min(t_fma.results) / 1e9
    shape = (plan.stream_parallel, plan.stream_steps, plan.stream_lanes)
    buf = tvm.runtime.tensor(np.ones(shape, np.float32), dev)
    out = tvm.runtime.tensor(np.zeros((plan.stream_parallel, plan.stream_lanes), np.float32), dev)
    t_bw = stream.time_evaluator("main", dev, number=2, repeat=rounds)(buf, out)
    bw = math.prod(shape) * 4 / min(t_bw.results) / 1e9
    unit = ("threads", "blocks") if plan.gpu else ("cores", "threads")
    return Probes(peak, bw, f"fma_peak: {workers} {unit[0]} x {plan.chains} chains of {plan.lanes}-lane FP32 FMA, "
                            f"{plan.iters} iterations; stream_read: {plan.stream_parallel} {unit[1]} summing "
                            f"{plan.stream_bytes >> 20} MiB of FP32; best of {rounds}")


def _has_avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


# ---- contenders ------------------------------------------------------------------------------------------

def _stage_peer(stage: str, peer: str, t: dict, eps: float) -> Callable:
    """``f(x) -> y`` for one stage in one peer's dtype; weights prepared here, once, outside the timing."""
    if peer == "numpy_fp32":
        if stage == "logits":
            w = t["lm_head_weight"].float().numpy()
            return lambda x: x @ w.T
        if stage == "norm":
            w = t["shared_head_norm_w"].numpy()
            return lambda x: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
        weights = {k: (v.float().numpy()) for k, v in t.items()}

        def projection(_x):
            out = 0
            for tag, act in (("e", "hidden_states"), ("h", "prev_hidden_states")):
                xf = weights[act]
                y = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + eps) * weights[f"{tag}norm_w"] * weights[
                    f"{tag}_proj_smooth"]
                scale = INT8_SCALE_MAX / np.maximum(np.abs(y).max(-1, keepdims=True), INT8_AMAX_EPS)
                q = np.rint(y * scale)
                out = out + (q @ weights[f"{tag}_proj_w"].T) / scale * weights[f"{tag}_proj_w_scale"]
            return out

        return projection
    dtype = TORCH_DTYPES.get(peer)
    if peer == "torch_golden":
        if stage == "logits":
            return lambda x: golden.local_logits(x, t["lm_head_weight"])
        if stage == "norm":
            return lambda x: golden.shared_head_norm(x, t["shared_head_norm_w"], eps)
        return lambda _x: golden.mtp_projection(t, eps)
    if stage == "logits":
        w = t["lm_head_weight"].to(dtype)
        return lambda x: F.linear(x, w)
    if stage == "norm":
        w = t["shared_head_norm_w"].to(dtype)
        return lambda x: F.rms_norm(x, (x.shape[-1],), w, eps)
    w = {k: v.to(dtype) for k, v in t.items()}

    def projection(_x):  # W8A8 with the INT8 GEMMs as dtype GEMMs of the (exactly representable) integers
        out = 0
        for tag, act in (("e", "hidden_states"), ("h", "prev_hidden_states")):
            y = F.rms_norm(w[act], (w[act].shape[-1],), w[f"{tag}norm_w"], eps) * w[f"{tag}_proj_smooth"]
            scale = INT8_SCALE_MAX / y.abs().amax(-1, keepdim=True).clamp_min(INT8_AMAX_EPS)
            q = torch.round(y * scale)
            out = out + F.linear(q, w[f"{tag}_proj_w"]) / scale * w[f"{tag}_proj_w_scale"]
        return out

    return projection


def peer_runner(case: Case, peer: str, inputs: dict[str, torch.Tensor], eps: float) -> Callable[[], object]:
    """The whole case (its stage chain) for one peer, as a zero-argument callable."""
    stages = [_stage_peer(st, peer, inputs, eps) for st in case.stages]
    x0 = inputs.get("hidden_states")
    if peer == "numpy_fp32":
        x0 = x0.float().numpy() if x0 is not None else None
    elif peer != "torch_golden" and x0 is not None:
        x0 = x0.to(TORCH_DTYPES[peer])

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

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

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
        head = (f"case={self.case} target={self.target['kind']} preset={self.preset} schedule={self.schedule} "
                f"T={s['tokens']} (padded {s['tokens_padded']}) D={s['hidden']} V={s['vocab_shard']} "
                f"build={self.build_seconds:.2f}s")
        tail = (f"peak {self.peak_gflops:.1f} GFLOP/s, bandwidth {self.bandwidth_gbs:.1f} GB/s (measured); "
                f"tvm at {100 * self.peak_fraction:.0f}% of peak and {100 * self.roofline_fraction:.0f}% of the "
                f"roofline ({self.roofline_gflops:.1f} GFLOP/s) on the {s['tokens_padded']} rows it computes")
        return "\n".join([head, *lines, tail])

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


def bench(case: str = "logits", target="llvm", preset: str = "flash", vocab_shard: int | None = None,
          schedule: str = "default", tokens: int | None = None, rounds: int = 7, number: int | None = None,
          contenders: tuple[str, ...] = CONTENDERS, seed: int = 0,
          compare_schedules: tuple[str, ...] = ()) -> BenchResult:
    """Build ``case``, then time every contender ``rounds`` times, interleaved; see the module docstring.

    ``compare_schedules`` adds one TVM contender ``tvm:<name>`` per other schedule (``none``, ``tuned``,
    ``dlight`` ...), timed in the same rounds; one that cannot be built here is listed as unavailable, with why.
    """
    if case not in BENCH_CASES:
        raise UsageError(f"bench case must be one of {', '.join(BENCH_CASES)}, got {case!r}")
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown or "tvm" not in contenders:
        raise UsageError(f"contenders must include tvm and come from {', '.join(CONTENDERS)}; got {unknown}")
    if rounds < 1:
        raise UsageError(f"rounds must be >= 1, got {rounds}")
    compiled = compile(case=case, target=target, preset=preset, tokens=tokens, vocab_shard=vocab_shard,
                       schedule=schedule)
    c, s, tgt = compiled.case, compiled.shapes, compiled.target
    gpu = tgt.kind.name == "cuda"
    torch.set_num_threads(int(tgt.attrs.get("num-cores", os.cpu_count() or 1)) if not gpu else torch.get_num_threads())
    inputs = c.make_inputs(s, seed)
    dev = device_for(tgt)
    args = compiled.device_args([to_numpy(inputs[n]) for n in compiled.input_specs])
    vm = compiled.vm
    tvm_once = lambda: vm.time_evaluator("main", dev, number=1, repeat=1)(*args).mean  # noqa: E731
    first = tvm_once()  # warm up, and size the batch of calls per sample to about 50 ms
    n = number or max(1, min(200, int(0.05 / max(first, 1e-6))))
    tdev = "cuda" if gpu and torch.cuda.is_available() else "cpu"
    peer_inputs = {k: v.to(tdev) for k, v in inputs.items()}
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    unavailable = {p: why for p in contenders if (why := peer_unavailable(p, gpu))}
    runners = {p: peer_runner(c, p, peer_inputs, s.eps) for p in contenders if p != "tvm" and p not in unavailable}
    variants = {"tvm": (vm, args)}
    for other in dict.fromkeys(compare_schedules):
        if other == schedule:
            continue
        try:
            alt = compile(case=case, target=target, preset=preset, tokens=tokens, vocab_shard=vocab_shard,
                          schedule=other)
        except MtpError as e:  # e.g. no tuning database yet, or dlight on a CPU target
            unavailable[f"tvm:{other}"] = str(e)
            continue
        variants[f"tvm:{other}"] = (alt.vm, alt.device_args([to_numpy(inputs[k]) for k in alt.input_specs]))
    for r in runners.values():
        r()
    sync()
    samples: dict[str, list[float]] = {p: [] for p in (*variants, *runners)}
    for _ in range(rounds):
        for p, (v, a) in variants.items():
            samples[p].append(v.time_evaluator("main", dev, number=n, repeat=1)(*a).mean * 1e3)
        for p, r in runners.items():
            samples[p].append(_time_python(r, n, sync) * 1e3)
    probes = measure_probes(tgt)
    median = {p: statistics.median(v) for p, v in samples.items()}
    timed = dict(median)
    median.update(dict.fromkeys(unavailable))  # every contender is a key; None where it could not run
    useful = flops(c, s, s.tokens)
    executed = flops(c, s, padded_tokens(s.tokens))
    moved = bytes_moved(compiled)
    tvm_s = median["tvm"] / 1e3
    # attainable = min(peak, intensity x bandwidth); a kernel without GEMMs (the norm) is judged on bandwidth
    roofline = min(probes.peak_gflops, executed / moved * probes.bandwidth_gbs)
    fraction = (executed / tvm_s / 1e9) / roofline if executed else (moved / tvm_s / 1e9) / probes.bandwidth_gbs
    return BenchResult(
        case=c.name, target=target_json(tgt), preset=s.preset.name, schedule=schedule, shapes=s.as_dict(),
        median_ms=median, samples_ms=samples,
        unavailable=unavailable,
        gflops={p: useful / (ms / 1e3) / 1e9 for p, ms in timed.items()},
        gbs={p: moved / (ms / 1e3) / 1e9 for p, ms in timed.items()},
        speedup={p: ms / median["tvm"] for p, ms in timed.items()},
        peak_gflops=probes.peak_gflops, bandwidth_gbs=probes.bandwidth_gbs, roofline_gflops=roofline,
        roofline_fraction=fraction,
        peak_fraction=(executed / tvm_s / 1e9) / probes.peak_gflops,
        build_seconds=compiled.build_seconds, probes=probes.how, numpy_blas=numpy_blas_info())
