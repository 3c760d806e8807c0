"""The hand schedules as package data: ``mtp_tvm/schedule/hand/<target>/<kernel>.json`` declares, per kernel
and schedule name, a rule and its typed knobs (``knobs.py``). They ship inside the wheel and load with
``importlib.resources``, so an installed package builds the same binaries as a checkout; no schedule files at
all is an error, never a silent unscheduled build.

A file's ``default`` entry names the rule and every knob it sets; any other entry states only what differs
from ``default``, or, naming another rule, all of its own knobs. An entry may hold ``per_isa``: knobs that
replace the entry's own on targets of that ISA (``avx2``, ``avx512``, ``neon``, ``sse``:
``passes.target.CpuIsa.name``), where a formula is not enough.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from importlib import resources

from tvm.target import Target

from ..passes.target import is_gpu
from ..support.errors import UsageError
from .knobs import from_json
from .rules import RULES

HAND_SCHEDULES = "hand"  # the package-data folder of this package
NONE, DLIGHT, DEFAULT, TUNED = "none", "dlight", "default", "tuned"
ISAS = ("avx2", "avx512", "neon", "sse")
_DTYPE_SUFFIX = re.compile(r"_(bfloat16|float16|float32|int8|int32)$")


@dataclasses.dataclass(frozen=True)
class KernelSchedule:
    """One named schedule of one kernel, as declared in its file (``default`` merged in, knobs validated)."""

    kernel: str
    name: str
    rule: str
    knobs: object  # the rule's knob dataclass
    per_isa: dict[str, object]  # ISA name -> the knobs on that ISA
    source: str  # <target>/<file>.json, for messages and build origins

    def knobs_for(self, isa: str | None):
        """The knobs on a target of ``isa`` (None: a GPU, or no ISA-specific entry applies)."""
        return self.per_isa.get(isa, self.knobs)


def target_dir(target: Target) -> str:
    return "cuda" if is_gpu(target) else "llvm"


def kernel_of(func_name: str) -> str:
    """The schedule file stem of a PrimFunc: its name without a dtype suffix (``pad_rows_bfloat16``)."""
    return _DTYPE_SUFFIX.sub("", func_name)


def _entry(kernel: str, name: str, raw: dict, source: str) -> KernelSchedule:
    where = f"{source}#{name}"
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: expected an object, got {raw!r}")
    raw = dict(raw)
    rule, per_isa = raw.pop("rule", None), raw.pop("per_isa", {})
    if rule not in RULES:
        raise UsageError(f"{where}: key 'rule': {rule!r} is not one of {', '.join(RULES)}")
    if not isinstance(per_isa, dict) or set(per_isa) - set(ISAS):
        raise UsageError(f"{where}: key 'per_isa' takes an object keyed by {', '.join(ISAS)}, got {per_isa!r}")
    cls = RULES[rule].knobs
    return KernelSchedule(kernel, name, rule, from_json(cls, raw, where),
                          {isa: from_json(cls, {**raw, **extra}, f"{where} per_isa.{isa}")
                           for isa, extra in per_isa.items()}, source)


def parse_schedule_file(text: str, source: str, stem: str) -> dict[str, KernelSchedule]:
    """``{schedule name: KernelSchedule}`` of one file; every variant inherits ``default``'s keys."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{source}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("schedules"), dict) or DEFAULT not in data["schedules"]:
        raise UsageError(f"{source}: expected {{\"kernel\": ..., \"schedules\": {{\"default\": {{...}}, ...}}}}")
    unknown = sorted(set(data) - {"kernel", "doc", "schedules"})
    if unknown:
        raise UsageError(f"{source}: unknown key {unknown[0]!r} (known: kernel, doc, schedules)")
    kernel = data.get("kernel", stem)
    base = data["schedules"][DEFAULT]
    return {name: _entry(kernel, name, raw if name == DEFAULT or _own_rule(raw, base) else {**base, **raw}, source)
            for name, raw in data["schedules"].items()}


def _own_rule(raw, base: dict) -> bool:
    """Whether a variant names a rule other than ``default``'s: then it states all its knobs (another rule's knobs
    are another dataclass) and inherits nothing."""
    return isinstance(raw, dict) and "rule" in raw and raw["rule"] != base.get("rule")


@functools.cache
def _load(folder_name: str) -> dict[str, dict[str, KernelSchedule]]:
    folder = resources.files(__package__) / HAND_SCHEDULES / folder_name
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".json")), key=lambda f: f.name) \
        if folder.is_dir() else []
    if not files:
        raise UsageError(f"no hand schedules found for {folder_name} in the installed package ({folder}); "
                         "reinstall mtp_tvm")
    out = {}
    for f in files:
        per_kernel = parse_schedule_file(f.read_text(), f"{folder_name}/{f.name}", f.name.removesuffix(".json"))
        out[next(iter(per_kernel.values())).kernel] = per_kernel
    return out


def load_schedules(target: Target) -> dict[str, dict[str, KernelSchedule]]:
    """``{kernel: {schedule name: KernelSchedule}}`` from the package's ``hand/<target>/*.json``."""
    return _load(target_dir(target))


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
