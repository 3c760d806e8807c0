"""The roofline ``bench`` judges a build against: this machine's peak per instruction kind and its memory read
bandwidth, measured by our own TVM kernels for the same target (a GPU build of them needs no GPU).

``fma_peak`` runs independent FP32 FMA chains in registers, one target vector wide, on every core (GPU: every
thread); ``stream_read`` sums a buffer far larger than the caches. Where the target has them, the dot products
the GEMM schedules use get their own peak (``Probes.peaks``), since they do more than an FMA's work per
instruction: ``bf16_dot_peak`` chains the project's ``vdpbf16ps`` micro-kernel (``schedule/bf16_dot.py``: an
activation-pair broadcast, a weight load, one ``vdpbf16ps``; 32 BF16 products a zmm, 64 FLOPs) and
``int8_dot_peak`` chains ``vpdpwssd`` (VNNI; 64 int16 operations a zmm) or ``vpmaddwd`` + ``vpaddd`` (AVX2/
AVX-512BW); ``tile_peak`` calls the project's AMX block (``schedule/amx_dot.py``, BF16 or int8: 16 rows x the
most accumulator tiles, ``TILE_PROBE_STEPS`` K steps of operands that stay in the core's caches). Peaks are GFLOP/s
(GOP/s for the integer dot) counted as the GEMMs count them, 2 per product.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time

import numpy as np
import tvm

from ...compiler.huge_pages import huge_page_empty, weights_on_huge_pages
from ...passes.target import cpu_isa, device_for
from ...support.lazy import lazy_module

T = lazy_module("tvm.script.tirx")  # the probes are built on first use: a prebuilt artifact's bench needs TVM's
# runtime alone (``CopyProbe``), where TVMScript cannot load

FMA, BF16_DOT, INT8_DOT = "fma", "bf16_dot", "int8_dot"  # instruction kinds with a peak (``Probes.peaks``)
BF16_TILE, INT8_TILE = "bf16_tile", "int8_tile"  # the AMX products (``schedule/amx_dot.py``)
# The compute probes run about 1 ms a sample: best of this many per round, so one that ran while every core was
# busy (other processes; a parallel probe waits for its slowest thread) does not become the "peak"
COMPUTE_REPEATS = 4
# What the bandwidth probes move (the read probe sums it, the copy probe copies it) unless told the contender's
# working set: far beyond most caches
PROBE_BYTES = {"cpu": 256 << 20, "gpu": 1 << 30}
# The read probe sized to a contender's working set (``read_bytes``) reads at least the first (below it, launch
# overhead and the small caches decide the rate) and at most the second (filling 1 GiB takes about a second).
# Sized, because the rate depends on it where the last-level cache is large: on a 480 MiB-L3 Xeon the 132 MB FLASH
# logits weight streamed at 50+ GB/s while a 256 MiB probe read 33 GB/s (128 MiB: 52, 64 MiB: 57), so the kernel
# "beat" the roofline at every T <= 4.
READ_BYTES_RANGE = (32 << 20, 1 << 30)


def probe_bytes(read_bytes: float) -> int:
    """What a probe sized to a working set of ``read_bytes`` moves: that, within ``READ_BYTES_RANGE``."""
    return int(min(max(read_bytes, READ_BYTES_RANGE[0]), READ_BYTES_RANGE[1]))


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


def stream_probe(parallel: int, steps: int, lanes: int, streams: int = 1):
    """Sum ``parallel`` slices of ``streams * steps * lanes`` FP32 each into ``streams * lanes`` partial sums: a pure
    read stream. ``streams`` > 1 splits a slice into that many contiguous parts read side by side (more address
    streams in flight for the hardware prefetchers, more independent accumulators)."""

    @T.prim_func(s_tir=True)
    def stream_read(a: T.Buffer((parallel, streams, steps, lanes), "float32"),
                    out: T.Buffer((parallel, streams, lanes), "float32")):
        T.func_attr({"tir.noalias": True})
        for p, s, lane, i in T.grid(parallel, streams, lanes, steps):
            with T.sblock("sum"):
                vp, vs, vl, vi = T.axis.remap("SSSR", [p, s, lane, i])
                with T.init():
                    out[vp, vs, vl] = T.float32(0)
                out[vp, vs, vl] = out[vp, vs, vl] + a[vp, vs, vi, vl]

    return stream_read


@dataclasses.dataclass(frozen=True)
class StreamShape:
    """One read-stream probe: ``streams`` parts of a slice read side by side, ``lanes`` FP32 partial sums each,
    the K loop unrolled ``unroll`` times (CPU)."""

    lanes: int
    streams: int = 1
    unroll: int = 1

    def describe(self) -> str:
        return f"{self.streams} stream{'s' if self.streams > 1 else ''} x {self.lanes} lanes, unroll {self.unroll}"


def _schedule_stream(func, gpu: bool, shape: StreamShape):
    """CPU: slices in parallel, a step's ``streams x lanes`` loads vectorised and unrolled. GPU: slices over
    blocks, lanes over threads (coalesced)."""
    sch = tvm.s_tir.Schedule(func)
    p, s, lane, i = sch.get_loops("sum")
    if gpu:
        sch.bind(p, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
    else:
        sch.reorder(p, i, s, lane)
        acc = sch.cache_write("sum", 0, "global")  # partial sums in registers (a stack array LLVM promotes)
        sch.reverse_compute_at(acc, p)
        sch.parallel(p)
        if shape.unroll > 1:
            sch.unroll(sch.split(i, [None, shape.unroll])[1])
        sch.unroll(s)
        sch.vectorize(lane)
        sch.vectorize(sch.get_loops(acc)[-1])
        sch.decompose_reduction("sum", sch.get_loops("sum")[1])
    return sch.mod


def bf16_dot_probe(cores: int, iters: int, chains: int):
    """``cores`` workers (parallel), each ``chains`` independent 16-lane FP32 accumulators updated ``iters`` times
    by the ``vdpbf16ps`` micro-kernel of ``schedule/bf16_dot.py`` (its LLVM IR imported as the GEMMs import it,
    without the weight prefetch: the chains load one small weight)."""
    from ...schedule.bf16_dot import BF16_DOT_FUNCTION, bf16_dot_llvm_ir, dot_call

    @T.prim_func(s_tir=True)
    def bf16_dot_peak(a: T.Buffer((cores, 2), "bfloat16"), w: T.Buffer((cores, chains, 32), "bfloat16"),
                      out: T.Buffer((cores, chains, 16), "float32")):
        T.func_attr({"tir.noalias": True})
        for b in T.parallel(cores):
            with T.sblock("worker"):
                vb = T.axis.spatial(cores, b)
                T.reads(a[vb, 0:2], w[vb, 0:chains, 0:32])  # (the micro-kernel takes data pointers)
                T.writes(out[vb, 0:chains, 0:16])
                acc = T.sblock_alloc_buffer((chains, 16), "float32")  # a stack array LLVM keeps in registers
                for c in T.unroll(chains):
                    for lane in T.vectorized(16):
                        acc[c, lane] = T.Cast("float32", c)
                for _ in T.serial(iters, annotations={"pragma_import_llvm": bf16_dot_llvm_ir()}):
                    for c in T.unroll(chains):
                        T.evaluate(dot_call(BF16_DOT_FUNCTION, acc.data, c * 16, 0, a.data, vb * 2, w.data,
                                            (vb * chains + c) * 32))
                for c in T.unroll(chains):
                    for lane in T.vectorized(16):
                        out[vb, c, lane] = acc[c, lane]

    return bf16_dot_peak


def int8_dot_probe(cores: int, iters: int, chains: int, vector_bits: int, vnni: bool):
    """``cores`` workers, each ``chains`` int32 accumulator vectors updated ``iters`` times by ``vpdpwssd``
    (``vnni``) or ``vpmaddwd`` + ``vpaddd``; the ``vpmaddwd`` operand is the accumulator itself, so LLVM cannot
    hoist it out of the loop."""
    lanes = vector_bits // 32
    wide, acc_ty = f"int16x{2 * lanes}", f"int32x{lanes}"
    intrinsic = {(256, False): "llvm.x86.avx2.pmadd.wd", (512, False): "llvm.x86.avx512.pmaddw.d.512",
                 (256, True): "llvm.x86.avx512.vpdpwssd.256", (512, True): "llvm.x86.avx512.vpdpwssd.512"}[
                     vector_bits, vnni]

    @T.prim_func(s_tir=True)
    def int8_dot_peak(w: T.Buffer((cores, chains, lanes), "int32"), out: T.Buffer((cores, chains, lanes), "int32")):
        T.func_attr({"tir.noalias": True})
        for b in T.parallel(cores):
            with T.sblock("worker"):
                vb = T.axis.spatial(cores, b)
                acc = T.sblock_alloc_buffer((chains, lanes), "int32")
                for c in T.unroll(chains):
                    for lane in T.vectorized(lanes):
                        acc[c, lane] = w[vb, c, lane]
                for _ in range(iters):
                    for c in T.unroll(chains):
                        if vnni:
                            acc[c, T.ramp(0, 1, lanes)] = T.call_llvm_pure_intrin(
                                acc_ty, T.llvm_lookup_intrinsic_id(intrinsic), acc[c, T.ramp(0, 1, lanes)],
                                T.reinterpret(wide, w[vb, c, T.ramp(0, 1, lanes)]),
                                T.reinterpret(wide, w[vb, (c + 1) % chains, T.ramp(0, 1, lanes)]))
                        else:
                            acc[c, T.ramp(0, 1, lanes)] = acc[c, T.ramp(0, 1, lanes)] + T.call_llvm_pure_intrin(
                                acc_ty, T.llvm_lookup_intrinsic_id(intrinsic),
                                T.reinterpret(wide, acc[c, T.ramp(0, 1, lanes)]),
                                T.reinterpret(wide, w[vb, c, T.ramp(0, 1, lanes)]))
                for c in T.unroll(chains):
                    for lane in T.vectorized(lanes):
                        out[vb, c, lane] = acc[c, lane]

    return int8_dot_peak


TILE_PROBE_STEPS = 16  # K steps of the AMX probe's block: 16 KiB of activation, 16 KiB of weight per tile
TILE_CALLS_PER_ITER = 100  # the probe calls a block (80 tdpbf16ps) once per 100 of the vector probes' iterations


def tile_probe(kind: str, cores: int, iters: int):
    """``cores`` workers (parallel), each calling the AMX block of ``schedule/amx_dot.py`` (``kind``: BF16_TILE
    or INT8_TILE) ``iters`` times on its own activation and weight tiles (read from L1/L2: the block's compute,
    not the memory, is timed). Returns the kernel, its operations per call and worker, its argument shapes."""
    from ...schedule.amx_dot import LANES, MAX_ROWS, TILE_DOTS, max_tiles, tile_call, tile_function, tile_llvm_ir

    dot = next(d for d in TILE_DOTS.values() if d.kind == kind)
    rows, tiles, steps, op, acc, g = MAX_ROWS, max_tiles(), TILE_PROBE_STEPS, dot.operand, dot.accumulator, dot.group
    depth, columns, function = steps * dot.k_step, tiles * LANES, tile_function(dot, rows, tiles)

    @T.prim_func(s_tir=True)
    def tile_peak(a: T.Buffer((cores, rows, depth), op), w: T.Buffer((cores, tiles, depth // g, LANES, g), op),
                  out: T.Buffer((cores, rows, columns), acc)):
        T.func_attr({"tir.noalias": True})
        for b in T.parallel(cores):
            with T.sblock("worker"):
                vb = T.axis.spatial(cores, b)
                T.reads(a[vb, 0:rows, 0:depth], w[vb, 0:tiles, 0:depth // g, 0:LANES, 0:g])
                T.writes(out[vb, 0:rows, 0:columns])
                for _ in T.serial(iters, annotations={"pragma_import_llvm": tile_llvm_ir(dot, rows, tiles)}):
                    T.evaluate(tile_call(function, out.data, vb * rows * columns, columns, a.data, vb * rows * depth,
                                         depth, w.data, vb * tiles * depth * LANES, depth * LANES, steps))

    shapes = [((cores, rows, depth), op), ((cores, tiles, depth // g, LANES, g), op), ((cores, rows, columns), acc)]
    return tile_peak, 2.0 * rows * columns * depth, shapes


@dataclasses.dataclass
class Probes:
    """``peak_gflops``: the FP32 FMA peak (also ``peaks["fma"]``); ``peaks``: GFLOP/s per instruction kind this
    target has (``fma`` always, ``bf16_dot`` with AVX512-BF16, ``int8_dot`` with ``vpdpwssd``/``vpmaddwd``,
    ``bf16_tile``/``int8_tile`` with AMX-BF16/INT8)."""

    peak_gflops: float | None  # None: not measured (a prebuilt artifact's bench has no compiler for the probes)
    bandwidth_gbs: float
    how: str
    peaks: dict[str, float] = dataclasses.field(default_factory=dict)


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
    def for_target(cls, target, multiprocessors: int | None = None, read_bytes: float | None = None) -> ProbePlan:
        """``read_bytes``: the working set of what the roofline judges (the bytes a case moves), which the read
        probe then reads (within ``READ_BYTES_RANGE``); None: ``PROBE_BYTES``."""
        gpu = target.kind.name == "cuda"
        stream_bytes = PROBE_BYTES["gpu" if gpu else "cpu"] if read_bytes is None else probe_bytes(read_bytes)
        if gpu:
            sms = multiprocessors or device_for(target).multi_processor_count
            return cls(True, sms * 8, 256, 1, 8, 20_000, sms * 8, 1024, stream_bytes)
        cores = int(target.attrs.get("num-cores", os.cpu_count() or 1))
        return cls(False, cores, 1, cpu_isa(target).fp32_lanes, 12, 100_000, cores, 64, stream_bytes)

    def stream_shapes(self) -> tuple[StreamShape, ...]:
        """The read probes raced for the bandwidth: on a CPU, 1 to 4 vectors of partial sums in 2 to 16 address
        streams (4 to 16 vectors in all), unrolled, beside the plain one; a GPU's coalesced sum has one shape. A
        contender that reads faster than all of them would make the roofline a wrong probe, not a kernel over
        100 %: at 4 streams at most, the FLASH logits at T = 1 read 132 MB faster than the probe on a Xeon whose
        reads scale to 8 streams (4 x 2 vectors: 35 GB/s; 8 x 1: 50)."""
        plain = StreamShape(self.stream_lanes)
        if self.gpu:
            return (plain,)
        return (plain, *(StreamShape(vectors * self.lanes, streams, 4) for vectors in (1, 2, 4)
                         for streams in (2, 4, 8, 16) if 4 <= vectors * streams <= 16))

    def stream_steps(self, shape: StreamShape) -> int:
        return self.stream_bytes // 4 // self.stream_parallel // shape.streams // shape.lanes

    def build_fma(self, target):
        """The FMA probe, compiled for ``target`` (a GPU build needs no GPU)."""
        return tvm.compile(fma_probe(self.blocks, self.threads, self.iters, self.chains, self.lanes, self.gpu),
                           target=target)

    def build_stream(self, target, shape: StreamShape | None = None):
        """A read-stream probe (the plain one by default), compiled for ``target``."""
        shape = shape or StreamShape(self.stream_lanes)
        func = stream_probe(self.stream_parallel, self.stream_steps(shape), shape.lanes, shape.streams)
        return tvm.compile(_schedule_stream(func, self.gpu, shape), target=target)

    def dot_kinds(self, target) -> tuple[str, ...]:
        """The dot-product kinds ``target`` has (and the GEMM schedules use): their peaks are probed too."""
        if self.gpu:
            return ()
        isa = cpu_isa(target)
        int8 = isa.int8_dot in ("vnni", "pmaddwd") and isa.vector_bits in (256, 512)
        return ((BF16_DOT,) * isa.bf16_dot + (INT8_DOT,) * int8 + (BF16_TILE,) * isa.bf16_tile
                + (INT8_TILE,) * isa.int8_tile)

    def build_dot(self, target, kind: str):
        """``(kernel, operations per call, argument shapes and dtypes)`` of one dot-product probe."""
        if kind in (BF16_TILE, INT8_TILE):
            calls = self.iters // TILE_CALLS_PER_ITER
            func, per_call, shapes = tile_probe(kind, self.blocks, calls)
            return tvm.compile(func, target=target), per_call * self.blocks * calls, shapes
        if kind == BF16_DOT:
            func = bf16_dot_probe(self.blocks, self.iters, self.chains)
            return (tvm.compile(func, target=target), 64.0 * self.blocks * self.iters * self.chains,
                    [((self.blocks, 2), "bfloat16"), ((self.blocks, self.chains, 32), "bfloat16"),
                     ((self.blocks, self.chains, 16), "float32")])
        isa = cpu_isa(target)
        lanes = isa.vector_bits // 32
        func = int8_dot_probe(self.blocks, self.iters, self.chains, isa.vector_bits, isa.int8_dot == "vnni")
        return (tvm.compile(func, target=target), 4.0 * lanes * self.blocks * self.iters * self.chains,
                [((self.blocks, self.chains, lanes), "int32")] * 2)


def _dot_peak(plan: ProbePlan, target, kind: str, dev, rounds: int) -> float:
    ex, ops, shapes = plan.build_dot(target, kind)
    f = ex.jit()
    args = [tvm.runtime.tensor(np.ones(shape, "uint16" if dtype == "bfloat16" else dtype), dev) if dtype != "bfloat16"
            else tvm.runtime.empty(shape, dtype, dev) for shape, dtype in shapes]
    t = f.time_evaluator("main", dev, number=3, repeat=COMPUTE_REPEATS * rounds)(*args)
    return ops / min(t.results) / 1e9


class StreamProbe:
    """The read-bandwidth probe, built once and timed as often as asked: ``bench`` times it in every round beside
    TVM and its peers, since a shared machine's bandwidth drifts by tens of percent between seconds. It is the
    fastest of ``ProbePlan.stream_shapes``, raced once when made (``chosen``; every shape's GB/s in ``raced``).
    The shapes read views of one buffer: seven buffers of their own held 1.8 GB at once, and filling them took
    about a second of every bench and profile. The buffer is on the pages a build of ``target`` keeps its packed
    weights on (``compiler.huge_pages``): on 4 KiB pages it read below the AVX2 logits' own 2 MiB ones at T = 1."""

    RACE_ROUNDS = 3
    # What a sample reads, in as many reads of the buffer as it takes: a bench times it between contenders that
    # evict it from the cache, and two reads of a 132 MB buffer came out 10 % slower than twenty (the first
    # reads after a switch run colder), while the kernel beside it is timed over about 50 ms of calls
    SAMPLE_BYTES = 2 << 30

    def __init__(self, target, plan: ProbePlan | None = None):
        self.plan = plan or ProbePlan.for_target(target)
        self.dev = device_for(target)
        ones = np.ones(self.plan.stream_bytes // 4, np.float32)
        advised = huge_page_empty(ones.shape, "float32") if weights_on_huge_pages(target) else None
        self.huge_pages = advised is not None
        self._buffer = tvm.runtime.tensor(ones, self.dev) if advised is None else advised.copyfrom(ones)
        built = [(shape, self._probe(target, shape)) for shape in self.plan.stream_shapes()]
        best: dict[StreamShape, float] = {}
        for _ in range(self.RACE_ROUNDS if len(built) > 1 else 0):  # rounds alternate the shapes (drift)
            for shape, probe in built:
                best[shape] = max(best.get(shape, 0.0), self._gbs(probe, 1))
        self.raced = {shape.describe(): gbs for shape, gbs in best.items()}
        self.chosen, self._run = max(built, key=lambda b: best.get(b[0], 0.0))

    def _probe(self, target, shape: StreamShape):
        kernel = self.plan.build_stream(target, shape).jit()
        shape_in = (self.plan.stream_parallel, shape.streams, self.plan.stream_steps(shape), shape.lanes)
        a = self._buffer._create_view(shape_in)  # its first elements: a shape's steps round down
        out = tvm.runtime.tensor(np.zeros((self.plan.stream_parallel, shape.streams, shape.lanes), np.float32),
                                 self.dev)
        return kernel, a, out

    def _gbs(self, probe, repeat: int, reads: int = 2) -> float:
        kernel, a, out = probe
        t = kernel.time_evaluator("main", self.dev, number=reads, repeat=repeat)(a, out)
        return math.prod(a.shape) * 4 / min(t.results) / 1e9

    def gbs(self, repeat: int = 1) -> float:
        """GB/s of the best of ``repeat`` samples of the chosen probe, each reading ``SAMPLE_BYTES`` (at least two
        reads of the buffer)."""
        return self._gbs(self._run, repeat, max(2, self.SAMPLE_BYTES // self.plan.stream_bytes))

    def describe(self) -> str:
        others = f", the fastest of {len(self.raced)} shapes" if len(self.raced) > 1 else ""
        pages = " on 2 MiB pages" if self.huge_pages else ""
        return f"stream_read: {self.chosen.describe()}{others}{pages}"


class CopyProbe:
    """The bandwidth probe of a prebuilt artifact's bench (``bench --artifact``), with TVM's runtime alone: a
    device-to-device copy of ``mib`` MiB, counting the bytes read and written. A copy also writes, so on a CPU it
    reads lower than ``stream_read``'s sum; on a GPU the two agree within a few percent. By default as much as
    the read probe reads (``PROBE_BYTES``): on a CPU it copied 1 GiB for the same GB/s, and filling it took 1-12 s
    of every bench of an artifact or a module file. ``read_bytes`` (a case's working set) sizes it as it sizes the
    read probe: source and destination together hold that much."""

    def __init__(self, dev, mib: int | None = None, read_bytes: float | None = None):
        if read_bytes is not None:
            mib = probe_bytes(read_bytes) >> 21
        mib = mib or PROBE_BYTES["cpu" if dev.type == "cpu" else "gpu"] >> 20
        n = (mib << 20) // 4
        self.dev, self.mib = dev, mib
        self._src = tvm.runtime.tensor(np.ones(n, np.float32), dev)
        self._dst = tvm.runtime.empty((n,), "float32", dev)
        self._src.copyto(self._dst)  # the first copy touches the pages: not a sample

    def gbs(self, repeat: int = 1, copies: int = 4) -> float:
        """GB/s of the best of ``repeat`` samples of ``copies`` copies each."""
        best = math.inf
        for _ in range(repeat):
            self.dev.sync()
            t0 = time.perf_counter()
            for _ in range(copies):
                self._src.copyto(self._dst)
            self.dev.sync()
            best = min(best, (time.perf_counter() - t0) / copies)
        return 2 * math.prod(self._src.shape) * 4 / best / 1e9


def measure_probes(target, rounds: int = 5, stream: StreamProbe | None = None,
                   read_bytes: float | None = None) -> Probes:
    """The FP32 FMA peak, the dot-product peaks the target has, and the read bandwidth of the target device, by
    our own TVM kernels (best of ``rounds``; of ``COMPUTE_REPEATS * rounds`` for the short compute probes); the
    read probe ``stream``, or one reading ``read_bytes`` (``ProbePlan.for_target``)."""
    dev = device_for(target)
    plan = stream.plan if stream is not None else ProbePlan.for_target(target, read_bytes=read_bytes)
    fma = plan.build_fma(target).jit()
    workers = plan.blocks * plan.threads
    a = tvm.runtime.tensor(np.full((workers, plan.lanes), 0.999, np.float32), dev)
    o = tvm.runtime.tensor(np.zeros((workers, plan.chains, plan.lanes), np.float32), dev)
    t_fma = fma.time_evaluator("main", dev, number=3, repeat=COMPUTE_REPEATS * rounds)(a, o)
    peak = 2.0 * workers * plan.iters * plan.chains * plan.lanes / min(t_fma.results) / 1e9
    stream = stream or StreamProbe(target, plan)
    bw = stream.gbs(rounds)
    unit = ("threads", "blocks") if plan.gpu else ("cores", "threads")
    peaks = {FMA: peak} | {kind: _dot_peak(plan, target, kind, dev, rounds) for kind in plan.dot_kinds(target)}
    what = {BF16_DOT: "the same chains of vdpbf16ps", INT8_DOT: "the same chains of integer dots",
            BF16_TILE: f"AMX blocks of {TILE_PROBE_STEPS} K steps in cache", INT8_TILE: "the same, int8"}
    dots = "".join(f"; {kind}_peak: {what[kind]}" for kind in peaks if kind != FMA)
    return Probes(peak, bw, f"fma_peak: {workers} {unit[0]} x {plan.chains} chains of {plan.lanes}-lane FP32 FMA, "
                            f"{plan.iters} iterations{dots}; {stream.describe()}, {plan.stream_parallel} {unit[1]} "
                            f"summing {plan.stream_bytes >> 20} MiB of FP32; best of {COMPUTE_REPEATS * rounds} "
                            f"(compute) and {rounds} (stream)", peaks)
