"""MetaSchedule records at build time: where a case's tuning database lives, the static workload a kernel is
tuned as, and applying the records to a module whose token count stays symbolic. (The search that writes them
is ``tools/tune/``; the hand rules' design spaces are ``space.py``.)

One tuned binary serves every T. MetaSchedule measures static shapes only, so a kernel is tuned as its
*tile workload*: every symbolic row count bound to the padded token tile of 16, and a GEMM's ``tokens`` (it runs
ceil(tokens / q) * q rows, q its default schedule's register rows: ``ir/tir_kernels.py``) bound to 1, so the
GEMM is tuned on the q rows it runs per row block, as a tuned build runs it (without the small-T variants of
``token_rows.py``: records replay on the general row loop only). At build time each kernel's records,
best first, are replayed on the symbolic kernel itself; the first that replays is applied. A trace that splits
rows by constants (every hand-space trace) replays on any T; one that samples the static row loop's tiling
(MetaSchedule's generic multi-level tiling) is static in T and is skipped, and the kernel falls back to its hand
schedule when no record replays, with the reason stated (``RecordsApplied.untuned``).

A record runs only on the target it was tuned for: each carries its full target (kind, triple, CPU, attributes,
GPU arch), and one for another target is skipped and said, never replayed (a znver4 record's ``vdpbf16ps``
intrinsic made LLVM abort on haswell). A database is read only when its lines parse (a damaged one is an
error naming the file and line) and while no ``tune`` writes it (``support.folder_lock``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import tvm
from tvm import relax, s_tir, tirx
from tvm.target import Target

from ..contract.presets import TOKEN_TILE
from ..support.env import env_path
from ..support.errors import UsageError
from ..support.folder_lock import folder_lock
from .bf16_dot import register_dot_intrinsics
from .steps import PREPACK_ANNOTATION, fresh_copy

TUNED_ROOT_ENV = "MTP_TVM_TUNED_ROOT"  # overrides where tuning databases live
_CHECKOUT = Path(__file__).resolve().parents[2]  # the repository root, when running from a checkout
RECORDS_TRIED = 32  # records per kernel tried, best first, until one replays on the symbolic kernel
WORKLOADS_FILE, RECORDS_FILE = "database_workload.json", "database_tuning_record.json"  # MetaSchedule's names
ISA_KEYS = ("kind", "mtriple", "mcpu", "mattr", "mabi", "arch")  # what the code a record makes depends on


def tuned_root() -> Path:
    """Where tuning databases live: ``$MTP_TVM_TUNED_ROOT``; else ``schedules/tuned/`` in a checkout; else (an
    installed package) ``$XDG_CACHE_HOME/mtp_tvm/tuned`` (default ``~/.cache/mtp_tvm/tuned``)."""
    if env_path(TUNED_ROOT_ENV) is not None:
        return env_path(TUNED_ROOT_ENV)
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "schedules").is_dir():
        return _CHECKOUT / "schedules" / "tuned"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtp_tvm" / "tuned"


def tuned_dir(target: Target, case: str) -> Path:
    """``<tuned_root()>/<target kind>/<case>/``."""
    return tuned_root() / target.kind.name / case


def target_identity(target: Target) -> dict:
    """The parts of ``target`` that decide which instructions its code may use (``ISA_KEYS``, attributes in
    order); two targets with the same identity run each other's records."""
    spec = target.export()
    out = {}
    for k in ISA_KEYS:
        v = spec.get(k)
        v = v if v is None or isinstance(v, (str, int, float)) else sorted(str(x) for x in v)  # an ffi Array
        if v not in (None, "", []):
            out[k] = v
    return out


def describe_identity(identity: dict) -> str:
    """``llvm -mcpu=znver4 -mattr=+avx2,+fma`` (as TVM spells a target)."""
    return " ".join([identity.get("kind", "?")] + [
        f"-{k}={','.join(v) if isinstance(v, list) else v}" for k, v in identity.items() if k != "kind"])


def check_database(work_dir: Path) -> None:
    """Every line of the database's two files parses, and every record names a workload that exists: a damaged
    line (a killed append, an edit) is one error naming the file and line, not TVM's parser error later."""
    workloads = 0
    for name in (WORKLOADS_FILE, RECORDS_FILE):
        path = work_dir / name
        try:
            lines = path.read_bytes().split(b"\n") if path.exists() else []
        except OSError as e:
            raise UsageError(f"cannot read tuning database {path}: {e.strerror}") from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                if not (isinstance(entry, list) and len(entry) == 2):
                    raise ValueError("not a [key, value] pair")
                if name == RECORDS_FILE and not (isinstance(entry[0], int) and 0 <= entry[0] < workloads
                                                 and isinstance(entry[1], list) and len(entry[1]) >= 3):
                    raise ValueError(f"names workload {entry[0]!r}; the database has {workloads}")
            except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                why = f"{e.msg}, column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)
                raise UsageError(f"tuning database {path} line {number} is damaged ({why}); remove that line "
                                 "(or the folder) and tune again") from None
            workloads += name == WORKLOADS_FILE


def read_lock(work_dir: Path):
    """The shared lock a reader of ``work_dir``'s database holds: refused while a ``tune`` writes it."""
    return folder_lock(work_dir, False, f"tuning database {work_dir} is being written by a running `mtp-tvm tune`; "
                                        "wait for it to finish")


def tile_workload(func: tirx.PrimFunc, rows: int = TOKEN_TILE) -> tirx.PrimFunc:
    """``func`` with every symbolic buffer dim bound to ``rows`` and every scalar parameter (a GEMM's
    ``tokens``) to 1: the static shape it is tuned at. (Shapes that are expressions of a var, the pad kernels'
    ``ceil16(n)``, follow from the var.)"""
    bindings, known = {}, set()
    for param in func.params:
        ty = param.ty
        if not isinstance(ty, tirx.BufferType):
            bindings[param] = tirx.IntImm(str(ty.dtype), 1)
            continue
        if not any(isinstance(d, tirx.Var) and d not in known for d in ty.shape):
            continue
        dims = [tirx.IntImm(str(d.ty), rows) if isinstance(d, tirx.Var) else d for d in ty.shape]
        bindings[param] = tirx.decl_buffer(dims, ty.dtype, name=param.name, elem_offset=ty.elem_offset)
        known.update(d for d in ty.shape if isinstance(d, tirx.Var))
    return func.specialize(bindings) if bindings else func


def called_kernels(mod: tvm.IRModule) -> list[tvm.ir.GlobalVar]:
    """The PrimFuncs ``main`` calls (``call_tir``), in call order, each once."""
    call_tir = tvm.ir.Op.get("relax.call_tir")
    called = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            call = binding.value
            if isinstance(call, relax.Call) and call.op.same_as(call_tir) and call.args[0] not in called:
                called.append(call.args[0])
    return called


def workload(func: tirx.PrimFunc) -> tvm.IRModule:
    """The database key MetaSchedule stores for a tuned PrimFunc (its own ``_normalize_mod``)."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    return _normalize_mod(func)


@dataclasses.dataclass
class RecordsApplied:
    """What ``apply_database`` did: per kernel the applied trace and where it came from, and the kernels left to
    their hand schedule with the reason."""

    traces: dict[str, str] = dataclasses.field(default_factory=dict)
    origins: dict[str, str] = dataclasses.field(default_factory=dict)
    untuned: dict[str, str] = dataclasses.field(default_factory=dict)  # kernel -> why no record applies
    packs_weights: bool = False  # an applied trace packs a weight (a layout-rewrite preprocess to lift)


def _replay(func: tirx.PrimFunc, trace: s_tir.Trace) -> s_tir.Schedule | None:
    """``trace`` replayed on ``func`` (any T), or None where it does not apply (it tiles a static row loop)."""
    sch = s_tir.Schedule(fresh_copy(workload(func)), error_render_level="none")  # a failed replay leaves func intact
    try:
        trace.apply_to_schedule(sch, remove_postproc=False)
    except (RuntimeError, ValueError, TypeError):  # TVM's errors (ScheduleError is a RuntimeError)
        return None
    return sch


def records_text(work_dir: Path) -> str:
    """The tuning records of ``work_dir`` as text ("" where none): which intrinsics their traces name."""
    path = work_dir / RECORDS_FILE
    return path.read_text(errors="replace") if path.exists() else ""


def open_database(work_dir: Path):
    """``work_dir``'s MetaSchedule database, read whole (checked, under the read lock) before any build."""
    from tvm.s_tir import meta_schedule as ms

    with read_lock(work_dir):
        check_database(work_dir)
        register_dot_intrinsics(records_text(work_dir))  # the database parses every record's trace as it loads
        return ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)


def apply_database(mod: tvm.IRModule, target: Target, database, work_dir: Path) -> tuple[tvm.IRModule,
                                                                                        RecordsApplied]:
    """Every PrimFunc of ``mod`` (symbolic T) whose tile workload has a record for ``target`` in ``database``
    (``open_database(work_dir)``) that replays on it gets that record's schedule (marked scheduled); the rest are
    named in ``untuned`` with the reason."""
    here = target_identity(target)
    out = RecordsApplied()
    for gv, func in list(mod.functions_items()):
        if not isinstance(func, tirx.PrimFunc):
            continue
        name, key = gv.name_hint, workload(tile_workload(func))
        if not database.has_workload(key):
            out.untuned[name] = "no record"
            continue
        every = database.get_top_k(database.commit_workload(key), len(database))
        records = [r for r in every if target_identity(r.target) == here][:RECORDS_TRIED]
        if not records:
            other = describe_identity(target_identity(every[0].target))
            out.untuned[name] = (f"its {len(every)} record(s) were tuned for {other}, not for "
                                 f"{describe_identity(here)}: not replayed")
            continue
        for rank, rec in enumerate(records):
            sch = _replay(func, rec.trace)
            if sch is None:
                continue
            ms_time = 1e3 * min(float(s) for s in rec.run_secs) if rec.run_secs else float("nan")
            skipped = f"; {rank} faster record(s) are static in T" if rank else ""
            mod[gv] = sch.mod["main"].without_attr("global_symbol").with_attr("tirx.is_scheduled", True)
            out.traces[name] = str(sch.trace)
            out.origins[name] = f"tuned:{work_dir} (record {rank + 1}/{len(records)}, {ms_time:.4g} ms{skipped})"
            out.packs_weights |= PREPACK_ANNOTATION in out.traces[name]
            break
        else:
            out.untuned[name] = (f"none of its {len(records)} best records replays on a symbolic T (they tile the "
                                 "static 16-row loop)")
    return mod, out
