"""The roofline ``bench`` judges a build against: this machine's FP32 FMA peak and memory read bandwidth,
measured by our own TVM kernels for the same target (a GPU build of them needs no GPU).

``fma_peak`` runs independent FP32 FMA chains in registers, ``vector_lanes`` wide, on every core (GPU: every
thread); ``stream_read`` sums a buffer far larger than the caches.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from pathlib import Path

import numpy as np
import tvm
from tvm.script import tirx as T

from ..passes.target import device_for


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
