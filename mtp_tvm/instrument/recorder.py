"""Per-pass records and the IR snapshots a dump needs (``PassRecorder``), handed to the run-folder writer
(``instrument.run_folder.RunWriter``, which holds the folder's layout) after the build.

``PassRecorder`` is a TVM pass instrument. It numbers *leaf* passes in execution order (containers such as
``sequential`` and our phase markers are not passes a user debugs), attributes each to the phase opened by the
last ``mtp.phase.*`` marker, asks the ``PassGate`` whether it may run (``--disable-pass``, ``--bisect-limit``),
times it (self and inclusive, minus the recorder's own work), and detects whether it changed the IR by
structural hash. Records outlive the ``PassContext``.

When dumping, the build only takes snapshots (each new module state's function table, copied, since a pass may
edit the module it was given) and hands the states a dump needs to a printer thread, which prints each distinct
state once while the build goes on (TVM's printer releases the GIL, so on a second core this is nearly free).
After the build (``finish``) the run folder is created, the diffs are queued on that thread too, and the
assembly is generated from the dumped ``host.ll`` on another thread, in its own LLVM context, while the
caller's ``meanwhile`` (the JIT of a CPU build) runs.

A pass's number is given when it starts, so a pass that runs others (FuseTIR) comes before them; its diff is
what it did as a whole, theirs what each did inside it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import tvm
import tvm_ffi

from ..instrument.ir_text import unified_diff
from ..instrument.run_folder import INPUT_FILE, RunWriter, pass_stem
from ..passes.gate import SKIP_DISABLED, PassGate, gate_summary
from ..passes.pipeline import MTP_CONTAINER_PASSES, PHASE_MARKER_PREFIX, RELAX_PIPELINE
from ..support.errors import UsageError, did_you_mean

# TVM's own containers (a Sequential, a build's pipeline) and ours
CONTAINER_PASSES = {"sequential", "_pipeline", *MTP_CONTAINER_PASSES}


@dataclasses.dataclass(frozen=True)
class DumpOptions:
    """What to dump: ``root`` (default ``dumps/``), only changed passes, passes whose name matches
    ``pass_filter`` (a regex, searched), one function ``func`` instead of the whole module, and with ``nested``
    also the passes run inside another pass (FoldConstant's TIR pipeline per folded constant, FuseTIR's
    helpers): without it they are recorded in the index, folded under their parent, with no file."""

    root: str | os.PathLike | None = None
    only_changed: bool = False
    pass_filter: str | None = None
    func: str | None = None
    nested: bool = False

    def __post_init__(self):
        if self.pass_filter is not None:
            try:
                re.compile(self.pass_filter)
            except re.error as e:
                raise UsageError(f"bad --dump-filter regex {self.pass_filter!r}: {e}") from None

    def wants(self, name: str) -> bool:
        return self.pass_filter is None or re.search(self.pass_filter, name) is not None


@dataclasses.dataclass
class PassRecord:
    index: int
    phase: str
    name: str
    depth: int = 0              # how many passes this one runs inside (FuseTIR's helpers: 1)
    parent: int | None = None   # the number of the pass it runs inside (its innermost)
    changed: bool = False
    ms: float = 0.0             # inclusive wall time
    self_ms: float = 0.0        # minus the passes it ran
    lines_added: int | None = None
    lines_removed: int | None = None
    file: str | None = None
    diff: str | None = None
    skipped: str | None = None  # "disabled" / "bisect-limit": the pass did not run
    optional: bool = False      # a bisect may skip it
    unit: int | None = None     # the pass whose number decides this optional unit (FuseTIR -> FuseOps)
    error: str | None = None    # the build failed in this pass
    input_file: str | None = None
    input_state: str | None = None  # the file holding this pass's input module (the state chain branches at
                                    # the host/device split; tools/dumps/compare and instrument/kernel_history)

    @property
    def label(self) -> str:
        return f"{self.index:03d} {self.phase}/{self.name}"


@dataclasses.dataclass
class _Frame:
    record: PassRecord | None
    before: object = None
    start: float = 0.0
    overhead: float = 0.0  # the recorder's own work inside this pass's span
    nested: float = 0.0    # wall time of the passes run inside this one


_ABSENT = ("absent",)


@tvm.instrument.pass_instrument
class PassRecorder:
    """Numbers, gates, times and snapshots every leaf pass of one build."""

    def __init__(self, gate: PassGate, dump: DumpOptions | None = None):
        self.gate = gate
        self.dump = dump
        self.records: list[PassRecord] = []
        self.phase = "input"
        self._frames = [_Frame(None)]
        self._pending: PassRecord | None = None
        self._last: tuple[object, object] | None = None   # (module, key): a pass's input is mostly the last output
        self._states: dict[object, object] = {}            # key -> module (or function) to print
        self._texts: dict[object, Future] = {}             # key -> its TVMScript, printed on the printer thread
        self._diffs: dict[int, Future] = {}                # pass number -> its diff, made there after the build
        self._printer = ThreadPoolExecutor(1, thread_name_prefix="mtp-dump-print") if dump is not None else None
        self.steps: dict[int, tuple[object, object]] = {}  # pass number -> (before key, after key)
        self.input_key = None
        self.disabled_inputs: dict[str, list] = {}          # --disable-pass name -> the modules it was skipped on
        self._func_seen = False                             # --dump-func: whether the function ever existed
        self._other_funcs: set[str] = set()                 # the functions seen while it was absent

    # ---- during the build ----------------------------------------------------------------------------------

    def record_input(self, mod: tvm.IRModule) -> None:
        self.input_key = self._key(mod)
        if self.dump is not None:
            self._print_soon(self.input_key)

    def should_run(self, mod, info):
        t0 = time.perf_counter()
        name, run = info.name, True
        if self._is_leaf(name):
            inside = [f.record.index for f in self._frames if f.record is not None]
            rec = PassRecord(len(self.records) + 1, self.phase, name, depth=len(inside),
                             parent=inside[-1] if inside else None)
            rec.skipped, rec.unit = self.gate.decide(rec.index, self.phase, name)
            rec.optional = rec.unit is not None
            self.records.append(rec)
            if rec.skipped == SKIP_DISABLED and rec.parent is None:  # did disabling it change anything?
                self.disabled_inputs.setdefault(name, []).append(tvm.IRModule(
                    dict(mod.functions_items()), attrs=mod.attrs, global_infos=dict(mod.global_infos)))
            self._pending, run = (rec, True) if rec.skipped is None else (None, False)
        self._frames[-1].overhead += time.perf_counter() - t0
        return run

    def run_before_pass(self, mod, info):
        t0 = time.perf_counter()
        rec, self._pending = (self._pending if self._is_leaf(info.name) else None), None
        frame = _Frame(rec, self._key(mod) if rec is not None else None)
        self._frames.append(frame)
        frame.start = time.perf_counter()
        self._frames[-2].overhead += frame.start - t0

    def run_after_pass(self, mod, info):
        t_end = time.perf_counter()
        frame = self._frames.pop()
        elapsed = t_end - frame.start - frame.overhead
        parent = self._frames[-1]
        parent.nested += elapsed
        name = info.name
        nested = any(f.record is not None for f in self._frames)  # a build inside a pass (FoldConstant's)
        if name.startswith(PHASE_MARKER_PREFIX) and not nested:
            self.phase = name[len(PHASE_MARKER_PREFIX):]
        elif name == RELAX_PIPELINE and not nested:  # tirx.build binds the target before the TIR pipeline's marker
            self.phase = "tir-lower"
        rec = frame.record
        if rec is not None:
            rec.ms, rec.self_ms = elapsed * 1e3, (elapsed - frame.nested) * 1e3
            after = self._key(mod, fresh=True)  # the same object may come back edited in place (dlight does)
            rec.changed = after != frame.before
            self.steps[rec.index] = (frame.before, after)
            if self.dumped(rec):
                self._print_soon(after)
                if rec.changed:
                    self._print_soon(frame.before)
        parent.overhead += time.perf_counter() - t_end

    @staticmethod
    def _is_leaf(name: str) -> bool:
        return bool(name) and name not in CONTAINER_PASSES and not name.startswith(PHASE_MARKER_PREFIX)

    def _view(self, mod: tvm.IRModule):
        """What is compared and dumped: the module, or the one function ``--dump-func`` names."""
        if self.dump is None or self.dump.func is None:
            return mod
        return next((f for gv, f in mod.functions_items() if gv.name_hint == self.dump.func), None)

    def _key(self, mod: tvm.IRModule, fresh: bool = False):
        """The state of ``mod``'s view (its structural hash); a new state is kept for printing after the build.
        A pass's input is nearly always the previous pass's output object, untouched in between: looked up."""
        if not fresh and self._last is not None and self._last[0].same_as(mod):
            return self._last[1]
        view = self._view(mod)
        if view is None:
            self._other_funcs.update(gv.name_hint for gv, _ in mod.functions_items())
        else:
            self._func_seen = True
        key = _ABSENT if view is None else tvm_ffi.structural_hash(view)
        if self.dump is not None and key not in self._states:
            # a module may later be edited in place (``mod[gv] = f``): keep a copy of its function table
            self._states[key] = view if self.dump.func else tvm.IRModule(
                dict(view.functions_items()), attrs=dict(view.attrs) if view.attrs else None,
                global_infos=dict(view.global_infos))
        self._last = (mod, key)
        return key

    def _print_soon(self, key) -> None:
        """Queue a state's TVMScript on the printer thread (once per state)."""
        if key != _ABSENT and key not in self._texts:
            state = self._states[key]  # a lone function prints as ``def main`` unless named
            named = {"name": self.dump.func} if self.dump.func else {}
            self._texts[key] = self._printer.submit(state.script, **named)

    def dumped(self, rec: PassRecord) -> bool:
        """Whether pass ``rec`` gets a file: dumping, its name passes the filter, it changed the IR or every
        pass is dumped, and it runs at the top (or nested passes are dumped)."""
        return self.dump is not None and rec.index in self.steps and self.dump.wants(rec.name) and (
            rec.changed or not self.dump.only_changed) and (rec.parent is None or self.dump.nested)

    def _diff(self, rec: PassRecord) -> list[str]:
        """Pass ``rec``'s diff against its own input (on the printer thread, after both texts it queued)."""
        before, after = self.steps[rec.index]
        stem = pass_stem(rec)
        return unified_diff(self.text(before).splitlines(), self.text(after).splitlines(),
                            f"before/{stem}", f"after/{stem}")

    def close(self) -> None:
        """Stop the printer thread, dropping queued prints: the owner of the build calls it when the build is
        over, dumps written or abandoned (an error, Ctrl-C)."""
        if self._printer is not None:
            self._printer.shutdown(wait=False, cancel_futures=True)

    def _failing_frame(self) -> _Frame | None:
        """After a build error: the innermost pass that was running (its frame still holds its input)."""
        return next((f for f in reversed(self._frames) if f.record is not None), None)

    # ---- after the build -----------------------------------------------------------------------------------

    def finish(self, meta: dict, error: str | None = None, codegen: dict[str, str] | None = None,
               attachments: dict[str, str] | None = None, meanwhile: Callable[[], object] | None = None) -> Path | None:
        """Hand the build to a new run folder's writer: every dump, the generated code (``codegen``, name ->
        text; each ``.ll`` also gets its assembly ``.s``), ``attachments`` (name -> text), ``index.json`` and
        ``index.html``; the ``complete`` marker is the caller's, once it is done (``run_folder.mark_complete``).
        ``meanwhile`` runs on this thread while the assembly is generated on another. Returns the folder (None:
        no dumping)."""
        failing = self._failing_frame() if error is not None else None
        if failing is not None:  # the pass that raised and every pass it ran inside: FAILED, at any depth shown
            for frame in self._frames:
                if frame.record is not None:
                    frame.record.error = error
        if self.dump is None:
            return None
        if error is None and self.dump.func is not None and not self._func_seen:
            raise UsageError(f"--dump-func {self.dump.func}: no function of that name in the module at any pass"
                             + did_you_mean(self.dump.func, self._other_funcs, list_known=True))
        writer = RunWriter(self.dump.root, f"{meta['case']}-{meta['target']['kind']}")
        writer.write_texts({**(codegen or {}), **(attachments or {})})
        with ThreadPoolExecutor(thread_name_prefix="mtp-dump-asm") as pool:
            assembly = writer.start_assembly(pool, codegen or {})
            # diffs are pure Python: queued now, not during the build, so they never hold the GIL the build's
            # pass callbacks wait for; they run while ``meanwhile`` (C++, GIL released) does
            self._diffs = {r.index: self._printer.submit(self._diff, r) for r in self.records
                           if r.changed and self.dumped(r)}
            if meanwhile is not None:
                meanwhile()
            if failing is not None:
                writer.write_failed_input(failing.record, self.text(failing.before))
            writer.write_passes(self, lambda rec: self._diffs[rec.index].result())
            history = writer.page_history(self.records)  # while the assembly thread finishes
            generated = sorted([*(codegen or {}), *(f.result().name for f in assembly)])
        writer.write_index(meta, error, {
            "dump": {"only_changed": self.dump.only_changed, "filter": self.dump.pass_filter, "func": self.dump.func,
                     "nested": self.dump.nested},
            "gate": gate_summary(self.records, self.gate), "input": INPUT_FILE, "tvm_version": tvm.__version__,
            "codegen": generated, "attachments": sorted(attachments or {}),
            "passes": [dataclasses.asdict(r) for r in self.records]}, history)
        return writer.run

    def text(self, key) -> str:
        """State ``key``'s TVMScript (waiting for the printer thread)."""
        if key == _ABSENT:
            return f"# function {self.dump.func} is not in this module\n"
        self._print_soon(key)
        return self._texts[key].result()
