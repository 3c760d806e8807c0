import difflib
import json
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mtp_tvm
from helpers import REPO
from mtp_tvm.instrument.recorder import unified_diff
from mtp_tvm.instrument.report import timing_table
from mtp_tvm.passes.pipeline import RELAX_PHASES, TIR_PHASES

DUMP_NAME = re.compile(r"^(\d{3})_([a-z-]+)__(.+)\.(py|diff)$")


@pytest.fixture(scope="module")
def relax_run(tmp_path_factory):
    """One full dump of the Relax frontend's tail (the frontend whose kernels the passes change most)."""
    return mtp_tvm.compile(case="tail", preset="tiny", frontend="relax",
                           dump_passes=tmp_path_factory.mktemp("dumps"))


def _index(run: Path) -> dict:
    return json.loads((run / "index.json").read_text())


def test_dump_passes_writes_one_numbered_file_per_pass(relax_run):
    run = relax_run.dump_dir
    assert run.name.startswith("tail-llvm-")
    assert (run / "complete").exists() and "def main(" in (run / "000_input.py").read_text()
    passes = _index(run)["passes"]
    assert [p["index"] for p in passes] == list(range(1, len(passes) + 1))
    phases = {p["phase"] for p in passes}
    assert {"legalize", "fuse", "lower-dataflow", "finalize", "tir-lower", "tir-host"} <= phases
    assert phases <= {ph.name for ph in RELAX_PHASES} | set(TIR_PHASES)
    names = [p["name"] for p in passes]
    assert "sequential" not in names and not any(n.startswith("mtp.") for n in names)
    assert "LegalizeOps" in names and "FuseTIR" in names and "tirx.MakePackedAPI" in names
    assert all(p["file"] is None and p["parent"] is not None for p in passes if p["depth"])  # folded: no files
    for p in (p for p in passes if not p["depth"]):
        assert (run / p["file"]).exists()
        m_ = DUMP_NAME.match(p["file"])
        assert m_ and int(m_.group(1)) == p["index"] and m_.group(2) == p["phase"]
        assert (p["diff"] is not None) == p["changed"]
    legalize = next(p for p in passes if p["name"] == "LegalizeOps")
    assert legalize["changed"] and legalize["lines_added"] > 0


def test_a_pass_is_numbered_when_it_starts_and_its_diff_is_against_its_own_input(relax_run):
    passes = _index(relax_run.dump_dir)["passes"]
    fuse_tir = next(p for p in passes if p["name"] == "FuseTIR")
    inner = passes[fuse_tir["index"]]  # the pass right after FuseTIR's number runs inside it
    assert inner["depth"] == fuse_tir["depth"] + 1
    diff = (relax_run.dump_dir / fuse_tir["diff"]).read_text()
    assert diff.startswith(f"--- before/{fuse_tir['file'][:-3]}") and "+    def fused_" in diff


def test_the_final_generated_code_is_dumped(relax_run):
    run = relax_run.dump_dir
    index = _index(run)
    assert index["codegen"] == ["host.ll", "host.s"] and index["attachments"] == ["schedule_trace.py"]
    assert "define " in (run / "host.ll").read_text()
    asm = (run / "host.s").read_text()
    assert ".text" in asm and re.search(r"\.globl\s+__tvm_ffi_fused_\w*matmul", asm)
    # made from the dumped host.ll on another thread, it is the built module's own assembly
    built = next(m for m in relax_run.executable.mod.imports if m.kind == "llvm")
    assert asm == built.inspect_source("asm")


def test_a_dumping_build_returns_its_binary_jit_compiled_and_stops_its_threads(relax_run):
    assert relax_run._vm is not None  # the JIT ran while the dumps were written
    deadline = time.monotonic() + 10
    while any(t.name.startswith("mtp-dump") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("mtp-dump")]


def test_timing_outlives_the_pass_context_self_within_inclusive(relax_run):
    records = relax_run.pass_records
    assert records and all(r.ms >= 0 and r.self_ms <= r.ms + 1e-6 for r in records)
    fuse_tir = next(r for r in records if r.name == "FuseTIR")
    children = [r for r in records if r.index > fuse_tir.index and r.depth == fuse_tir.depth + 1][:3]
    assert fuse_tir.ms >= sum(c.ms for c in children) - 1e-3
    table = timing_table(records, top=5)
    assert table.splitlines()[0] == f"pass timing: top 5 of {len(records)} passes by self time"
    assert "per phase (self ms): legalize" in table


@pytest.mark.slow  # over 1 s: two builds with dumps
def test_only_changed_and_two_runs_never_share_a_folder(tmp_path):
    a = mtp_tvm.compile(case="logits", preset="tiny", dump_passes=tmp_path, dump_only_changed=True).dump_dir
    b = mtp_tvm.compile(case="logits", preset="tiny", dump_passes=tmp_path).dump_dir
    assert a != b
    ia, ib = (_index(r)["passes"] for r in (a, b))
    assert len(ia) == len(ib)  # unchanged passes are still in the index ...
    assert all(p["file"] is None for p in ia if not p["changed"])  # ... but have no file
    assert len(list(a.glob("*.py"))) < len(list(b.glob("*.py")))


def test_filter_by_pass_name_and_by_function(tmp_path):
    m = mtp_tvm.compile(case="logits", preset="tiny", dump_passes=tmp_path, dump_filter=r"^tirx\.",
                        dump_func="pad_rows_bfloat16")
    index = _index(m.dump_dir)
    assert index["dump"] == {"only_changed": False, "filter": r"^tirx\.", "func": "pad_rows_bfloat16", "nested": False}
    files = [p for p in index["passes"] if p["file"]]
    assert files and all(p["name"].startswith("tirx.") for p in files)
    assert len(files) < len(index["passes"])
    text = (m.dump_dir / next(p["file"] for p in files if p["name"] == "tirx.FlattenBuffer")).read_text()
    assert "def pad_rows_bfloat16(" in text and "def main(" not in text and "def lm_head" not in text
    text = (m.dump_dir / "000_input.py").read_text()  # before any pass names it: still not ``def main``
    assert "def pad_rows_bfloat16(" in text and "def main(" not in text, text[:400]
    # "changed" is about the function: the Relax-level lowering leaves it alone, the TIR lowering does not
    by_name = {p["name"]: p for p in index["passes"]}
    assert not by_name["CallTIRRewrite"]["changed"] and by_name["tirx.MakePackedAPI"]["changed"]


def test_a_failing_build_still_dumps_and_names_the_failing_pass(tmp_path):
    with pytest.raises(mtp_tvm.BuildError, match="IR dumps: ") as e:
        mtp_tvm.compile(case="logits", preset="tiny", dump_passes=tmp_path, disable_passes=["tirx.MakePackedAPI"])
    run = Path(re.search(r"IR dumps: (\S+)\)", str(e.value)).group(1))
    index = _index(run)
    assert index["status"] == "build failed" and (run / "complete").exists()
    failed = [p for p in index["passes"] if p["error"]]
    assert len(failed) == 1 and "MakePackedAPI" in failed[0]["error"]
    assert "def pad_rows_bfloat16(" in (run / failed[0]["input_file"]).read_text()
    assert next(p for p in index["passes"] if p["name"] == "tirx.MakePackedAPI")["skipped"] == "disabled"


@pytest.mark.parametrize("kwargs, message", [
    ({"disable_passes": ["FuseTir"]}, "no pass of that name runs; did you mean FuseTIR"),
    ({"dump_filter": "(unclosed"}, "bad --dump-filter regex"),
    ({"bisect_limit": -1}, "bisect limit must be"),
    ({"extra_passes": {"finalize": []}}, "only legalize, fuse, schedule take them"),
])
def test_user_errors_leave_no_run_folder(tmp_path, kwargs, message):
    with pytest.raises(mtp_tvm.UsageError, match=message):
        mtp_tvm.compile(case="logits", preset="tiny", dump_passes=tmp_path, **kwargs)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # two subprocesses, each importing tvm and building
def test_two_concurrent_dumping_processes_write_two_complete_distinct_folders(tmp_path, prefork):
    script = ("import mtp_tvm; print(mtp_tvm.compile(case='logits', preset='tiny', "
              f"dump_passes={str(tmp_path)!r}).dump_dir)")
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([*prefork.python, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    dirs = [Path(p.communicate(timeout=300)[0].strip()) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert dirs[0] != dirs[1] and sorted(tmp_path.iterdir()) == sorted(dirs)
    for run in dirs:
        index = _index(run)
        assert (run / "complete").exists() and (run / "index.html").exists()
        assert all((run / p["file"]).exists() for p in index["passes"] if not p["depth"])
        assert all((run / f).exists() for f in index["codegen"])


def test_a_pass_that_edits_its_input_in_place_is_seen_changed_and_earlier_dumps_stay_intact(tmp_path):
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="EditInPlace")
    def edit(mod, _ctx):  # as dlight's ApplyDefaultSchedule does: mod[gv] = f on the module it was given
        gv = next(gv for gv in mod.get_global_vars() if gv.name_hint == "lm_head_logits")
        mod[gv] = mod[gv].with_attr("edited_in_place", 1)
        return mod

    m = mtp_tvm.compile(case="logits", preset="tiny", dump_passes=tmp_path, extra_passes={"fuse": [edit]})
    passes = {p["name"]: p for p in _index(m.dump_dir)["passes"]}
    assert passes["EditInPlace"]["changed"] and passes["EditInPlace"]["lines_added"] == 1
    assert '"edited_in_place": 1' in (m.dump_dir / passes["EditInPlace"]["diff"]).read_text()
    assert "edited_in_place" not in (m.dump_dir / passes["FoldConstant"]["file"]).read_text()


def test_a_cuda_build_dumps_its_cuda_source_without_a_gpu(tmp_path):
    m = mtp_tvm.compile(case="logits", preset="tiny", frontend="relax", target="cuda", dump_passes=tmp_path)
    index = _index(m.dump_dir)
    assert m.dump_dir.name.startswith("logits-cuda-")
    assert "device_source.cu" in index["codegen"] and "host.ll" in index["codegen"]  # device + host
    assert "__global__" in m.device_source and (m.dump_dir / "device_source.cu").read_text() == m.device_source
    by_name = {p["name"]: p for p in index["passes"]}
    assert by_name["ApplySchedules"]["phase"] == "schedule" and by_name["ApplySchedules"]["changed"]
    assert not by_name["ApplySchedules"]["optional"]  # threads must be bound on a GPU
    assert "tir-device" in {p["phase"] for p in index["passes"]}


def _apply(a: list[str], diff: list[str]) -> list[str]:
    """Apply a unified diff to ``a``, checking every context and removed line and both sides' hunk numbers."""
    out, i = [], 0
    for ln in diff[2:]:
        if ln.startswith("@@ "):
            m = re.fullmatch(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(?: def \w+)?", ln)
            old_first = int(m[1]) - (1 if m[2] != "0" else 0)   # 0-based; a count of 0 names the line before
            new_first = int(m[3]) - (1 if m[4] != "0" else 0)
            out += a[i:old_first]
            i = old_first
            assert len(out) == new_first
        elif ln[0] in " -":
            assert a[i] == ln[1:]
            i += 1
            if ln[0] == " ":
                out.append(ln[1:])
        else:
            out.append(ln[1:])
    return out + a[i:]


lines = st.lists(st.sampled_from(["a", "b", "c", "    def f():", "x = 1"]), max_size=12)


@settings(max_examples=300, deadline=None)
@given(lines, lines, lines, lines)
def test_the_trimmed_unified_diff_is_a_correct_patch(head, old, new, tail):
    a, b = head + old + tail, head + new + tail
    diff = unified_diff(a, b, "before", "after")
    assert (diff == []) == (a == b)
    assert diff == [] or diff[:2] == ["--- before", "+++ after"]
    assert _apply(a, diff) == b


def test_the_trimmed_unified_diff_equals_difflib_on_a_local_change():
    a = [f"line {i}" for i in range(400)]
    b = a[:200] + ["changed"] + a[201:350] + ["new", "lines"] + a[350:]
    assert unified_diff(a, b, "x", "y") == list(difflib.unified_diff(a, b, "x", "y", lineterm=""))


def test_an_unknown_dump_func_is_refused_and_writes_no_run(tmp_path):
    from mtp_tvm.support.errors import UsageError

    with pytest.raises(UsageError, match="--dump-func nope: no function of that name"):
        mtp_tvm.compile(case="norm", preset="tiny", dump_passes=tmp_path, dump_func="nope")
    assert list(tmp_path.iterdir()) == []


def test_diff_hunks_name_the_function_they_change():
    """As git's hunk headers do: a reader of a long module diff sees which kernel each hunk is in."""
    from mtp_tvm.instrument.ir_text import unified_diff

    a = ["@I.ir_module", "class Module:", "    @T.prim_func", "    def f(x):",
         *[f"        v{i} = {i}" for i in range(9)],
         "", "    @T.prim_func", "    def g(y):", "        p = 1", "        q = 2"]
    b = list(a)
    b[4], b[-1] = "        v0 = 10", "        q = 20"
    headers = [ln for ln in unified_diff(a, b, "A", "B") if ln.startswith("@@")]
    assert headers == ["@@ -2,7 +2,7 @@ def f", "@@ -15,4 +15,4 @@ def g"]
    assert _apply(a, unified_diff(a, b, "A", "B")) == b
