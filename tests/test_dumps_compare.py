"""`mtp-tvm dumps compare RUN_A RUN_B` and `dumps show RUN --func NAME --history` read real run folders; the
text comparisons, the per-kernel code figures and the history underneath them on small inputs."""

import json
import shutil

import pytest
import tvm

import mtp_tvm
from mtp_tvm.cli import main
from mtp_tvm.instrument.ir_text import (
    DIFFERENT,
    IDENTICAL,
    NAMES,
    REORDERED,
    compare_texts,
    functions,
    split_functions,
)
from mtp_tvm.instrument.kernel_history import kernel_history
from mtp_tvm.tools.dumps.browse import load_index
from mtp_tvm.tools.dumps.compare import compare_runs
from mtp_tvm.tools.dumps.compare_page import compare_command
from mtp_tvm.tools.measure.kernel_code import assembly_kernels, cuda_kernels

# the vdpbf16ps path's schedule on any host (an AMX host's own has no unrolled loop for UnrollLoop to change)
LOGITS = dict(case="logits", preset="tiny", target={"kind": "llvm", "mcpu": "znver4", "num-cores": 2})


READS_RUNS = pytest.mark.slow  # the five builds with dumps of `runs` take seconds


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One dump root with the runs the tests compare (each a tiny logits build)."""
    from mtp_tvm.passes.plugins import load_pass_plugin

    root = tmp_path_factory.mktemp("dumps")
    build = lambda **kw: mtp_tvm.compile(**LOGITS, dump_passes=root, **kw).dump_dir  # noqa: E731
    return root, {
        "tir": build(frontend="tir"),
        "none": build(frontend="tir", schedule="none"),
        "relax": build(frontend="relax"),
        "plugin": build(frontend="tir", extra_passes=load_pass_plugin("examples/int32_logits_accumulator.py")),
        "no-unroll": build(frontend="tir", disable_passes=["tirx.UnrollLoop"]),
    }


def _cli(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@READS_RUNS
def test_a_run_compared_with_itself_is_identical(runs, capsys):
    root, r = runs
    rc, out, _ = _cli(["dumps", "--root", str(root), "compare", r["tir"].name, str(r["tir"])], capsys)
    assert rc == 0 and "\nidentical: every pass's module and the generated code are the same" in out
    c = compare_runs(r["tir"], r["tir"])
    assert c.identical and c.divergence is None and all(p.verdict == IDENTICAL for p in c.pairs if not p.depth)


@READS_RUNS
def test_tir_and_relax_frontends_diverge_at_the_input(runs, capsys):
    root, r = runs
    rc, out, _ = _cli(["dumps", "--root", str(root), "compare", r["tir"].name, r["relax"].name], capsys)
    assert rc == 0
    assert "settings that differ: frontend tir / relax" in out
    assert "first divergence: 000 input/input: different: main; only in A: lm_head_logits" in out
    assert "--- A main" in out and "+            lv: R.Tensor((256, 512)" in out  # the diff there, per function
    assert "kernel (host.s)" in out and "matmul" in out and "only in B" in out  # the generated code, per kernel


@READS_RUNS
def test_two_schedules_align_pass_by_pass(runs):
    _, r = runs
    c = compare_runs(r["tir"], r["none"])
    assert [k for k, a, b in c.settings()] == ["schedule"]
    apply = next(p for p in c.pairs if p.name == "ApplySchedules")
    assert c.pairs[c.divergence] is apply and c.pairs[0].verdict == IDENTICAL  # the schedule decides the rows
    assert (apply.a_state, apply.b_state, apply.verdict) == ("changed", ".", DIFFERENT)
    lifted = [p for p in c.pairs if p.phase == "schedule" and p.b is None]  # no packing without the schedule
    assert [p.name for p in lifted][:2] == ["SplitLayoutRewritePreproc", "SplitLayoutRewritePreproc"]
    host = next(f for f in c.code if f.name == "host.s")
    kernels = {name: (a, b) for name, a, b in host.kernels}
    assert kernels["lm_head_logits_prepacked"][1] is None and kernels["lm_head_logits"][0] is None
    assert kernels["pad_rows_bfloat16"][0].size > 0 and kernels["pad_rows_bfloat16"][1].size > 0


@READS_RUNS
def test_a_plugin_pass_is_named_as_the_divergence(runs, capsys):
    root, r = runs
    c = compare_runs(r["tir"], r["plugin"])
    assert c.counts()[1:] == (0, 1)
    p = c.pairs[c.divergence]
    assert (p.a, p.b, p.phase, p.name) == (None, 4, "fuse", "Int32LogitsAccumulator")
    assert [f.name for f in p.functions if f.verdict == DIFFERENT] == ["lm_head_logits"]
    assert any('"int32", scope="local"' in ln for ln in c.diff)
    rc, out, _ = _cli(["dumps", "--root", str(root), "compare", r["tir"].name, r["plugin"].name], capsys)
    assert rc == 0 and "first divergence: B 004 fuse/Int32LogitsAccumulator (only in B)" in out


@READS_RUNS
def test_a_disabled_pass_is_where_the_runs_diverge(runs):
    _, r = runs
    c = compare_runs(r["tir"], r["no-unroll"])
    p = c.pairs[c.divergence]
    assert (p.name, p.a_state, p.b_state) == ("tirx.UnrollLoop", "changed", "skipped")
    assert ("disabled passes", "-", "tirx.UnrollLoop") in c.settings()


@READS_RUNS
def test_passes_missing_from_one_run_are_shown_as_such(runs, tmp_path):
    _, r = runs
    copy = tmp_path / "edited"
    shutil.copytree(r["tir"], copy)
    index = json.loads((copy / "index.json").read_text())
    gone = [p["name"] for p in index["passes"] if p["phase"] == "legalize"][1:]  # unchanged passes: dropped
    index["passes"] = [p for p in index["passes"] if p["name"] not in gone]
    index["tvm_version"] = "0.28.0"  # as if another TVM had built it
    (copy / "index.json").write_text(json.dumps(index))
    c = compare_runs(r["tir"], copy)
    assert ("tvm_version", tvm.__version__, "0.28.0") in c.settings()
    assert [p.name for p in c.pairs if p.b is None] == gone and c.counts()[1:] == (len(gone), 0)
    assert c.divergence is None and not c.identical
    assert c.verdict().startswith("no divergence: every aligned module is identical")
    assert f"passes only in A: {len(gone)}" in c.verdict()


@READS_RUNS
def test_compare_writes_a_self_contained_html_page(runs, tmp_path, capsys):
    root, r = runs
    out = tmp_path / "cmp.html"
    rc, text, _ = _cli(["dumps", "--root", str(root), "compare", r["tir"].name, r["plugin"].name, "--html",
                        str(out)], capsys)
    assert rc == 0 and f"html: {out}" in text
    page = out.read_text()
    assert '<tr class="pair diff" id="divergence">' in page and "Int32LogitsAccumulator" in page
    assert '<td class="old d-del">' in page and '<td class="new d-add">' in page  # side by side
    assert "<script src" not in page and "http" not in page


@READS_RUNS
@pytest.mark.parametrize("argv, message", [
    (["compare", "nope", "latest"], "no run matches 'nope'"),
    (["show", "latest", "--func", "lm_head_logit", "--history"], "did you mean lm_head_logits"),
    (["show", "latest", "--history"], "add --func NAME"),
    (["show", "latest", "--func", "main"], "give PASS, or add --history"),
])
def test_user_errors_are_one_line_and_exit_2(runs, capsys, argv, message):
    root, _ = runs
    rc, _, err = _cli(["dumps", "--root", str(root), *argv], capsys)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


@READS_RUNS
def test_a_folder_that_is_no_run_and_an_unwritable_html_are_usage_errors(runs, tmp_path, capsys):
    root, r = runs
    (tmp_path / "empty").mkdir()
    rc, _, err = _cli(["dumps", "compare", str(r["tir"]), str(tmp_path / "empty")], capsys)
    assert rc == 2 and "is a folder but not a dump run: it has no index.json" in err
    target = tmp_path / "no" / "such" / "dir" / "c.html"
    rc, _, err = _cli(["dumps", "compare", str(r["tir"]), str(r["tir"]), "--html", str(target)], capsys)
    assert rc == 2 and "cannot write --html" in err and not target.exists() and not target.parent.exists()


@READS_RUNS
def test_a_kernel_history_follows_one_function(runs, capsys):
    root, r = runs
    rc, out, _ = _cli(["dumps", "--root", str(root), "show", r["tir"].name, "--func", "lm_head_logits",
                       "--history"], capsys)
    assert rc == 0 and out.startswith(f"lm_head_logits in {r['tir']}: in the input;")
    index = load_index(r["tir"])
    h = kernel_history(r["tir"], index, "lm_head_logits")
    assert [s.name for s in h.steps][0] == "ApplySchedules" and h.steps[-1].event == "removed"
    assert "=== 015 schedule/ApplySchedules: changed" in out and "T.parallel(16)" in out
    assert "def pad_rows_bfloat16" not in out  # the rest of the module is not shown
    prepacked = kernel_history(r["tir"], index, "lm_head_logits_prepacked")
    assert prepacked.steps[0].event == "added" and not prepacked.in_input
    # the passes LiftWeightPacking ran are folded into it (no files without --dump-nested): it made the change
    assert [s.name for s in prepacked.steps[:1]] == ["LiftWeightPacking"] and prepacked.steps[0].depth == 0
    rc, out, _ = _cli(["dumps", "--root", str(root), "show", r["tir"].name, "15", "--func", "lm_head_logits"], capsys)
    assert rc == 0 and out.lstrip().startswith("@T.prim_func") and "def main" not in out


# ---- the pieces, on small inputs --------------------------------------------------------------------------------

MODULE = '''# from tvm.script import tirx as T
n = TypeVar("n")
@I.ir_module
class Module:
    @T.prim_func(private=True)
    def f(X: T.Buffer((n, 4), "float32"), Y: T.Buffer((n, 4), "float32")):
        for i, j in T.grid(n, 4):
            with T.sblock("Y"):
                Y[i, j] = X[i, j] * T.float32(2.0)

    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32")):
        return x
'''


def test_functions_split_out_of_a_module_and_of_a_single_function_dump():
    lines = MODULE.splitlines()
    assert [(f.name, f.start, f.end) for f in split_functions(lines)] == [("f", 4, 9), ("main", 10, 13)]
    funcs = functions(MODULE)
    assert funcs["f"].startswith("    @T.prim_func") and funcs["main"].endswith("return x")
    assert "TypeVar" in funcs["(module)"] and "def " not in funcs["(module)"]
    single = "\n".join(ln[4:] for ln in lines[4:9])
    assert [f.name for f in split_functions(single.splitlines())] == ["f"]


def test_equal_up_to_names_but_not_up_to_dtypes_or_attributes():
    f = functions(MODULE)["f"]
    renamed = f.replace("X", "A").replace("Y", "B").replace("i, j", "p, q")  # the block is named after Y too
    assert compare_texts(f, f) == IDENTICAL
    assert compare_texts(f, renamed) == NAMES
    assert compare_texts(f, f.replace('"float32"), Y', '"float16"), Y')) == DIFFERENT  # a dtype
    assert compare_texts(f, f.replace("T.grid", "T.parallel")) == DIFFERENT          # an attribute after a dot
    assert compare_texts(f, f.replace("T.float32(2.0)", "T.float32(3.0)")) == DIFFERENT  # a number
    swapped = "\n".join(["a[0] = 1", "a[1] = 2"]), "\n".join(["a[1] = 2", "a[0] = 1"])
    assert compare_texts(*swapped) == REORDERED  # VMShapeLower's shape_func stores come in any order
    assert compare_texts(None, f) == "only in B"


ASM = """\t.text
\t.globl\t__tvm_ffi_kern
\t.type\t__tvm_ffi_kern,@function
__tvm_ffi_kern:
\tpushq\t%rax
\tleaq\t.L__tvm_parallel_lambda(%rip), %rdi
\tcallq\t__tvm_set_raised_1
.LBB0_1:
\tretq
.Lfunc_end0:
\t.size\t__tvm_ffi_kern, .Lfunc_end0-__tvm_ffi_kern
\t.globl\t__tvm_ffi_other
\t.type\t__tvm_ffi_other,@function
__tvm_ffi_other:
\tcallq\t__tvm_set_raised_1
\tretq
\t.size\t__tvm_ffi_other, 8
\t.type\t.L__tvm_parallel_lambda,@function
.L__tvm_parallel_lambda:
\tvfmadd231ps\t%zmm0, %zmm1, %zmm2  # a comment
\tvdpbf16ps\t%zmm0, %zmm1, %zmm2
\tretq
\t.size\t.L__tvm_parallel_lambda, 20
\t.type\t__tvm_set_raised_1,@function
__tvm_set_raised_1:
\tretq
"""


def test_assembly_instructions_per_kernel_with_its_parallel_body():
    k = assembly_kernels(ASM)
    assert sorted(k) == ["__tvm_set_raised_1", "kern", "other"]  # a helper two kernels call stands alone
    assert k["kern"].size == 4 + 3 and k["kern"].families == {"fma": 1, "vdpbf16ps": 1}
    assert k["other"].size == 2 and k["__tvm_set_raised_1"].size == 1


def test_cuda_lines_per_kernel():
    cu = ('extern "C" __global__ void __launch_bounds__(128) k_kernel(float* x);\n'
          'extern "C" __global__ void __launch_bounds__(128) k_kernel(float* x) {\n  x[0] = 1;\n}\n'
          'extern "C" __global__ void g_kernel(float* y) {\n}\n')
    assert {n: c.size for n, c in cuda_kernels(cu).items()} == {"g_kernel": 2, "k_kernel": 3}


@READS_RUNS
def test_rows_that_repeat_the_row_above_fold_into_one_line(runs):
    """Schedule none vs default differ from the input on: the 14 legalize/fuse passes that change neither run
    repeat the input's verdict, so they are one line, and the rows where a pass did change something stay."""
    _, r = runs
    c = compare_runs(r["tir"], r["none"])
    table = c.table().splitlines()
    folded = [ln for ln in table if "passes changing neither run" in ln]
    assert folded and folded[0].split()[:2] == ["002-005", "002-005"] and "4 passes" in folded[0]
    assert any(ln.split()[:2] == ["015", "015"] and "ApplySchedules" in ln for ln in table)
    assert len(table) < len(c.pairs) - 20  # fewer lines than rows
    # no row where a pass changed something and the runs differ folds (each may be a cause); nested ones fold
    # into their parent's row
    changed = [p for p in c.pairs if "changed" in (p.a_state, p.b_state) and p.verdict == DIFFERENT and not p.depth]
    assert all(any(f"{p.name}" in ln for ln in table) for p in changed)
    lift = next(k for k, p in enumerate(c.pairs) if p.name == "LiftWeightPacking")
    assert any(f"LiftWeightPacking [+{c.nested()[lift]} nested]" in ln for ln in table)
    assert not any(c.pairs[k].depth for k in c.visible() if k != c.divergence)


@READS_RUNS
def test_every_html_row_links_its_files_and_the_a_vs_b_diff_there(runs, tmp_path):
    """Each row of the page opens both runs' dump files and, where the modules differ, the diff at that pass."""
    import html as html_module
    import re

    _, r = runs
    out = tmp_path / "sub" / "cmp.html"
    out.parent.mkdir()
    compare_command(r["tir"], r["none"], str(out))
    page = out.read_text()
    rows = re.findall(r'<tr class="pair [^"]*"[^>]*>(.*?)</tr>', page)
    assert len(rows) == len(compare_runs(r["tir"], r["none"]).pairs)
    anchors = set(re.findall(r"<details id='([^']+)'", page))
    for row in rows:
        hrefs = [html_module.unescape(h) for h in re.findall(r"href='([^']+)'", row)]
        files = [h for h in hrefs if not h.startswith("#")]
        assert files and all((out.parent / f).is_file() for f in files), row
        diffs = [h[1:] for h in hrefs if h.startswith("#")]
        assert all(d in anchors for d in diffs)
    assert "A vs B after 015 schedule/ApplySchedules" in page
