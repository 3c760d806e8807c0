"""Reading run folders from the terminal: ``mtp-tvm dumps list``, ``dumps show RUN [PASS] [--func NAME
[--history]]``, ``dumps diff RUN A B`` (``dumps compare``: ``tools/dumps/compare.py``).

RUN is a run folder's path, its name under the dumps root, a unique prefix of that name, or ``latest``.
PASS is a pass number (``12`` or ``012``), ``0``/``input`` for the module given to the compiler, a pass name
(it must be unique in the run, else use its number), or a file of the run folder (``host.s``).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from ...instrument.ir_text import MODULE_REST, functions, unified_diff
from ...instrument.kernel_history import kernel_history
from ...instrument.pass_tree import count_line
from ...instrument.report import pass_table
from ...instrument.run_folder import (
    COMPLETE_MARKER,
    INDEX_FILE,
    dumps_root,
    keep_run,
    prune,
    run_folders,
)
from ...support import plain_files
from ...support.errors import UsageError, did_you_mean
from ...support.text_table import text_table


def _runs(root=None) -> list[Path]:
    """The run folders of the root, oldest first (never a symlink to a folder elsewhere: ``run_folders``)."""
    def age(p: Path) -> tuple[float, str]:
        try:
            return p.lstat().st_mtime, p.name
        except OSError:  # removed meanwhile
            return 0.0, p.name

    return sorted(run_folders(dumps_root(root)), key=age)


_INDEX_KEYS = {"case": str, "target": dict, "preset": str, "frontend": str, "status": str, "input": str,
               "dump": dict, "gate": dict, "passes": list}
_PASS_KEYS = {"index", "phase", "name", "depth", "changed", "skipped", "error", "lines_added", "lines_removed", "ms",
              "file"}


def load_index(run: Path) -> dict:
    """A run's ``index.json``; a missing, unreadable or damaged one is a one-line ``UsageError``."""
    try:
        index = json.loads(plain_files.read_text(run / INDEX_FILE))
    except FileNotFoundError:
        raise UsageError(f"{run} has no {INDEX_FILE}: not a finished dump run"
                         + (" (it holds only a reproducer)" if (run / "repro").is_dir() else "")) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"cannot read {run / INDEX_FILE}: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(index, dict):
        raise UsageError(f"{run / INDEX_FILE} is damaged: not a JSON object")
    bad = next((k for k, t in _INDEX_KEYS.items() if not isinstance(index.get(k), t)), None)
    if bad is None and not all(isinstance(p, dict) and _PASS_KEYS <= p.keys() for p in index["passes"]):
        bad = "passes"
    if bad is not None:
        raise UsageError(f"{run / INDEX_FILE} is damaged: {bad!r} is missing or malformed")
    return index


def _state(run: Path) -> str:
    """A run folder without a readable index, as ``list`` shows it (``show`` refuses it)."""
    if (run / "repro").is_dir() and not (run / INDEX_FILE).exists():
        return "repro only"
    if not (run / INDEX_FILE).exists():
        return "no index" if (run / COMPLETE_MARKER).exists() else "incomplete"
    return "damaged index"


def list_runs(root=None) -> str:
    """One line per run folder, oldest first."""
    rows = [("run", "case", "target", "passes", "changed", "status", "golden")]
    for run in _runs(root):
        try:
            index = load_index(run)
        except UsageError:
            rows.append((run.name, "", "", "", "", _state(run), ""))
            continue
        check = index.get("check")
        golden = "" if not isinstance(check, dict) else ("PASS" if check.get("passed") else
                                                          "FAIL" + (" (repro/)" if check.get("repro") else ""))
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
    if not hits and path.is_dir():
        raise UsageError(f"{path} is a folder but not a dump run: it has no {INDEX_FILE}")
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
        raise UsageError(f"no pass {spec!r} in this run (passes 1..{len(index['passes'])})"
                         + did_you_mean(spec, {p["name"] for p in index["passes"]}))
    if len(hit) > 1:
        raise UsageError(f"pass name {spec!r} runs {len(hit)} times here: use a number, one of "
                         + ", ".join(str(p["index"]) for p in hit))
    return hit[0]


def _inside(run: Path, name: str, what: str) -> Path:
    """``run / name``, refused when it leads out of the run folder (``../``, an absolute path, a symlink)."""
    path = run / name
    if not path.resolve().is_relative_to(run.resolve()):
        raise UsageError(f"{what} {name!r} is outside the run folder {run}; refusing to read it")
    return path


def _dump_file(run: Path, index: dict, spec: str) -> Path:
    if not spec.isdigit() and (run / spec).is_file():
        return _inside(run, spec, "file")
    p = find_pass(index, spec)
    if not p.get("file"):
        why = p.get("skipped") and f"skipped ({p['skipped']})" or (
            "unchanged, and this run dumped changed passes only" if not p["changed"] and index["dump"]["only_changed"]
            else "filtered out by --dump-filter")
        raise UsageError(f"pass {p['index']:03d} {p['name']} has no dump file: {why}")
    path = _inside(run, p["file"], f"pass {p['index']:03d}'s file")
    if not path.is_file():
        raise UsageError(f"{path} (pass {p['index']:03d} {p['name']}) is missing: the run folder was changed "
                         "after it was written")
    return path


def _read(path: Path) -> str:
    try:
        return plain_files.read_text(path)
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None


def show(run: Path, spec: str | None = None, changed: bool = False, phase: str | None = None,
         func: str | None = None, history: bool = False, nested: bool = False) -> str:
    """A run's pass table (only changed passes, only one phase; the passes run inside another folded into its
    row unless ``nested``), or the dump of one pass (or a file of the run); ``func``: one function of that dump,
    or with ``history`` every pass that changed it (``kernel_history``)."""
    index = load_index(run)
    if history or func is not None:
        return _show_func(run, index, spec, func, history)
    if spec is None:
        gate = index["gate"]
        head = (f"{run}\ncase {index['case']} on {index['target']['kind']}, preset {index['preset']}, frontend "
                f"{index['frontend']}: {count_line(index['passes'])}, status {index['status']}"
                + (f"; golden {'PASSED' if index['check']['passed'] else 'FAILED'}" if index.get("check") else "")
                + (f"\nerror: {index['error']}" if index.get("error") else "")
                + (f"\nbisect-limit {gate['limit']}" if gate.get("limit") is not None else ""))
        return head + "\n" + pass_table(index, changed, phase, nested) + "\n"
    return _read(_dump_file(run, index, spec))


def _show_func(run: Path, index: dict, spec: str | None, func: str | None, history: bool) -> str:
    if func is None:
        raise UsageError("--history follows one function: add --func NAME")
    if history:
        if spec is not None:
            raise UsageError("--history covers every pass: drop PASS, or drop --history to see the function there")
        return kernel_history(run, index, func).text()
    if spec is None:
        raise UsageError("--func NAME shows the function in one pass's dump: give PASS, or add --history")
    path = _dump_file(run, index, spec)
    funcs = functions(_read(path))
    if func not in funcs or func == MODULE_REST:
        known = [f for f in funcs if f != MODULE_REST]
        raise UsageError(f"no function {func!r} in {path.name}{did_you_mean(func, known, list_known=True)}")
    return funcs[func] + "\n"


def diff(run: Path, a: str, b: str) -> str:
    """Unified diff between the module after pass ``a`` and after pass ``b`` (``0``: the input)."""
    index = load_index(run)
    fa, fb = _dump_file(run, index, a), _dump_file(run, index, b)
    lines = unified_diff(_read(fa).splitlines(), _read(fb).splitlines(), fa.name, fb.name)
    return "\n".join(lines) or f"{fa.name} and {fb.name} are identical"



_AGE_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def parse_age(text: str) -> datetime.timedelta:
    """``7d``, ``12h``, ``30m`` -> a timedelta (the ``--older-than`` of ``dumps prune``)."""
    number, unit = text[:-1], text[-1:]
    if unit not in _AGE_UNITS or not number.replace(".", "", 1).isdigit():
        raise UsageError(f"--older-than takes a number with d, h or m (7d, 12h, 30m), got {text!r}")
    try:
        return datetime.timedelta(**{_AGE_UNITS[unit]: float(number)})
    except OverflowError:
        raise UsageError(f"--older-than {text} is too long ago: at most {datetime.timedelta.max.days} days"
                         ) from None


def prune_runs(root=None, keep: int | None = None, older_than: str | None = None) -> str:
    """``mtp-tvm dumps prune``: what was removed, one line per run."""
    if keep is None and older_than is None:
        raise UsageError("dumps prune needs --keep N and/or --older-than AGE")
    if keep is not None and keep < 0:
        raise UsageError(f"--keep takes a number of runs >= 0, got {keep}")
    removed = prune(root, keep, parse_age(older_than) if older_than else None)
    return "\n".join([*(f"removed {run}" for run in removed), f"{len(removed)} run(s) removed from {dumps_root(root)}"])


def keep(run: Path) -> str:
    """``mtp-tvm dumps keep RUN``."""
    keep_run(run)
    return f"kept: {run} (dumps prune and the retention of new runs leave it alone)"
