"""TODO docstring for schedule/apply"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import tvm
from tvm import s_tir, tirx
from tvm.target import Target

from ..schedule.cpu_rules import cpu_gemm, cpu_rows
from ..schedule.files import (
    DEFAULT,
    DLIGHT,
    NONE,
    TUNED,
    KernelSchedule,
    is_gpu,
    kernel_of,
    load_schedules,
    validate_schedule,
)
from ..schedule.gpu_rules import apply_dlight, gpu_flat, gpu_gemm, gpu_rows
from ..support.errors import UsageError

SCHEDULED_ATTR = "tirx.is_scheduled"


RULES: dict[str, Callable[[s_tir.Schedule, dict, Target], None]] = {
    "cpu_gemm": cpu_gemm,
    "cpu_rows": cpu_rows,
    "gpu_gemm": gpu_gemm,
    "gpu_rows": gpu_rows,
    "gpu_flat": gpu_flat,
}


def fresh_copy(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A deep copy of ``func`` (a JSON round trip), so scheduling it cannot touch the original."""
    return tvm.ir.load_json(tvm.ir.save_json(func))


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
            raise type(e)(f"schedule {ks.name!r} ({ks.source}, rule {ks.rule}) on {name}: {e}") from e
        self.packs_weights |= bool(ks.knobs.get("pack_weight"))
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
        """Every kernel with a MetaSchedule record gets it (marked scheduled); the rest fall through to their
        hand schedule, and are listed in ``untuned`` so the caller can say so."""
        from ..schedule.tuned import apply_database

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
