"""Schedules as data: ``schedules/<target>/<kernel>.json`` declares, per kernel and per schedule name, a rule
and its knobs (token tile, K chunk, column tile, vector width, register rows, parallel axis, unroll,
weight packing); this module is the one applier that turns them into ``s_tir.Schedule`` primitives.

It runs as the pipeline's ``schedule`` phase (``ApplySchedules``, a module pass). ``--schedule NAME`` picks:

- ``default`` (or any other name a schedule file defines): the hand schedules; a kernel with no file for the
  target lowers plainly on CPU and gets dlight's rules on GPU;
- ``none``: plain lowering (CPU only: GPU kernels need thread bindings);
- ``dlight``: TVM's dlight GPU rules for every kernel (CUDA only).

Every scheduled PrimFunc's trace (``str(sch.trace)``, a replayable ``apply_trace``) is kept in ``traces``.
Weight packing is a ``cache_read`` + ``transform_layout`` of the weight marked as a layout-rewrite preprocess:
``SplitLayoutRewritePreproc`` moves it into its own PrimFunc and ``LiftTransformParams`` into
``main_transform_params``, which ``CompiledCase`` runs once per weight, not per call.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Callable

import tvm
from tvm import s_tir, tirx
from tvm.target import Target
from tvm.tirx import IndexMap

from .config import TOKEN_TILE
from .errors import UsageError

SCHEDULES_DIR = Path(__file__).resolve().parent.parent / "schedules"
NONE, DLIGHT, DEFAULT, TUNED = "none", "dlight", "default", "tuned"
BUILTIN_SCHEDULES = {NONE: "plain lowering (CPU)", DLIGHT: "TVM's dlight GPU rules (CUDA)",
                     TUNED: "MetaSchedule records (mtp-tvm tune), hand schedule where a kernel has none"}
SCHEDULED_ATTR = "tirx.is_scheduled"
PREPACK_ANNOTATION = "meta_schedule.layout_rewrite_preproc"
_DTYPE_SUFFIX = re.compile(r"_(bfloat16|float16|float32|int8|int32)$")


@dataclasses.dataclass(frozen=True)
class KernelSchedule:
    """One named schedule of one kernel, as declared in its file."""

    kernel: str
    name: str
    rule: str
    knobs: dict
    source: Path


def target_dir(target: Target) -> str:
    return "cuda" if target.kind.name == "cuda" else "llvm"


def is_gpu(target: Target) -> bool:
    return target.kind.name == "cuda"


def kernel_of(func_name: str) -> str:
    """The schedule file stem of a PrimFunc: its name without a dtype suffix (``pad_rows_bfloat16``)."""
    return _DTYPE_SUFFIX.sub("", func_name)


def load_schedules(target: Target, root: Path = SCHEDULES_DIR) -> dict[str, dict[str, KernelSchedule]]:
    """``{kernel: {schedule name: KernelSchedule}}`` from ``root/<target>/*.json``."""
    out: dict[str, dict[str, KernelSchedule]] = {}
    for path in sorted((root / target_dir(target)).glob("*.json")):
        data = json.loads(path.read_text())
        kernel = data.get("kernel", path.stem)
        out[kernel] = {name: KernelSchedule(kernel, name, spec["rule"], {k: v for k, v in spec.items() if k != "rule"},
                                            path)
                       for name, spec in data["schedules"].items()}
    return out


def schedule_names(target: Target) -> list[str]:
    """The names ``--schedule`` accepts for ``target``."""
    files = {n for per_kernel in load_schedules(target).values() for n in per_kernel}
    builtin = [DLIGHT] if is_gpu(target) else [NONE]
    return sorted(files | {DEFAULT}) + builtin + [TUNED]


def validate_schedule(name: str, target: Target) -> str:
    names = schedule_names(target)
    if name not in names:
        raise UsageError(f"unknown schedule {name!r} for target {target.kind.name}; choose one of {', '.join(names)}")
    return name


# ---- helpers ---------------------------------------------------------------------------------------------

def _read_index(sch: s_tir.Schedule, block, buffer_name: str) -> int:
    for i, region in enumerate(sch.get(block).reads):
        if region.source.name == buffer_name:
            return i
    raise ValueError(f"block {sch.get(block).name_hint} does not read a buffer named {buffer_name!r}")


def _column_blocked(tile: int) -> IndexMap:
    """``[N, K] -> [N / tile, K, tile]``: one contiguous ``tile``-wide column strip per K step."""
    return IndexMap.from_func(lambda n, k: (n // tile, k, n % tile), index_dtype="int32")


def _column_tile(sch: s_tir.Schedule, columns, tile: int) -> int:
    """The column tile actually used: the largest divisor of the column count that divides ``tile`` (a vocab
    shard of 1000 gets 8), so strips and the packed layout never need padding or bounds checks."""
    return math.gcd(int(sch.get(columns).extent), tile)


def _pack_weight(sch: s_tir.Schedule, block, weight: str, tile: int) -> None:
    """Column-block a weight in a preprocess block that the pipeline lifts out of the per-call path."""
    packed = sch.cache_read(block, _read_index(sch, block, weight), "global")
    sch.transform_layout(packed, ("write", 0), _column_blocked(tile))
    sch.annotate(packed, PREPACK_ANNOTATION, 1)  # 1, not True: the trace prints booleans as 1


def _vectorized_rows(sch: s_tir.Schedule, block, vector_width: int, parallel: bool = True) -> None:
    """Rows in parallel, the innermost (column) loop split by the vector width and vectorised."""
    loops = sch.get_loops(block)
    if len(loops) > 1:
        _, inner = sch.split(loops[-1], [None, vector_width])
        sch.vectorize(inner)
    if parallel:
        sch.parallel(loops[0])


# ---- CPU rules -------------------------------------------------------------------------------------------

def cpu_gemm(sch: s_tir.Schedule, knobs: dict, _target: Target) -> None:
    """Register-blocked GEMM ``Y[t, n] += A[t, k] * W[n, k]`` on ``(token tile, n, k chunk, k)`` loops.

    Knobs: ``column_tile``, ``register_rows``, ``k_chunk``, ``token_tile`` (must be 16), ``parallel``
    (``columns`` or ``tokens``), ``unroll`` (the register rows), ``accumulator`` (cache scope of the register
    tile), ``pack_weight``, ``vector_width`` (of copies and epilogues), ``blocks`` (block -> its activation
    and weight buffer, ``widen``), ``epilogue`` (row-wise blocks after the GEMMs).

    Per column strip of ``column_tile`` (= one vector of FP32 lanes) and ``register_rows`` token rows, the
    accumulator tile stays in registers; K streams in ``k_chunk`` order; the weight strip is column-blocked
    (packed once) so each K step is one contiguous vector load, widened in the inner loop; activations
    listed in ``widen`` are copied once per call into a kernel-local buffer (BF16 ones become FP32 there).
    """
    rows, chunk = knobs["register_rows"], knobs["k_chunk"]
    if knobs.get("token_tile", TOKEN_TILE) != TOKEN_TILE:
        raise ValueError(f"token_tile must be {TOKEN_TILE}: the kernels are written on that tile")
    for name, io in knobs["blocks"].items():
        b = sch.get_sblock(name)
        tt, ti, n, kc, ki = sch.get_loops(b)
        tile = _column_tile(sch, n, knobs["column_tile"])
        kc, ki = sch.split(sch.fuse(kc, ki), [None, chunk])
        no, ni = sch.split(n, [None, tile])
        to, tr = sch.split(ti, [None, rows])
        sch.reorder(no, tt, to, kc, ki, tr, ni)
        if knobs.get("pack_weight"):
            _pack_weight(sch, b, io["weight"], tile)
        if io.get("widen"):
            widened = sch.cache_read(b, _read_index(sch, b, io["activation"]), "global")
            _vectorized_rows(sch, widened, knobs["vector_width"])
        acc = sch.cache_write(b, 0, knobs.get("accumulator", "global"))
        sch.reverse_compute_at(acc, to)
        if knobs["unroll"]:
            sch.unroll(tr)
        sch.vectorize(ni)
        acc_loops = sch.get_loops(acc)
        sch.unroll(acc_loops[-2])
        sch.vectorize(acc_loops[-1])
        sch.parallel({"columns": no, "tokens": tt}[knobs["parallel"]])
        sch.decompose_reduction(b, kc)
    for name in knobs.get("epilogue", []):
        _vectorized_rows(sch, sch.get_sblock(name), knobs["vector_width"])


def cpu_rows(sch: s_tir.Schedule, knobs: dict, _target: Target) -> None:
    """Row-wise kernels (norms, quantiser, pad/unpad): rows in parallel (``parallel``: ``rows`` or ``none``),
    columns vectorised (``vector_width``); per-row producers (``compute_at_row``, consumer first) move under the
    row loop so a row is one pass in cache; ``parallel_blocks`` get their row loop parallelised too."""
    b = sch.get_sblock(knobs["row_block"])
    for producer in knobs.get("compute_at_row", []):
        sch.compute_at(sch.get_sblock(producer), sch.get_loops(b)[0])
    _vectorized_rows(sch, b, knobs["vector_width"], parallel=knobs["parallel"] == "rows")
    for other in knobs.get("parallel_blocks", []):
        sch.parallel(sch.get_loops(sch.get_sblock(other))[0])


# ---- GPU rules -------------------------------------------------------------------------------------------

def _bind_flat(sch: s_tir.Schedule, block, threads: int) -> None:
    """Every loop of ``block`` fused, then split over blocks x ``threads`` (elementwise kernels, copies)."""
    bx, tx = sch.split(sch.fuse(*sch.get_loops(block)), [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def _loops_below(sch: s_tir.Schedule, block, anchor, extents: list[int]) -> list:
    """The loops of ``block`` under ``anchor``, one per expected extent; the unit loops ``compute_at`` drops
    (a K of one step, a column tile of 1) come back via ``add_unit_loop``, so callers unpack loops by role."""
    loops = sch.get_loops(block)
    present = iter(loops[[sch.get(lp).same_as(sch.get(anchor)) for lp in loops].index(True) + 1:])
    out = [None if ext == 1 else next(present) for ext in extents]
    for i, lp in enumerate(out):
        if lp is None:
            below = next((x for x in out[i + 1:] if x is not None), block)
            out[i] = sch.add_unit_loop(below)
    return out


def gpu_gemm(sch: s_tir.Schedule, knobs: dict, _target: Target) -> None:
    """Skinny GEMM ``Y[t, n] = sum_k A[t, k] W[n, k]`` (16 token rows, long K): a thread block per token tile x
    ``column_tile`` columns; ``threadIdx.y`` = the token row, ``threadIdx.x`` = ``k_threads`` lanes splitting K.
    Each lane keeps ``column_tile`` partial sums in registers (rfactor), loads ``vector_width`` K elements of its
    activation row and of each weight row per step (16-byte loads, coalesced along K across the warp), widens
    them in the inner loop, and the lanes of a warp finish with a shuffle reduction. With ``stage_weight`` =
    ``shared``, each K chunk of the weight tile is staged once in shared memory for the 16 row-warps.

    Knobs: ``column_tile``, ``k_threads``, ``vector_width``, ``stage_weight``, ``blocks`` (block -> activation,
    weight), ``epilogue`` (elementwise blocks after the GEMMs), ``epilogue_threads``.
    """
    lanes, vec = knobs["k_threads"], knobs["vector_width"]
    for name, io in knobs["blocks"].items():
        b = sch.get_sblock(name)
        tt, ti, n, kc, ki = sch.get_loops(b)
        cols = _column_tile(sch, n, knobs["column_tile"])
        k = sch.fuse(kc, ki)
        k_steps = -(-int(sch.get(k).extent) // (lanes * vec))
        ko, kt, kv = sch.split(k, [None, lanes, vec])
        no, nc = sch.split(n, [None, cols])
        sch.reorder(tt, no, ti, ko, kt, kv, nc)
        rf = sch.rfactor(kt, factor_axis=0)
        tt, no, ti, kt, nc = sch.get_loops(b)
        sch.reorder(nc, kt)
        sch.bind(tt, "blockIdx.y")
        sch.bind(no, "blockIdx.x")
        sch.bind(ti, "threadIdx.y")
        sch.bind(kt, "threadIdx.x")  # the final sum over lanes: a warp shuffle reduction
        sch.set_scope(rf, 0, "local")
        sch.compute_at(rf, ti)
        kt, nc, ko, kv = _loops_below(sch, rf, ti, [lanes, cols, k_steps, vec])
        sch.bind(kt, "threadIdx.x")
        sch.reorder(ko, nc, kv)
        if knobs.get("stage_weight") == "shared":
            ws = sch.cache_read(rf, _read_index(sch, rf, io["weight"]), "shared")
            sch.compute_at(ws, ko, preserve_unit_loops=True)
            _, ty, tx, v = sch.split(sch.fuse(*sch.get_loops(ws)[-2:]), [None, TOKEN_TILE, lanes, vec // 2])
            sch.bind(ty, "threadIdx.y")
            sch.bind(tx, "threadIdx.x")
            sch.vectorize(v)
        weight = io["weight"] + ("_shared" if knobs.get("stage_weight") == "shared" else "")
        wl = sch.cache_read(rf, _read_index(sch, rf, weight), "local")
        sch.compute_at(wl, nc)
        sch.vectorize(sch.get_loops(wl)[-1])
        xl = sch.cache_read(rf, _read_index(sch, rf, io["activation"]), "local")
        sch.compute_at(xl, ko, preserve_unit_loops=True)
        sch.vectorize(sch.get_loops(xl)[-1])
        sch.unroll(kv)
        sch.decompose_reduction(rf, ko)
    for name in knobs.get("epilogue", []):
        _bind_flat(sch, sch.get_sblock(name), knobs["epilogue_threads"])


def _cross_thread_reduce(sch: s_tir.Schedule, block, threads: int) -> None:
    """Split ``block``'s innermost (reduction) loop over ``threads`` lanes bound to ``threadIdx.x``: each lane
    reduces its strided part, then TVM's cross-thread reduction (warp shuffles, shared memory across warps)."""
    _, lane = sch.split(sch.get_loops(block)[-1], [None, threads])
    sch.bind(lane, "threadIdx.x")


def gpu_rows(sch: s_tir.Schedule, knobs: dict, _target: Target) -> None:
    """Row-wise kernels: a thread block per row, ``threads`` lanes over its columns.

    Knobs: ``row_block`` (the row's final, elementwise block), ``compute_at_row`` (producers moved under the
    row, consumer first; their buffers become per-thread registers, every lane holding the row's values),
    ``cross_thread`` (those producers whose reduction the lanes share), ``own_kernel`` (blocks that cannot
    move, e.g. ones writing an output: each its own launch, reductions across lanes, the rest flat), ``threads``.
    """
    threads = knobs["threads"]
    b = sch.get_sblock(knobs["row_block"])
    for name in knobs.get("compute_at_row", []):
        producer = sch.get_sblock(name)
        sch.compute_at(producer, sch.get_loops(b)[0])
        sch.set_scope(producer, 0, "local")
        if name in knobs.get("cross_thread", []):
            _cross_thread_reduce(sch, producer, threads)
    row, col = sch.get_loops(b)[0], sch.get_loops(b)[-1]
    _, lane = sch.split(col, [None, threads])
    sch.bind(row, "blockIdx.x")
    sch.bind(lane, "threadIdx.x")
    for name in knobs.get("own_kernel", []):
        blk = sch.get_sblock(name)
        loops = sch.get_loops(blk)
        if name in knobs.get("cross_thread", []):
            sch.bind(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0], "blockIdx.x")
            _cross_thread_reduce(sch, blk, threads)
        else:
            _bind_flat(sch, blk, threads)


def gpu_flat(sch: s_tir.Schedule, knobs: dict, _target: Target) -> None:
    """Elementwise kernels (pad/unpad copies): all loops fused over blocks x ``threads``."""
    for name in knobs["blocks"]:
        _bind_flat(sch, sch.get_sblock(name), knobs["threads"])


RULES: dict[str, Callable[[s_tir.Schedule, dict, Target], None]] = {
    "cpu_gemm": cpu_gemm,
    "cpu_rows": cpu_rows,
    "gpu_gemm": gpu_gemm,
    "gpu_rows": gpu_rows,
    "gpu_flat": gpu_flat,
}


# ---- dlight ----------------------------------------------------------------------------------------------

def dlight_rules() -> list:
    from tvm.s_tir import dlight as dl

    return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


def apply_dlight(func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
    """The first dlight rule that schedules ``func`` (as ``ApplyDefaultSchedule`` does), or None."""
    for rule in dlight_rules():
        try:
            space = rule.apply(func, target, False)
        except Exception:  # a rule that crashes on a kernel is one that does not apply to it
            continue
        if space is None:
            continue
        return space[0] if isinstance(space, list) else space
    return None


def fresh_copy(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A deep copy of ``func`` (a JSON round trip), so scheduling it cannot touch the original."""
    return tvm.ir.load_json(tvm.ir.save_json(func))


# ---- the pass --------------------------------------------------------------------------------------------

@tvm.transform.module_pass(opt_level=0, name="ApplySchedules")
class ApplySchedules:
    """Schedule every PrimFunc of a module by the named schedule; ``traces[func] = str(sch.trace)``."""

    def __init__(self, target: Target, schedule: str = DEFAULT, tuned_dir=None):
        self.target = target
        self.schedule = validate_schedule(schedule, target)
        self.tuned_dir = tuned_dir  # the MetaSchedule database ``tuned`` reads
        self.untuned: list[str] = []  # under ``tuned``: kernels without a record (given their hand schedule)
        if self.schedule == TUNED and not (Path(tuned_dir or "") / "database_tuning_record.json").is_file():
            raise UsageError(f"no tuning database in {tuned_dir}; run `mtp-tvm tune` for this case first")
        self.traces: dict[str, str] = {}
        self.origins: dict[str, str] = {}  # PrimFunc -> where its schedule came from (file#name, dlight)
        self.packs_weights = False  # whether a schedule packed a weight (then the pipeline lifts the packing)

    def _kernel_schedule(self, func_name: str, name: str) -> KernelSchedule | None:
        per_kernel = load_schedules(self.target).get(kernel_of(func_name), {})
        return per_kernel.get(name, per_kernel.get(DEFAULT))

    def _schedule(self, name: str, func: tirx.PrimFunc) -> tuple[s_tir.Schedule, str, str] | None:
        """``(schedule, its function name, origin)`` for one PrimFunc, or None to lower it as written (CPU).

        dlight goes first under ``dlight`` and for GPU kernels without a schedule file; a kernel dlight
        declines (the hand GEMMs: no dlight rule matches them) gets its default hand schedule."""
        ks = None if self.schedule in (NONE, DLIGHT) else self._kernel_schedule(name, self.schedule)
        if is_gpu(self.target) and (self.schedule == DLIGHT or ks is None):
            sch = apply_dlight(func, self.target)
            if sch is not None:
                return sch, "main", "dlight"
            ks = self._kernel_schedule(name, DEFAULT)
            if ks is None:
                raise ValueError(f"no GPU schedule for {name}: dlight declined it and schedules/cuda has none")
        if ks is None:
            return None
        sch = s_tir.Schedule(tvm.IRModule({name: func}))
        sch.work_on(name)
        try:
            RULES[ks.rule](sch, ks.knobs, self.target)
        except Exception as e:
            raise type(e)(f"schedule {ks.name!r} ({ks.source.name}, rule {ks.rule}) on {name}: {e}") from e
        self.packs_weights |= bool(ks.knobs.get("pack_weight"))
        origin = f"{ks.source.parent.name}/{ks.source.name}#{ks.name}"
        return sch, name, origin if self.schedule != DLIGHT else origin + " (dlight declined)"

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if self.schedule == NONE:
            return mod
        if self.schedule == TUNED:
            mod = self._apply_records(mod)
        updated = {}
        for gv, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc) or func.attrs.get(SCHEDULED_ATTR, 0) == 1:
                continue
            name = gv.name_hint
            # s_tir.Schedule edits the IR in place and the kernels are shared (lru_cache): schedule a copy
            scheduled = self._schedule(name, fresh_copy(func))
            if scheduled is None:
                continue
            sch, func_name, origin = scheduled
            updated[gv] = sch.mod[func_name].with_attr(SCHEDULED_ATTR, True)
            self.traces[name] = str(sch.trace)
            self.origins[name] = origin
        for gv, func in updated.items():
            mod[gv] = func
        return mod

    def _apply_records(self, mod: tvm.IRModule) -> tvm.IRModule:
        """Every kernel with a MetaSchedule record gets it (marked scheduled); the rest fall through to their
        hand schedule, and are listed in ``untuned`` so the caller can say so."""
        from .tune import apply_database

        mod, applied, self.untuned = apply_database(mod, self.target, self.tuned_dir)
        for name in applied:
            self.traces[name], self.origins[name] = applied[name], f"tuned:{self.tuned_dir}"
        return mod

    def trace_script(self) -> str:
        """Every trace as one Python file: ``apply_<func>(sch)`` per scheduled PrimFunc."""
        parts = [f'"""Schedule traces of one build (schedule {self.schedule!r}, target {self.target.kind.name}).\n\n'
                 'Each function replays on an ``s_tir.Schedule`` of the named PrimFunc."""\n'
                 "from tvm import s_tir\nfrom tvm.script import tirx as T\n"]
        for name, trace in sorted(self.traces.items()):
            parts.append(f"\n# {name}: {self.origins[name]}\n"
                         + trace.replace("def apply_trace(", f"def apply_{name}(", 1))
        return "\n".join(parts)
