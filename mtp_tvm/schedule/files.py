"""The hand schedules as package data: ``mtp_tvm/schedule/hand/<target>/<kernel>.json`` declares, per kernel
and schedule name, a rule and its knobs. They ship inside the wheel and load with ``importlib.resources``, so an
installed package builds the same binaries as a checkout; no schedule files at all is an error, never a silent
unscheduled build."""

from __future__ import annotations

import dataclasses
import json
import re
from importlib import resources

from tvm.target import Target

from ..support.errors import UsageError

HAND_SCHEDULES = "hand"  # the package-data folder of this package


NONE, DLIGHT, DEFAULT, TUNED = "none", "dlight", "default", "tuned"


BUILTIN_SCHEDULES = {NONE: "plain lowering (CPU)", DLIGHT: "TVM's dlight GPU rules (CUDA)",
                     TUNED: "MetaSchedule records (mtp-tvm tune), hand schedule where a kernel has none"}


_DTYPE_SUFFIX = re.compile(r"_(bfloat16|float16|float32|int8|int32)$")


@dataclasses.dataclass(frozen=True)
class KernelSchedule:
    """One named schedule of one kernel, as declared in its file."""

    kernel: str
    name: str
    rule: str
    knobs: dict
    source: str  # <target>/<file>.json, for messages and build origins


def target_dir(target: Target) -> str:
    return "cuda" if target.kind.name == "cuda" else "llvm"


def is_gpu(target: Target) -> bool:
    return target.kind.name == "cuda"


def kernel_of(func_name: str) -> str:
    """The schedule file stem of a PrimFunc: its name without a dtype suffix (``pad_rows_bfloat16``)."""
    return _DTYPE_SUFFIX.sub("", func_name)


def load_schedules(target: Target) -> dict[str, dict[str, KernelSchedule]]:
    """``{kernel: {schedule name: KernelSchedule}}`` from the package's ``hand/<target>/*.json``."""
    folder = resources.files(__package__) / HAND_SCHEDULES / target_dir(target)
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".json")), key=lambda f: f.name) \
        if folder.is_dir() else []
    if not files:
        raise UsageError(f"no hand schedules found for {target_dir(target)} in the installed package ({folder}); "
                         "reinstall mtp_tvm")
    out: dict[str, dict[str, KernelSchedule]] = {}
    for f in files:
        data = json.loads(f.read_text())
        kernel = data.get("kernel", f.name.removesuffix(".json"))
        source = f"{target_dir(target)}/{f.name}"
        out[kernel] = {name: KernelSchedule(kernel, name, spec["rule"], {k: v for k, v in spec.items() if k != "rule"},
                                            source)
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
