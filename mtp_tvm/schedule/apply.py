"""``ApplySchedules``: the pipeline's ``schedule`` phase. Every PrimFunc gets the named schedule (a hand rule
with its typed knobs, MetaSchedule records, dlight on GPUs, or nothing under ``none``); each applied schedule's
trace is kept (``traces``, replayable), and every kernel no schedule covers is named (``unscheduled``), so a
build never runs a kernel unscheduled without saying so.

Weight packing is a ``cache_read`` + ``transform_layout`` of the weight marked as a layout-rewrite preprocess:
``SplitLayoutRewritePreproc`` moves it into its own PrimFunc and ``LiftTransformParams`` into
``main_transform_params``, which the runtime calls once per weight set, not per call.
"""

from __future__ import annotations

from pathlib import Path

import tvm
from tvm import s_tir, tirx
from tvm.target import Target

from ..contract.presets import TOKEN_TILE
from ..passes.target import cpu_isa, is_gpu
from ..support.errors import UsageError
from .cpu_rules import block_operands, row_quantum
from .files import (
    DEFAULT,
    DLIGHT,
    NONE,
    TUNED,
    KernelSchedule,
    kernel_of,
    load_schedules,
    validate_schedule,
)
from .gpu_rules import apply_dlight
from .knobs import CpuGemm, GpuGemv
from .names import missing_names
from .patterns import match_kernel
from .rules import RULES
from .steps import fresh_copy
from .token_rows import block_columns, row_variants, rows_from_tokens, trim_token_rows
from .tuned import RECORDS_FILE, apply_database, open_database

SCHEDULED_ATTR = "tirx.is_scheduled"


def _require_names(ks: KernelSchedule, knobs, func: tirx.PrimFunc) -> None:
    """Refuse, in one line, a schedule naming a block or buffer its kernel does not have (``names.py``)."""
    problem = missing_names(knobs, func)
    if problem:
        raise UsageError(f"schedule {ks.name!r} ({ks.source}, rule {ks.rule}) on {ks.kernel}: {problem}")


@tvm.transform.module_pass(opt_level=0, name="ApplySchedules")
class ApplySchedules:
    """Schedule every PrimFunc of a module by the named schedule; ``traces[func] = str(sch.trace)``.

    A kernel's hand schedule is its file's (by kernel name), else on CPU the one its pattern derives
    (``patterns.py``: the Relax frontend's ``matmul`` gets its TIR twin's GEMM schedule, row-wise kernels and
    copies a generic one). ``unscheduled`` names the PrimFuncs the chosen schedule missed: neither a file nor a
    pattern covers them and, under ``tuned``, no record either.
    It is empty by design under ``none``, where lowering every kernel as written is what was asked for, and on
    GPUs, where a kernel without a hand schedule gets dlight's (or the build fails: it cannot lower unbound).
    """

    def __init__(self, target: Target, schedule: str = DEFAULT, tuned_dir=None):
        self.target = target
        self.schedule = validate_schedule(schedule, target)
        self.tuned_dir = tuned_dir  # the MetaSchedule database ``tuned`` reads
        self.untuned: dict[str, str] = {}  # under ``tuned``: kernel -> why no record applies (hand schedule used)
        if self.schedule == TUNED and not (Path(tuned_dir or "") / RECORDS_FILE).is_file():
            raise UsageError(f"no tuning database in {tuned_dir}; run `mtp-tvm tune` for this case first")
        self.database = open_database(Path(tuned_dir)) if self.schedule == TUNED else None  # read before the build
        self.traces: dict[str, str] = {}
        self.origins: dict[str, str] = {}  # PrimFunc -> where its schedule came from (file#name, dlight)
        self.packs_weights = False  # whether a schedule packed a weight (then the pipeline lifts the packing)
        self.unscheduled: list[str] = []  # kernels lowered as written: no schedule file covers them
        self.isa = None if is_gpu(target) else cpu_isa(target)

    def _gemm_rows(self, ks: KernelSchedule | None, func: tirx.PrimFunc) -> int | None:
        """The register rows q of a CPU GEMM hand schedule on ``func`` (only ceil(T / q) * q of its token rows
        need to run), or None: not a CPU GEMM schedule."""
        knobs = ks.knobs_for(self.isa.name) if ks is not None and self.isa is not None else None
        if not isinstance(knobs, CpuGemm):
            return None
        _require_names(ks, knobs, func)
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))
        name, io = next(iter(knobs.blocks.items()))
        block = sch.get_sblock(name)
        return row_quantum(knobs, self.isa, int(block_columns(sch.get(block))), block_operands(sch, block, io))

    def hand_rows(self, ks: KernelSchedule | None, func: tirx.PrimFunc) -> tirx.PrimFunc:
        """A kernel as its hand schedule ``ks`` is applied to it: a CPU GEMM's token rows (written
        ceil(T / 16) * 16) cut to the register rows, with its small-T variants (``token_rows.row_variants``); a
        GPU GEMV's 16-row tiles with a kernel of its own for each of its decode sizes."""
        knobs = ks.knobs_for(None) if ks is not None and self.isa is None else None
        if isinstance(knobs, GpuGemv):
            _require_names(ks, knobs, func)
            return row_variants(rows_from_tokens(func), TOKEN_TILE, knobs.row_variants)
        rows = self._gemm_rows(ks, func)
        return func if rows is None else row_variants(func, rows)

    def tuned_rows(self, name: str, func: tirx.PrimFunc) -> tirx.PrimFunc:
        """A kernel as ``tune`` tunes it and a ``tuned`` build replays its records on: a GEMM with a hand schedule
        file cut to the register rows of its default schedule (the general loop; no small-T variants)."""
        return trim_token_rows(func, self._gemm_rows(self._kernel_schedule(name, DEFAULT), func) or TOKEN_TILE)

    def hand_schedule(self, func_name: str, func: tirx.PrimFunc | None = None) -> KernelSchedule | None:
        """The default hand schedule of a kernel (what ``tune`` starts its hand space from): its file's, else
        on CPU the one its pattern derives from ``func`` (``patterns.py``), or None."""
        ks = self._kernel_schedule(func_name, DEFAULT)
        if ks is None and func is not None and self.isa is not None:
            found = match_kernel(func, self.target, self.isa)
            ks = found.schedule if found is not None else None
        return ks

    def _kernel_schedule(self, func_name: str, name: str) -> KernelSchedule | None:
        per_kernel = load_schedules(self.target).get(kernel_of(func_name), {})
        return per_kernel.get(name, per_kernel.get(DEFAULT))

    def _schedule(self, name: str, func: tirx.PrimFunc) -> tuple[s_tir.Schedule, str, str] | None:
        """``(schedule, its function name, origin)`` for one PrimFunc, or None to lower it as written (CPU).

        dlight goes first under ``dlight`` and for GPU kernels without a schedule file; a kernel dlight
        declines (the hand GEMMs: no dlight rule matches them) gets its default hand schedule."""
        ks = None if self.schedule in (NONE, DLIGHT) else self._kernel_schedule(name, self.schedule)
        func = self.hand_rows(ks, func)  # the schedule phase decides the rows a GEMM runs, not the IR builder
        if ks is None and self.isa is not None and self.schedule not in (NONE, DLIGHT):
            found = match_kernel(func, self.target, self.isa, self.schedule)  # by pattern, not by name
            if found is not None:
                ks, func = found.schedule, found.func  # (a GEMM's rows cut and its small-T variants made there)
        if is_gpu(self.target) and (self.schedule == DLIGHT or ks is None):
            # a hand GEMM as dlight's GEMV rules expect it: the real rows (T, not ceil(T / 16) * 16)
            trimmed = trim_token_rows(func, 1)
            hand_gemm = trimmed is not func and self._kernel_schedule(name, DEFAULT) is not None
            found = apply_dlight(trimmed, self.target, decode_gemm=hand_gemm)
            if found is not None:
                return found[0], "main", f"dlight {found[1]}"
            ks = self._kernel_schedule(name, DEFAULT)
            if ks is None:
                raise ValueError(f"no GPU schedule for {name}: dlight declined it and the package has no "
                                 "hand/cuda schedule for it")
            func = self.hand_rows(ks, func)
        if ks is None:
            self.unscheduled.append(name)
            return None
        knobs = ks.knobs_for(self.isa.name if self.isa else None)
        _require_names(ks, knobs, func)
        sch = s_tir.Schedule(tvm.IRModule({name: func}))
        sch.work_on(name)
        try:
            RULES[ks.rule].apply(sch, knobs, self.isa)
        except Exception as e:
            raise type(e)(f"schedule {ks.name!r} ({ks.source}, rule {ks.rule}) on {name}: {e}") from e
        self.packs_weights |= bool(getattr(knobs, "pack_weight", False))
        origin = f"{ks.source}#{ks.name}"
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
        """Every kernel with a MetaSchedule record that replays on it gets it (marked scheduled); the rest fall
        through to their hand schedule, and are listed in ``untuned`` with the reason so the caller can say so."""
        for gv, func in list(mod.functions_items()):
            if isinstance(func, tirx.PrimFunc):
                mod[gv] = self.tuned_rows(gv.name_hint, func)
        mod, applied = apply_database(mod, self.target, self.database, Path(self.tuned_dir))
        self.traces.update(applied.traces)
        self.origins.update(applied.origins)
        self.untuned = applied.untuned
        self.packs_weights |= applied.packs_weights
        return mod

    def trace_script(self) -> str:
        """Every trace as one Python file: ``apply_<func>(sch)`` per scheduled PrimFunc."""
        parts = [f'"""Schedule traces of one build (schedule {self.schedule!r}, target {self.target.kind.name}).\n\n'
                 'Each function replays on an ``s_tir.Schedule`` of the named PrimFunc (a CPU GEMM: as '
                 '``schedule.token_rows.row_variants`` gives it, with its small-T variants)."""\n'
                 "from tvm import s_tir\nfrom tvm.script import tirx as T\n"]
        if self.unscheduled:
            parts.append(f"# lowered as written (no schedule covers them): {', '.join(sorted(self.unscheduled))}\n")
        for name, trace in sorted(self.traces.items()):
            parts.append(f"\n# {name}: {self.origins[name]}\n"
                         + trace.replace("def apply_trace(", f"def apply_{name}(", 1))
        return "\n".join(parts)
