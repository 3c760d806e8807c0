"""Which passes run: ``--disable-pass NAME`` and LLVM's ``--bisect-limit N`` (``-opt-bisect-limit``).

Passes are numbered in execution order, the numbers of the dump files. With a limit N every pass numbered <= N
runs; after N only required passes do, and every *optional* one is skipped: a pass of
``pipeline.OPTIONAL_PASS_GROUPS``, any pass of a phase optional on this target, or a user's extra pass. Such
an optional *unit* is decided at its first pass, so FuseTIR follows FuseOps and a phase goes as a whole.
"""

from __future__ import annotations

import dataclasses

from tvm.target import Target

from ..passes.pipeline import OPTIONAL_PASS_GROUPS, RELAX_PHASES

SKIP_DISABLED = "disabled"
SKIP_LIMIT = "bisect-limit"


@dataclasses.dataclass
class PassGate:
    """Decides, pass by pass, whether a pass runs; remembers which pass opened each optional unit."""

    disabled: frozenset[str] = frozenset()
    limit: int | None = None
    optional_phases: frozenset[str] = frozenset()
    extra_names: frozenset[str] = frozenset()
    _leaders: dict = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def for_target(cls, target: Target, disabled=(), limit: int | None = None, extra_names=()) -> PassGate:
        phases = frozenset(ph.name for ph in RELAX_PHASES if target.kind.name in ph.optional_on)
        return cls(frozenset(disabled), limit, phases, frozenset(extra_names))

    @property
    def active(self) -> bool:
        return bool(self.disabled) or self.limit is not None

    def decide(self, index: int, phase: str, name: str) -> tuple[str | None, int | None]:
        """For pass ``index`` (call once per pass, in order): why it must not run (``disabled``,
        ``bisect-limit``; None when it runs) and the number of the pass that opened its optional unit (None for
        a required pass). A unit is skipped as a whole iff its opening pass is numbered above the limit."""
        key, opens = self._unit(index, phase, name)
        if key is not None and opens:
            self._leaders[key] = index
        leader = self._leaders.get(key) if key is not None else None
        if name in self.disabled:
            return SKIP_DISABLED, leader
        if leader is not None and self.limit is not None and leader > self.limit:
            return SKIP_LIMIT, leader
        return None, leader

    def _unit(self, index: int, phase: str, name: str) -> tuple[object, bool]:
        if name in self.extra_names:
            return ("pass", index), True
        if phase in self.optional_phases:
            return ("phase", phase), ("phase", phase) not in self._leaders
        for group in OPTIONAL_PASS_GROUPS:
            if name in group:
                return ("group", group), name == group[0] or ("group", group) not in self._leaders
        return None, False


def gate_summary(records, gate: PassGate) -> dict:
    """What the gate did (for the index and the CLI): the disabled names, the limit, the last optional unit
    applied (at or below the limit) and every skipped pass. ``records`` are ``dumps.PassRecord``s."""

    def brief(r):
        return {"index": r.index, "phase": r.phase, "name": r.name}

    opened = [r for r in records if r.optional and r.unit == r.index and r.skipped is None]
    last = max(opened, key=lambda r: r.index, default=None) if gate.limit is not None else None
    return {"disabled": sorted(gate.disabled), "limit": gate.limit, "last_applied": last and brief(last),
            "skipped": [{**brief(r), "reason": r.skipped} for r in records if r.skipped]}


def describe_gate(summary: dict) -> str | None:
    """One line for the terminal, or None when the gate did nothing."""
    if not summary["disabled"] and summary["limit"] is None:
        return None
    parts = []
    if summary["disabled"]:
        parts.append("disabled " + ", ".join(summary["disabled"]))
    if summary["limit"] is not None:
        last = summary["last_applied"]
        parts.append(f"bisect-limit {summary['limit']}: last optional pass applied "
                     + (f"{last['index']:03d} {last['phase']}/{last['name']}" if last else "none"))
    skipped = summary["skipped"]
    parts.append(f"skipped {len(skipped)} pass{'es' if len(skipped) != 1 else ''}"
                 + (": " + ", ".join(f"{s['index']:03d} {s['name']}" for s in skipped) if skipped else ""))
    return "; ".join(parts)
