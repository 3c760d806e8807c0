"""``mtp-tvm dumps compare RUN_A RUN_B``: two builds side by side, pass by pass, from their run folders.

The passes of the two runs are aligned by (phase, pass name) with difflib's matcher over the two sequences, so a
pass only one run has (a plugin's, another TVM version's) shows as such and the rest still line up. For each
row the modules after the pass are compared, per function (``instrument.ir_text``): identical, equal up to
names, the same lines reordered (TVM's ``VMShapeLower`` orders ``shape_func`` differently from build to build), or
different. A pass only one run has is compared with the other run's module at that point (the input
of its next pass): where a plugin pass changes the IR, that pass is where the runs diverge. The first
divergence is the first row, in the order the passes finished (a pass that runs others after them), whose
modules differ beyond names and line order; the report shows the diff there, per function, and what the final
generated code looks like on each side (``tools.measure.kernel_code``). Everything is read from the files a dump already
wrote, so dumping pays nothing for it. The passes run inside another (FoldConstant's inner TIR pipelines) fold
into its row (``instrument.pass_tree``; the page shows them on request), and a run of rows that repeat the row
above folds into one line.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from pathlib import Path

from ...instrument.ir_text import (
    DIFFERENT,
    IDENTICAL,
    MODULE_REST,
    NAMES,
    ONLY_A,
    ONLY_B,
    REORDERED,
    compare_texts,
    functions,
    normalized,
)
from ...instrument.pass_tree import count_line
from ...instrument.run_states import finish_order, state_files
from ...support import plain_files
from ...support.text_table import text_table
from ..measure.kernel_code import KernelCode, kernels
from .browse import load_index

UNKNOWN = "not dumped"
DIFF_LINES_SHOWN = 120  # the terminal report's diff at the divergence; --html shows it all


@dataclasses.dataclass(frozen=True)
class FunctionVerdict:
    name: str
    verdict: str  # ir_text: IDENTICAL, NAMES, REORDERED, DIFFERENT, ONLY_A, ONLY_B


@dataclasses.dataclass(frozen=True)
class PassPair:
    """One aligned row: the pass in A and in B (number, None where that run lacks it; 0 is the input), what it
    did there, the files holding the modules after it, and how those compare."""

    phase: str
    name: str
    depth: int
    a: int | None
    b: int | None
    a_state: str
    b_state: str
    a_file: str | None
    b_file: str | None
    verdict: str
    functions: tuple[FunctionVerdict, ...] = ()

    @property
    def label(self) -> str:
        nums = f"{self.a:03d}" if self.a is not None else f"B {self.b:03d}"
        if self.a is not None and self.b is not None and self.a != self.b:
            nums += f" (B {self.b:03d})"
        where = "" if self.a is not None and self.b is not None else (" (only in A)" if self.b is None
                                                                      else " (only in B)")
        return f"{nums} {self.phase}/{self.name}{where}"

    def summary(self, names: bool = True) -> str:
        """The functions column: counts per verdict, and the names of those that differ (``names``)."""
        if self.verdict in (IDENTICAL, UNKNOWN) or not self.functions:
            return ""
        by: dict[str, list[str]] = {}
        for f in self.functions:
            if f.name != MODULE_REST:
                by.setdefault(f.verdict, []).append(f.name)
        parts = []
        for verdict in (IDENTICAL, NAMES, REORDERED, DIFFERENT, ONLY_A, ONLY_B):
            found = by.get(verdict, [])
            if found and (not names or verdict in (IDENTICAL, NAMES)):
                parts.append(f"{len(found)} {verdict}")
            elif found:
                parts.append(f"{verdict}: {', '.join(found)}")
        rest = next((f.verdict for f in self.functions if f.name == MODULE_REST), IDENTICAL)
        if rest not in (IDENTICAL, NAMES, REORDERED):
            parts.append("module attributes differ")
        return "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class CodeFile:
    """One generated file on both sides: its size in bytes (None: absent) and its kernels."""

    name: str
    a_bytes: int | None
    b_bytes: int | None
    verdict: str
    kernels: tuple[tuple[str, KernelCode | None, KernelCode | None], ...] = ()
    unit: str = "instructions"

    def table(self) -> str:
        rows = [(f"kernel ({self.name})", f"A {self.unit}", f"B {self.unit}", "change", "A -> B by family")]
        for name, ka, kb in self.kernels:
            fams = sorted(set(ka.families if ka else {}) | set(kb.families if kb else {}))
            fam = ", ".join(f"{f} {(ka.families.get(f, 0) if ka else '-')} -> {(kb.families.get(f, 0) if kb else '-')}"
                            for f in fams)
            change = (f"{kb.size - ka.size:+d}" if ka and kb and ka.size != kb.size else
                      "" if ka and kb else "only in A" if ka else "only in B")
            rows.append((name, ka.size if ka else "-", kb.size if kb else "-", change, fam))
        return "\n".join(text_table(rows, {1, 2, 3}))


@dataclasses.dataclass(frozen=True)
class RunComparison:
    """Two runs compared: their settings, the aligned passes, the first divergence (a position in ``pairs``)
    and its diff, and the generated code."""

    a: Path
    b: Path
    a_index: dict
    b_index: dict
    pairs: tuple[PassPair, ...]
    divergence: int | None
    first_names: int | None      # the first row equal only up to names
    first_reordered: int | None  # the first row with the same lines in another order
    diff: tuple[str, ...]
    code: tuple[CodeFile, ...]
    functions: Callable[[str | None, str | None], tuple] = dataclasses.field(  # (A file, B file) -> their functions
        default=lambda _a, _b: (None, None), repr=False, compare=False)

    @property
    def identical(self) -> bool:
        """Every pass in both runs, every module and the generated code the same (a nested pass dumped on
        neither side, folded into its parent, is judged with it)."""
        return (all((p.verdict == IDENTICAL or (p.depth and p.verdict == UNKNOWN and not p.a_file and not p.b_file))
                    and p.a is not None and p.b is not None for p in self.pairs)
                and all(c.verdict == IDENTICAL for c in self.code))

    def settings(self) -> list[tuple[str, str, str]]:
        """The build settings that differ: (what, A, B)."""
        out = []
        for key in ("case", "preset", "frontend", "schedule", "tvm_version"):
            va, vb = self.a_index.get(key, "?"), self.b_index.get(key, "?")
            if va != vb:
                out.append((key, str(va), str(vb)))
        if self.a_index["target"] != self.b_index["target"]:
            out.append(("target", _target(self.a_index), _target(self.b_index)))
        if self.a_index.get("shapes") != self.b_index.get("shapes"):
            out.append(("shapes", _shapes(self.a_index), _shapes(self.b_index)))
        da, db = self.a_index["gate"].get("disabled", []), self.b_index["gate"].get("disabled", [])
        if da != db:
            out.append(("disabled passes", ",".join(da) or "-", ",".join(db) or "-"))
        for key in ("func", "only_changed", "filter"):
            va, vb = self.a_index["dump"].get(key), self.b_index["dump"].get(key)
            if va != vb:
                out.append((f"dump {key}", str(va), str(vb)))
        return out

    def counts(self) -> tuple[int, int, int]:
        both = sum(1 for p in self.pairs if p.a is not None and p.b is not None) - 1  # less the input row
        return both, sum(1 for p in self.pairs if p.b is None), sum(1 for p in self.pairs if p.a is None)

    def verdict(self) -> str:
        """One line: identical, the first divergence, or no divergence beyond names or reordered lines."""
        if self.identical:
            return f"identical: every pass's module and the generated code are the same ({len(self.pairs) - 1} passes)"
        notes = []
        if self.first_names is not None:
            notes.append(f"names differ from {self.pairs[self.first_names].label}")
        if self.first_reordered is not None:
            p = self.pairs[self.first_reordered]
            funcs = ", ".join(f.name for f in p.functions if f.verdict == REORDERED)
            notes.append(f"lines reordered from {p.label} ({funcs})")
        if self.divergence is None:
            _, only_a, only_b = self.counts()
            if only_a or only_b:
                notes.append(f"passes only in A: {only_a}, only in B: {only_b}")
            same = ("identical" if self.first_names is None and self.first_reordered is None
                    else "the same up to names or line order")
            code = "the same" if all(c.verdict == IDENTICAL for c in self.code) else "different"
            return f"no divergence: every aligned module is {same}; the generated code is {code}" + (
                f" ({'; '.join(notes)})" if notes else "")
        p = self.pairs[self.divergence]
        return f"first divergence: {p.label}: {p.summary() or p.verdict}" + (
            f" (before it: {'; '.join(notes)})" if notes else "")

    def visible(self) -> list[int]:
        """The rows a table shows: the input, every top-level pass, and the divergence even where it is nested
        (the passes run inside another fold into its row)."""
        return [k for k, p in enumerate(self.pairs) if k == 0 or not p.depth or k == self.divergence]

    def nested(self) -> dict[int, int]:
        """Row -> how many rows nested inside it follow (top-level rows that ran others only)."""
        out, top = {}, 0
        for k, p in enumerate(self.pairs):
            if not p.depth:
                top = k
            elif k:
                out[top] = out.get(top, 0) + 1
        return out

    def table(self) -> str:
        """One row per aligned top-level pass (nested ones counted in it); a run of rows that repeat the row
        above (the same states and verdict: consequences of an earlier cause, or passes doing the same on both
        sides) folds into one line."""
        rows = [("#A", "#B", "phase", "pass", "A", "B", "module", "functions")]
        nested = self.nested()
        for first, last in _folds(self.pairs, self.visible()):
            p = self.pairs[first]
            if first == last:
                inside = f" [+{nested[first]} nested]" if first in nested else ""
                rows.append(("" if p.a is None else f"{p.a:03d}", "" if p.b is None else f"{p.b:03d}", p.phase,
                             "  " * p.depth + p.name + inside, p.a_state, p.b_state, p.verdict,
                             p.summary(names=False)))
                continue
            q = self.pairs[last]
            phases = p.phase if p.phase == q.phase else f"{p.phase}..{q.phase}"
            count = sum(1 for k in self.visible() if first <= k <= last)
            what = ("changing neither run" if p.a_state == p.b_state == "." else
                    f"{p.a_state} in A, {p.b_state} in B, alike")
            rows.append((f"{p.a:03d}-{q.a:03d}", f"{p.b:03d}-{q.b:03d}", phases, f"{count} passes {what}",
                         p.a_state, p.b_state, p.verdict, "the same as above"))
        return "\n".join(text_table(rows))

    def text(self, diff_lines: int = DIFF_LINES_SHOWN) -> str:
        both, only_a, only_b = self.counts()
        lines = [f"A  {self.a}\n   {describe_run(self.a_index)}", f"B  {self.b}\n   {describe_run(self.b_index)}"]
        settings = self.settings()
        if settings:
            lines.append("settings that differ: " + "; ".join(f"{k} {a} / {b}" for k, a, b in settings))
        lines.append(f"passes: {both} aligned, {only_a} only in A, {only_b} only in B")
        if not self.identical:
            lines.append(self.table())
        lines.append(self.verdict())
        if self.divergence is not None and self.diff:
            p = self.pairs[self.divergence]
            lines.append(f"\ndiff at {p.label} (--- A {p.a_file or '-'}, +++ B {p.b_file or '-'}):")
            cut = len(self.diff) - diff_lines
            lines.extend(self.diff[:diff_lines] if cut > 0 else self.diff)
            if cut > 0:
                lines.append(f"... {cut} more lines (--html OUT.html shows them all)")
        lines.append("\ngenerated code:")
        rows = [("file", "A bytes", "B bytes", "")]
        rows += [(c.name, "-" if c.a_bytes is None else c.a_bytes, "-" if c.b_bytes is None else c.b_bytes,
                  c.verdict) for c in self.code]
        lines.extend(text_table(rows, {1, 2}) if self.code else ["(neither run has generated code)"])
        for c in self.code:
            if c.kernels and c.verdict != IDENTICAL:
                lines.append("")
                lines.append(c.table())
        return "\n".join(lines) + "\n"


def _folds(pairs: tuple[PassPair, ...], shown: list[int]) -> list[tuple[int, int]]:
    """The ``shown`` rows of ``pairs`` as (first, last) runs: consecutive shown rows that repeat the shown row
    before them form one run (its first and last row; the hidden rows between are inside it); every other row
    is its own."""
    out: list[tuple[int, int]] = []
    for n, k in enumerate(shown):
        prev = shown[n - 1] if n else None
        if (prev is not None and _repeats(pairs, k, prev) and out[-1][1] == prev and out[-1][0]
                and _repeats(pairs, out[-1][0], shown[shown.index(out[-1][0]) - 1])):
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return out


def _repeats(pairs: tuple[PassPair, ...], k: int, prev: int) -> bool:
    """Whether row ``k`` says nothing row ``prev`` did not: both runs have the pass, the same states and the
    same comparison, and either it changed neither module or the modules did not come apart there (a run of
    differing rows where a pass changed something stays: each may be a cause)."""
    p, q = pairs[k], pairs[prev]
    return (p.a is not None and p.b is not None and (p.a_state, p.b_state) == (q.a_state, q.b_state)
            and (p.a_state == p.b_state == "." or p.verdict != DIFFERENT) and not p.depth
            and (p.verdict, p.summary()) == (q.verdict, q.summary()))


def _target(index: dict) -> str:
    t = index["target"]
    return t.get("kind", "?") + (f" {t['mcpu']}" if t.get("mcpu") else "") + (f" {t['arch']}" if t.get("arch") else "")


def _shapes(index: dict) -> str:
    s = index.get("shapes") or {}
    return " ".join(f"{k}={v}" for k, v in s.items() if k in ("tokens", "hidden", "vocab_shard"))


def describe_run(index: dict) -> str:
    return (f"{index['case']} on {_target(index)}, preset {index['preset']}, frontend {index['frontend']}, "
            f"schedule {index.get('schedule', '?')}, TVM {index.get('tvm_version', '?')}, "
            f"{count_line(index['passes'])}, status {index['status']}")


def _state(p: dict | None) -> str:
    if p is None:
        return ""
    if p.get("skipped"):
        return "skipped"
    if p.get("error"):
        return "FAILED"
    return "changed" if p.get("changed") else "."


class _Side:
    """One run: its passes, the files before and after each, texts and functions read once."""

    def __init__(self, run: Path, index: dict):
        self.run, self.index = run, index
        self.passes = index["passes"]
        self.before, self.after = state_files(index)
        order = finish_order(self.passes)
        self.final = self.after[order[-1]] if order else index.get("input")
        self._funcs: dict[str, dict[str, str] | None] = {}

    def functions(self, name: str | None) -> dict[str, str] | None:
        if name is None:
            return None
        if name not in self._funcs:
            try:
                text = plain_files.read_text(self.run / name)
            except (OSError, UnicodeDecodeError):
                text = None
            self._funcs[name] = None if text is None else {"": text, **functions(text)}
        return self._funcs[name]

    def at(self, pos: int | None) -> str | None:
        """The file with the module just before pass position ``pos`` would run (None: after the last)."""
        return self.final if pos is None else self.before[pos]


def _align(a: list[dict], b: list[dict]) -> list[tuple[int | None, int | None]]:
    key = lambda p: (p["phase"], p["name"])  # noqa: E731
    matcher = difflib.SequenceMatcher(None, [key(p) for p in a], [key(p) for p in b], autojunk=False)
    rows: list[tuple[int | None, int | None]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows += [(i1 + k, j1 + k) for k in range(i2 - i1)]
        else:
            rows += [(i, None) for i in range(i1, i2)] + [(None, j) for j in range(j1, j2)]
    return rows


def _compare(fa: dict[str, str] | None, fb: dict[str, str] | None,
             norm: dict[str, str]) -> tuple[str, tuple[FunctionVerdict, ...]]:
    if fa is None or fb is None:
        return UNKNOWN, ()
    if fa[""] == fb[""]:
        return IDENTICAL, ()
    names = [n for n in fa if n] + [n for n in fb if n and n not in fa]
    verdicts = tuple(FunctionVerdict(n, compare_texts(fa.get(n), fb.get(n), lambda t: _norm(t, norm)))
                     for n in names)
    found = {v.verdict for v in verdicts}
    overall = (DIFFERENT if found - {IDENTICAL, NAMES, REORDERED} else REORDERED if REORDERED in found else NAMES)
    return overall, verdicts


def _norm(text: str, cache: dict[str, str]) -> str:
    if text not in cache:
        cache[text] = normalized(text)
    return cache[text]


def function_diff(fa: dict[str, str], fb: dict[str, str], pair: PassPair) -> list[str]:
    """The diff at the divergence: each function that differs, diffed on its own; one-sided ones named."""
    out: list[str] = []
    for v in pair.functions:
        if v.verdict == DIFFERENT:
            name = "module attributes" if v.name == MODULE_REST else v.name
            out += list(difflib.unified_diff(fa[v.name].splitlines(), fb[v.name].splitlines(), f"A {name}",
                                             f"B {name}", lineterm=""))
        elif v.verdict in (ONLY_A, ONLY_B) and v.name != MODULE_REST:
            text = (fa if v.verdict == ONLY_A else fb)[v.name]
            out.append(f"# {v.name}: {v.verdict} ({len(text.splitlines())} lines)")
    return out


def _code(a: _Side, b: _Side) -> tuple[CodeFile, ...]:
    names = sorted(set(a.index.get("codegen", [])) | set(b.index.get("codegen", [])))
    out = []
    for name in names:
        ta, tb = _read(a.run, name, a.index), _read(b.run, name, b.index)
        verdict = compare_texts(ta, tb) if ta is None or tb is None else IDENTICAL if ta == tb else DIFFERENT
        ka = kernels(name, ta) if ta is not None else None
        kb = kernels(name, tb) if tb is not None else None
        rows = ()
        if ka is not None or kb is not None:
            ka, kb = ka or {}, kb or {}
            rows = tuple((k, ka.get(k), kb.get(k)) for k in sorted(set(ka) | set(kb)))
        out.append(CodeFile(name, None if ta is None else len(ta.encode()), None if tb is None else len(tb.encode()),
                            verdict, rows, "lines" if name.endswith(".cu") else "instructions"))
    return tuple(out)


def _read(run: Path, name: str, index: dict) -> str | None:
    if name not in index.get("codegen", []):
        return None
    try:
        return plain_files.read_text(run / name)
    except (OSError, UnicodeDecodeError):
        return None


def compare_runs(run_a: Path, run_b: Path) -> RunComparison:
    """Compare two run folders (see the module docstring); unreadable runs are ``UsageError``s."""
    a, b = _Side(run_a, load_index(run_a)), _Side(run_b, load_index(run_b))
    rows = _align(a.passes, b.passes)
    norm: dict[str, str] = {}
    pairs = [PassPair("input", "input", 0, 0, 0, "", "", a.index["input"], b.index["input"], "")]
    for k, (i, j) in enumerate(rows):
        p = a.passes[i] if i is not None else b.passes[j]
        # a pass one run lacks: that run's module where it would have run, the input of its next pass
        nxt_a = next((r[0] for r in rows[k + 1:] if r[0] is not None), None)
        nxt_b = next((r[1] for r in rows[k + 1:] if r[1] is not None), None)
        fa = a.after[i] if i is not None else a.at(nxt_a)
        fb = b.after[j] if j is not None else b.at(nxt_b)
        pairs.append(PassPair(p["phase"], p["name"], p.get("depth", 0),
                              None if i is None else a.passes[i]["index"], None if j is None else b.passes[j]["index"],
                              _state(a.passes[i] if i is not None else None),
                              _state(b.passes[j] if j is not None else None), fa, fb, ""))
    done = []
    for p in pairs:
        verdict, funcs = _compare(a.functions(p.a_file), b.functions(p.b_file), norm)
        done.append(dataclasses.replace(p, verdict=verdict, functions=funcs))
    order = [0] + [k + 1 for k in finish_order([{"depth": p.depth} for p in done[1:]])]
    divergence = next((k for k in order if done[k].verdict == DIFFERENT), None)
    before = order[:order.index(divergence)] if divergence is not None else order
    names = next((k for k in before if done[k].verdict == NAMES), None)
    reordered = next((k for k in before if done[k].verdict == REORDERED), None)
    diff: list[str] = []
    if divergence is not None:
        p = done[divergence]
        diff = function_diff(a.functions(p.a_file), b.functions(p.b_file), p)
    return RunComparison(run_a, run_b, a.index, b.index, tuple(done), divergence, names, reordered, tuple(diff),
                         _code(a, b), lambda fa, fb: (a.functions(fa), b.functions(fb)))
