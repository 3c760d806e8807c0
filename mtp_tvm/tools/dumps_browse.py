"""Reading run folders from the terminal: ``mtp-tvm dumps list``, ``dumps show RUN [PASS]``,
``dumps diff RUN A B``.

RUN is a run folder's path, its name under the dumps root, a unique prefix of that name, or ``latest``.
PASS is a pass number (``12`` or ``012``), ``0``/``input`` for the module given to the compiler, a pass name
(it must be unique in the run, else use its number), or a file of the run folder (``host.s``).
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from ..instrument.report import pass_table
from ..instrument.run_folder import COMPLETE_MARKER, INDEX_FILE, dumps_root
from ..support.errors import UsageError
from ..support.text_table import text_table


def _runs(root=None) -> list[Path]:
    root = dumps_root(root)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: (p.stat().st_mtime, p.name))


def load_index(run: Path) -> dict:
    try:
        return json.loads((run / INDEX_FILE).read_text())
    except FileNotFoundError:
        raise UsageError(f"{run} has no {INDEX_FILE}: not a finished dump run"
                         + (" (it holds only a reproducer)" if (run / "repro").is_dir() else "")) from None


def list_runs(root=None) -> str:
    """One line per run folder, oldest first."""
    rows = [("run", "case", "target", "passes", "changed", "status", "golden")]
    for run in _runs(root):
        if not (run / INDEX_FILE).exists():
            state = "complete" if (run / COMPLETE_MARKER).exists() else "incomplete"
            rows.append((run.name, "", "", "", "", "repro only" if (run / "repro").is_dir() else state, ""))
            continue
        index = load_index(run)
        check = index.get("check")
        golden = "" if check is None else ("PASS" if check["passed"] else "FAIL (repro/)")
        rows.append((run.name, index["case"], index["target"]["kind"], len(index["passes"]),
                     sum(p["changed"] for p in index["passes"]),
                     index["status"] if (run / COMPLETE_MARKER).exists() else "incomplete", golden))
    if len(rows) == 1:
        return f"no runs under {dumps_root(root)}"
    return "\n".join(text_table(rows, rule=False))


def find_run(spec: str, root=None) -> Path:
    path = Path(spec)
    if path.is_dir() and (path / INDEX_FILE).exists():
        return path
    runs = _runs(root)
    if spec == "latest":
        done = [r for r in runs if (r / INDEX_FILE).exists() and (r / COMPLETE_MARKER).exists()]
        if not done:
            raise UsageError(f"no finished runs under {dumps_root(root)}")
        return done[-1]
    hits = [r for r in runs if r.name == spec] or [r for r in runs if r.name.startswith(spec)]
    if len(hits) != 1:
        raise UsageError(f"{'no' if not hits else 'more than one'} run matches {spec!r} under {dumps_root(root)}"
                         + (": " + ", ".join(r.name for r in hits[:5]) if hits else "; see `mtp-tvm dumps list`"))
    return hits[0]


def find_pass(index: dict, spec: str) -> dict:
    """The index entry of pass ``spec`` (number or unique name); the input module is entry 0."""
    if spec in ("0", "000", "input"):
        return {"index": 0, "phase": "input", "name": "input", "file": index["input"]}
    if spec.isdigit():
        hit = [p for p in index["passes"] if p["index"] == int(spec)]
    else:
        hit = [p for p in index["passes"] if p["name"] == spec]
    if not hit:
        raise UsageError(f"no pass {spec!r} in this run (passes 1..{len(index['passes'])})")
    if len(hit) > 1:
        raise UsageError(f"pass name {spec!r} runs {len(hit)} times here: use a number, one of "
                         + ", ".join(str(p["index"]) for p in hit))
    return hit[0]


def _dump_file(run: Path, index: dict, spec: str) -> Path:
    if (run / spec).is_file() and not spec.isdigit():
        return run / spec
    p = find_pass(index, spec)
    if not p.get("file"):
        why = p.get("skipped") and f"skipped ({p['skipped']})" or (
            "unchanged, and this run dumped changed passes only" if not p["changed"] and index["dump"]["only_changed"]
            else "filtered out by --dump-filter")
        raise UsageError(f"pass {p['index']:03d} {p['name']} has no dump file: {why}")
    return run / p["file"]


def show(run: Path, spec: str | None = None, changed: bool = False, phase: str | None = None) -> str:
    """A run's pass table (only changed passes, only one phase), or the dump of one pass (or a file of the run)."""
    index = load_index(run)
    if spec is None:
        gate = index["gate"]
        head = (f"{run}\ncase {index['case']} on {index['target']['kind']}, preset {index['preset']}, frontend "
                f"{index['frontend']}: {len(index['passes'])} passes, status {index['status']}"
                + (f"; golden {'PASSED' if index['check']['passed'] else 'FAILED'}" if index.get("check") else "")
                + (f"\nerror: {index['error']}" if index["error"] else "")
                + (f"\nbisect-limit {gate['limit']}" if gate["limit"] is not None else ""))
        return head + "\n" + pass_table(index, changed, phase) + "\n"
    return _dump_file(run, index, spec).read_text()


def diff(run: Path, a: str, b: str) -> str:
    """Unified diff between the module after pass ``a`` and after pass ``b`` (``0``: the input)."""
    index = load_index(run)
    fa, fb = _dump_file(run, index, a), _dump_file(run, index, b)
    lines = difflib.unified_diff(fa.read_text().splitlines(), fb.read_text().splitlines(), fa.name, fb.name,
                                 lineterm="")
    return "\n".join(lines) or f"{fa.name} and {fb.name} are identical"

