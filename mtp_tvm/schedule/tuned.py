"""MetaSchedule records at build time: where a case's tuning database lives, and applying its best records to a
module. (The search that writes them is ``tools/tune.py``.)"""

from __future__ import annotations

import os
from pathlib import Path

import tvm
from tvm import tirx
from tvm.target import Target

TUNED_ROOT_ENV = "MTP_TVM_TUNED_ROOT"  # overrides where tuning databases live
_CHECKOUT = Path(__file__).resolve().parents[2]  # the repository root, when running from a checkout


def tuned_root() -> Path:
    """Where tuning databases live: ``$MTP_TVM_TUNED_ROOT``; else ``schedules/tuned/`` in a checkout; else (an
    installed package) ``$XDG_CACHE_HOME/mtp_tvm/tuned`` (default ``~/.cache/mtp_tvm/tuned``)."""
    if os.environ.get(TUNED_ROOT_ENV):
        return Path(os.environ[TUNED_ROOT_ENV])
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "schedules").is_dir():
        return _CHECKOUT / "schedules" / "tuned"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtp_tvm" / "tuned"


def workload(func: tirx.PrimFunc) -> tvm.IRModule:
    """The database key MetaSchedule stores for a tuned PrimFunc (its own ``_normalize_mod``)."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    return _normalize_mod(func)


def tuned_dir(target: Target, case: str) -> Path:
    """``<tuned_root()>/<target kind>/<case>/``."""
    return tuned_root() / target.kind.name / case


def apply_database(mod: tvm.IRModule, target: Target, work_dir: str | os.PathLike) -> tuple[tvm.IRModule, dict, list]:
    """Replace every PrimFunc of a static-shape module that has a record in ``work_dir`` by its best schedule.

    Returns (module, {name: trace of the applied record}, names without a record) so callers can fall back, and
    say so.
    """
    from tvm.s_tir import meta_schedule as ms

    from .specialize import specialize_to_call_sites

    database = ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)
    mod = specialize_to_call_sites(mod)
    applied, missing = {}, []
    for gv, func in list(mod.functions_items()):
        if not isinstance(func, tirx.PrimFunc):
            continue
        sch = ms.tir_integration.compile_tir(database, func, target)
        if sch is None:
            missing.append(gv.name_hint)
            continue
        mod[gv] = sch.mod["main"].without_attr("global_symbol").with_attr("tirx.is_scheduled", True)
        applied[gv.name_hint] = str(sch.trace)
    return mod, applied, missing
