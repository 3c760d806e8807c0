"""``--module FILE.py``: the user's own model (a torch module or a TVMScript IRModule) through the build, the golden
check, the debugging options and bisect; every broken contract a one-line error (exit 2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mtp_tvm.cli import main
from mtp_tvm.support.errors import UsageError

REPO = Path(__file__).resolve().parent.parent
TORCH_EXAMPLE = REPO / "examples" / "torch_mlp_block.py"
TVMSCRIPT_EXAMPLE = REPO / "examples" / "tvmscript_module.py"
BROKEN_GELU = REPO / "examples" / "tanh_gelu_approximation.py"

TORCH_HEAD = "import torch\n"
TINY_MODEL = """
class M(torch.nn.Module):
    def forward(self, x):
        return x * 2
"""


def _file(tmp_path: Path, body: str, name: str = "user_model.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


# ---- the contract: every broken one a one-line error -----------------------------------------------------

BROKEN_FILES = {
    "neither": ("x = 1\n", "defines neither model() (a torch.nn.Module) nor module()"),
    "both": (TORCH_HEAD + "def model(): pass\ndef module(): pass\ndef example_inputs(): pass\n",
             "defines both model() and module()"),
    "no example_inputs": (TORCH_HEAD + TINY_MODEL + "def model(): return M()\n",
                          "defines no example_inputs() function"),
    "raises at import": ("raise RuntimeError('half-written file')\n",
                         "(loading it) failed: RuntimeError: half-written file"),
    "exits at import": ("import sys\nsys.exit(3)\n", "called sys.exit(3); user code must return, not exit"),
    "model raises": (TORCH_HEAD + "def model(): raise ValueError('no weights')\n"
                     "def example_inputs(): return (torch.ones(2),)\n", "model() failed: ValueError: no weights"),
    "model wrong type": (TORCH_HEAD + "def model(): return 3\ndef example_inputs(): return (torch.ones(2),)\n",
                         "model() must return a torch.nn.Module, got int"),
    "inputs wrong type": (TORCH_HEAD + TINY_MODEL + "def model(): return M()\ndef example_inputs(): return [1, 2]\n",
                          "example_inputs() must return a tuple of torch tensors, got int, int"),
    "inputs empty": (TORCH_HEAD + TINY_MODEL + "def model(): return M()\ndef example_inputs(): return ()\n",
                     "example_inputs() must return a tuple of torch tensors, got an empty tuple"),
    "export fails": (TORCH_HEAD + TINY_MODEL + "def model(): return M()\n"
                     "def example_inputs(): return (torch.ones(2, 3),)\n"
                     "def dynamic_shapes(): return ({5: torch.export.Dim('b')},)\n", "torch.export of model() failed"),
    "module wrong type": ("def module(): return 'main'\ndef example_inputs(): return ()\n",
                          "module() must return a tvm.IRModule, got str"),
    "module without main": ("import tvm\ndef module(): return tvm.IRModule({})\ndef example_inputs(): return ()\n",
                            "module() has no Relax function 'main'"),
    "numpy inputs wrong type": (
        "import tvm\nfrom tvm.script import ir as I, relax as R\n"
        "@I.ir_module\nclass Mod:\n    @R.function\n    def main(x: R.Tensor((2,), 'float32')):\n        return x\n"
        "def module(): return Mod\ndef example_inputs(): return ([1.0, 2.0],)\n",
        "example_inputs() must return a tuple of numpy arrays, got list"),
    "numpy inputs count": (
        "import numpy as np\nfrom tvm.script import ir as I, relax as R\n"
        "@I.ir_module\nclass Mod:\n    @R.function\n"
        "    def main(x: R.Tensor((2,), 'float32'), y: R.Tensor((2,), 'float32')):\n"
        "        return R.add(x, y)\n"
        "def module(): return Mod\ndef example_inputs(): return (np.ones(2, 'float32'),)\n",
        "example_inputs() returned 1 arrays, main takes 2 (x, y)"),
    # round four: every way out of the file is one line naming the step and the line, never the parent's exit
    "os._exit at import": ("import os\nos._exit(0)\n",
                           "(loading it) called os._exit(0); user code must return, not exit (line 2, in <module>)"),
    "os._exit in model": (TORCH_HEAD + "import os\ndef model():\n    os._exit(0)\n"
                          "def example_inputs(): return (torch.ones(2),)\n",
                          "model() called os._exit(0); user code must return, not exit (line 4, in model)"),
    "killed by a signal": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
                           "(loading it) killed its process (SIGKILL)"),
    "eager reference fails": (TORCH_HEAD + "def model(): return torch.nn.Linear(4, 3)\n"
                              "def example_inputs(): return (torch.ones(2, 4, dtype=torch.float64),)\n",
                              "model() run eagerly on example_inputs() failed: RuntimeError: mat1 and mat2 must "
                              "have the same dtype"),
    "sparse example": (TORCH_HEAD + TINY_MODEL + "def model(): return M()\n"
                       "def example_inputs(): return (torch.ones(2, 4).to_sparse(),)\n",
                       "example_inputs()[0] is a torch.sparse_coo tensor on cpu: give dense tensors"),
    "meta example": (TORCH_HEAD + TINY_MODEL + "def model(): return M()\n"
                     "def example_inputs(): return (torch.ones(2, 4, device='meta'),)\n",
                     "example_inputs()[0] is a torch.strided tensor on meta: give dense tensors with values"),
    "data-dependent control flow": (TORCH_HEAD + "class M(torch.nn.Module):\n    def forward(self, x):\n"
                                    "        return x * 2 if x.sum() > 0 else x\n"
                                    "def model(): return M()\ndef example_inputs(): return (torch.ones(2, 4),)\n",
                                    "torch.export of model() failed: GuardOnDataDependentSymNode"),
    "shape error": (TORCH_HEAD + "class M(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x @ torch.ones(3, 3)\n"
                    "def model(): return M()\ndef example_inputs(): return (torch.ones(2, 4),)\n",
                    "torch.export of model() failed: RuntimeError: a and b must have same reduction dim, but got "
                    "[2, 4] X [3, 3]. (line 4, in forward)"),
    # round five: an operator the user's file registers exists in its child only
    "torch.library custom op": (TORCH_HEAD + "@torch.library.custom_op('mtp_test::twice', mutates_args=())\n"
                                "def twice(x: torch.Tensor) -> torch.Tensor:\n    return x * 2\n"
                                "twice.register_fake(lambda x: torch.empty_like(x))\n"
                                "class M(torch.nn.Module):\n    def forward(self, x):\n"
                                "        return twice(x) + 1\n"
                                "def model(): return M()\ndef example_inputs(): return (torch.ones(2, 4),)\n",
                                "custom operator mtp_test::twice at "),
}


EXPORTING = {"eager reference fails", "data-dependent control flow", "shape error",
             "torch.library custom op"}  # torch.export runs: seconds


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k in EXPORTING else k
                                  for k in BROKEN_FILES])
def test_a_broken_module_file_is_a_one_line_error_naming_what_is_wrong(tmp_path, kind):
    from mtp_tvm.ir.module_file import load_module_file

    body, message = BROKEN_FILES[kind]
    path = _file(tmp_path, body)
    with pytest.raises(UsageError) as e:
        load_module_file(path)
    assert message in str(e.value) and str(path) in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("path, message", [("missing.py", "does not exist"), ("model.txt", "is not a Python file")])
def test_a_module_path_that_is_no_python_file_is_refused(tmp_path, path, message):
    from mtp_tvm.ir.module_file import load_module_file

    (tmp_path / "model.txt").write_text("x = 1\n")
    with pytest.raises(UsageError, match=message):
        load_module_file(tmp_path / path)


@pytest.mark.slow  # torch.export runs: seconds
@pytest.mark.parametrize("kind", ["data-dependent control flow", "export fails", "shape error", "os._exit at import"])
def test_the_cli_prints_one_line_and_torchs_diagnostics_only_with_debug(tmp_path, capfd, kind):
    path = _file(tmp_path, BROKEN_FILES[kind][0])
    assert main(["check", "--module", str(path)]) == 2
    err = capfd.readouterr().err.strip()
    assert err.startswith("mtp-tvm: error: module file") and "\n" not in err, err
    if kind != "os._exit at import":
        assert main(["--debug", "check", "--module", str(path)]) == 2
        assert "Traceback" in capfd.readouterr().err  # the child's own, as the cause


@pytest.mark.slow  # torch.export runs: seconds
def test_the_file_cannot_move_the_parent_or_change_its_inputs(tmp_path):
    """``os.chdir`` at import and a model changing its input in place: the parent's folder and the example inputs
    (what the bench's peers and the artifact get) are as they were; the reference saw the change."""
    from mtp_tvm.ir.module_file import load_module_file

    path = _file(tmp_path, TORCH_HEAD + "import os\nos.chdir('/')\nclass M(torch.nn.Module):\n"
                 "    def forward(self, x):\n        x.mul_(2)\n        return x + 1\n"
                 "def model(): return M()\ndef example_inputs(): return (torch.ones(2, 4),)\n")
    cwd = os.getcwd()
    user = load_module_file(path)
    assert os.getcwd() == cwd
    assert (user.examples[user.activation_names[0]] == 1).all()
    assert (user.reference["output0"] == 3).all()


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive (a zombie waiting for its reaper is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_processes_the_file_starts_end_with_it(tmp_path):
    import time

    from mtp_tvm.ir.module_file import load_module_file

    pid_file = tmp_path / "pid"
    path = _file(tmp_path, TORCH_HEAD + TINY_MODEL + "import subprocess\n"
                 f"server = subprocess.Popen(['sleep', '600'])\nopen({str(pid_file)!r}, 'w').write(str(server.pid))\n"
                 "def model(): return M()\ndef example_inputs(): return (torch.ones(2, 4),)\n")
    load_module_file(path)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)


@pytest.mark.parametrize("make, what", [(lambda p: p.mkdir(), "is a folder"), (os.mkfifo, "is a FIFO")])
def test_a_folder_or_fifo_at_module_is_named_for_what_it_is(tmp_path, capsys, make, what):
    make(tmp_path / "m.py")
    assert main(["check", "--module", str(tmp_path / "m.py")]) == 2
    assert f"m.py {what}, not a Python file" in capsys.readouterr().err


def test_a_logger_left_on_a_closed_stream_does_not_end_the_child(tmp_path):
    """torch's loggers keep the stream they found at import: a test's capture, closed once that test ended. The
    child pointed them at its log with ``setStream``, whose flush of the closed stream raised, and every later
    module file of the process ended its child with exit code 1 and no word ("ended its process")."""
    import io
    import logging

    from mtp_tvm.ir.module_file import load_module_file

    closed = io.TextIOWrapper(io.BytesIO())
    closed.close()
    handler, logger = logging.StreamHandler(closed), logging.getLogger("mtp_tvm.test.closed_stream")
    logger.addHandler(handler)
    try:
        with pytest.raises(UsageError, match=r"defines neither model\(\)"):
            load_module_file(_file(tmp_path, BROKEN_FILES["neither"][0]))
    finally:
        logger.removeHandler(handler)
    assert handler.stream is closed  # the parent's own handler as it was


def test_the_cli_exits_2_with_one_line_for_a_broken_file(tmp_path, capsys):
    path = _file(tmp_path, "x = 1\n")
    assert main(["check", "--module", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mtp-tvm: error: module file") and "defines neither" in err and "\n" not in err


@pytest.mark.parametrize("flags", [["--case", "logits"], ["--preset", "tiny"], ["--tokens", "3"]])
def test_case_flags_with_module_are_refused(flags, capsys):
    assert main(["check", "--module", str(TORCH_EXAMPLE), *flags]) == 2
    assert f"{flags[0]} (which describe a case) cannot apply" in capsys.readouterr().err


def test_a_seed_without_another_shape_is_refused_naming_the_flag(capsys):
    """Round one's answer names the flag (``--seed ... cannot apply``); the API's, its keyword."""
    assert main(["check", "--module", str(TORCH_EXAMPLE), "--seed", "1"]) == 2
    assert "--seed cannot apply without --shape" in capsys.readouterr().err


def test_a_bad_tolerance_is_refused_before_the_build():
    from mtp_tvm.verify.tolerances import ModuleTolerance

    with pytest.raises(UsageError, match="atol must be a finite number >= 0"):
        ModuleTolerance(atol=-1.0)


def test_assert_close_tolerances_follow_the_dtype_and_the_users():
    import numpy as np

    from mtp_tvm.verify.module_golden import assert_close
    from mtp_tvm.verify.tolerances import ModuleTolerance

    e = np.ones(4, "float32")
    a = e + np.float32(1e-4)
    assert not assert_close(a, e, ModuleTolerance()).passed  # FP32 default: atol 1e-5, rtol 1.3e-6
    assert assert_close(a, e, ModuleTolerance(atol=1e-3)).passed
    assert assert_close(a.astype("float16"), e.astype("float16"), ModuleTolerance()).passed  # rtol 1e-3
    wrong_dtype = assert_close(e.astype("float64"), e, ModuleTolerance())
    assert not wrong_dtype.passed and "dtype mismatch" in wrong_dtype.detail
    assert not assert_close(np.array([1, 2]), np.array([1, 3]), ModuleTolerance()).passed  # integers: exact
    assert not assert_close(np.array([1, 2]), np.array([1, 3]), ModuleTolerance(atol=5)).passed  # whatever atol
    big = np.array([2**40, 1], np.int64)  # FP32 cannot tell 2**40 from 2**40 + 1
    assert not assert_close(big + np.array([1, 0]), big, ModuleTolerance()).passed
    mask = np.tril(np.ones((3, 3), bool))
    assert assert_close(mask, mask.copy(), ModuleTolerance()).passed
    flipped = assert_close(~mask, mask, ModuleTolerance(rtol=1.0))
    assert not flipped.passed and flipped.mismatches == 9


# ---- building and checking ----------------------------------------------------------------------------------

@pytest.mark.slow  # over 1 s
def test_the_torch_example_passes_with_dumps_that_the_dumps_tools_read(tmp_path, capsys, monkeypatch):
    dumps = tmp_path / "dumps"
    report = tmp_path / "report.json"
    assert main(["check", "--module", str(TORCH_EXAMPLE), "--dump-passes", str(dumps), "--dump-only-changed",
                 "--time-passes", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "output0  assert_close" in out and "output1  assert_close" in out and "PASSED" in out
    assert "pass timing" in out
    (run,) = dumps.iterdir()
    index = json.loads((run / "index.json").read_text())
    assert index["case"] == "module-torch-mlp-block" and index["check"]["passed"] is True
    assert (run / "index.html").is_file() and (run / "complete").is_file()
    assert json.loads(report.read_text())["passed"] is True
    monkeypatch.setenv("MTP_TVM_DUMPS", str(dumps))
    assert main(["dumps", "list"]) == 0
    assert "module-torch-mlp-block" in capsys.readouterr().out
    assert main(["dumps", "show", "latest", "--changed"]) == 0
    assert "LegalizeOps" in capsys.readouterr().out


@pytest.mark.slow  # over 1 s
def test_a_generic_kernel_no_rule_covers_is_reported_as_unscheduled():
    from mtp_tvm.tools.check.check import check

    lines = []
    result = check(TORCH_EXAMPLE, log=lines.append)
    assert result.passed
    assert "[schedule] no 'default' schedule covers layer_norm: lowered as written" in lines


@pytest.mark.slow  # over 1 s
def test_the_tvmscript_example_passes_its_differential_check():
    import mtp_tvm

    result = mtp_tvm.check(TVMSCRIPT_EXAMPLE)
    assert result.passed and list(result.outputs) == ["output0"]
    compiled = mtp_tvm.compile(TVMSCRIPT_EXAMPLE)
    import numpy as np

    x = {**compiled.make_inputs(), "x": np.ones((3, 64), "float32")}  # another row count: the size is symbolic
    assert compiled.run(x)["output0"].shape == (3, 128)


SCAN_AND_SORT = """
import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class ScanSort:
    @R.function
    def main(x: R.Tensor((8, 64), "float32"), w: R.Tensor((64,), "float32"), p: R.Tensor((64, 32), "float32")):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            y = R.sort(R.cumsum(R.multiply(x, w), axis=1), axis=1)
            z = R.matmul(y, p)
            R.output(z)
        return z


def module():
    return ScanSort


def example_inputs():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((8, 64), dtype=np.float32), rng.standard_normal((64,), dtype=np.float32),
            rng.standard_normal((64, 32), dtype=np.float32))
"""


@pytest.mark.slow  # over 1 s: a CPU and a CUDA build
def test_a_module_with_a_scan_and_a_sort_builds_for_cpu_and_cuda(tmp_path):
    """``R.cumsum`` and ``R.sort`` have no legalisation: TVM's default pipelines dispatch them to its own kernels
    first (``DispatchSortScan``), and so does ours (``passes.pipeline.library_dispatch``); without it neither
    target built. The dumps number those passes only in a build that runs them. A GEMM beside them packs its
    weight, whose lift (``lift_weight_packing``) must leave TVM's scan and sort kernels alone: the split it runs
    fails on a PrimFunc with no compute block."""
    import numpy as np

    import mtp_tvm

    path = _file(tmp_path, SCAN_AND_SORT, "scan_sort.py")
    compiled = mtp_tvm.compile(path, dump_passes=tmp_path / "dumps")
    inputs = compiled.make_inputs()
    expected = np.sort(np.cumsum(inputs["x"] * inputs["w"], axis=1), axis=1) @ inputs["p"]
    np.testing.assert_allclose(compiled.run(inputs)["output0"], expected, rtol=1e-4, atol=1e-4)
    assert (compiled.dump_dir / "003_legalize__DispatchSortScan.py").exists()
    lifted = {gv.name_hint for gv in compiled.optimized_module.get_global_vars()}
    assert {"main_transform_params", "matmul_weight_prepack", "cumsum", "sort"} <= lifted  # the packing lifted
    assert "__global__" in mtp_tvm.compile(path, target="cuda").device_source


TVMSCRIPT_MADE_WHEN_CALLED = """
import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R


def module():
    @I.ir_module
    class Relu:
        @R.function
        def main(x: R.Tensor(("n", 16), "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                y = R.nn.relu(x)
                R.output(y)
            return y
    return Relu


def example_inputs():
    return (np.random.default_rng(0).standard_normal((4, 16), dtype=np.float32),)
"""


def test_a_tvmscript_module_made_inside_module_checks(tmp_path, capsys):
    """TVMScript parses a class when ``@I.ir_module`` runs, which here is inside ``module()``, after the file
    loaded: the parser looks the file up in ``sys.modules`` by the class's ``__module__`` then."""
    own = _file(tmp_path, TVMSCRIPT_MADE_WHEN_CALLED, "own_tvmscript.py")
    (tmp_path / "other").mkdir()
    twin = _file(tmp_path / "other", TVMSCRIPT_MADE_WHEN_CALLED.replace("R.nn.relu", "R.sigmoid"), "own_tvmscript.py")
    assert main(["check", "--module", str(own)]) == 0, capsys.readouterr().err
    assert "PASSED" in capsys.readouterr().out
    assert main(["check", "--module", str(twin)]) == 0, capsys.readouterr().err  # same stem, its own source


@pytest.mark.slow  # over 1 s
def test_a_model_with_ops_the_examples_do_not_use_works_unchanged(tmp_path):
    from mtp_tvm.tools.check.check import check

    path = _file(tmp_path, """
        import torch

        class Odd(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.table = torch.nn.Embedding(32, 16)
                self.proj = torch.nn.Linear(32, 8)

            def forward(self, x, ids):
                e = self.table(ids)                          # an integer input
                s = x.sum(dim=1)                             # a reduction over a middle axis
                z = torch.cat([s, e], dim=-1)
                z = torch.where(z > 0, z, 0.1 * z)
                return self.proj(z), ids * 2

        def model():
            torch.manual_seed(0)
            return Odd()

        def example_inputs():
            g = torch.Generator().manual_seed(0)
            return torch.randn(5, 4, 16, generator=g), torch.randint(0, 32, (5,), generator=g)
        """)
    result = check(path, log=lambda *_: None)
    assert result.passed, str(result)
    assert result.shapes == {"x": [5, 4, 16], "ids": [5]}


@pytest.mark.slow  # over 1 s
def test_debug_options_apply_to_a_module(tmp_path):
    from mtp_tvm.tools.check.check import check

    result = check(TVMSCRIPT_EXAMPLE, log=lambda *_: None, disable_passes=("FoldConstant",),
                   dump_passes=str(tmp_path), dump_filter="Fuse", dump_func="main")
    assert result.passed and result.gate is not None
    assert any(r.name == "FoldConstant" and r.skipped for r in result.pass_records)
    with pytest.raises(UsageError, match="--disable-pass NoSuchPass: no pass of that name runs"):
        check(TVMSCRIPT_EXAMPLE, log=lambda *_: None, disable_passes=("NoSuchPass",))


def test_the_broken_plugin_fails_the_check_and_the_mismatch_table_says_where(capsys):
    assert main(["check", "--module", str(TORCH_EXAMPLE), "--pass-plugin", str(BROKEN_GELU)]) == 1
    out = capsys.readouterr().out
    assert "assert_close" in out and "FAIL" in out and "FAILED" in out


@pytest.mark.slow
def test_bisect_module_names_the_broken_plugin_pass(capsys):
    assert main(["bisect", "--module", str(TORCH_EXAMPLE), "--pass-plugin", str(BROKEN_GELU)]) == 0
    out = capsys.readouterr().out
    assert "FOUND first failing pass: 001 legalize/TanhGeluApproximation" in out


# ---- artifacts ------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("example", [TORCH_EXAMPLE, TVMSCRIPT_EXAMPLE], ids=["torch", "tvmscript"])
def test_build_module_makes_an_artifact_that_run_and_check_artifact_use(tmp_path, capsys, example):
    out = tmp_path / "art"
    assert main(["build", "--module", str(example), "--out", str(out), "--check"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["module"]["path"] == str(example) and manifest["golden"]["passed"] is True
    assert {"example_inputs.npz", "reference_outputs.npz"} <= {p.name for p in out.iterdir()}
    capsys.readouterr()
    assert main(["run", str(out), "--random-inputs", "--out", str(tmp_path / "o.npz")]) == 0
    assert "output0" in capsys.readouterr().out
    assert main(["check", "--artifact", str(out)]) == 0
    assert "PASSED" in capsys.readouterr().out
    # the artifact needs neither the file nor torch: it carries its inputs and reference outputs
    assert main(["run", str(out), "--random-inputs", "--seed", "3"]) == 2
    assert "runs on its stored example inputs" in capsys.readouterr().err
    # nor TVM's compiler: a deployment machine checks it with the runtime alone
    script = ("import tvm, mtp_tvm; assert tvm.base._RUNTIME_ONLY; "
              f"print(mtp_tvm.check_artifact({str(out)!r}, log=lambda *_: None).passed)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TVM_USE_RUNTIME_LIB": "1"})
    assert proc.returncode == 0 and proc.stdout.split() == ["True"], proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("example", [TORCH_EXAMPLE, TVMSCRIPT_EXAMPLE], ids=["torch", "tvmscript"])
def test_build_module_for_cuda_stores_a_reference_made_here(tmp_path, example):
    """No GPU needed: a torch model's reference is torch on the CPU; a TVMScript module's, its unscheduled CPU
    build (a GPU kernel cannot run unscheduled)."""
    out = tmp_path / "art"
    assert main(["build", "--module", str(example), "--target", "cuda", "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"]["kind"] == "cuda" and (out / "reference_outputs.npz").is_file()


def test_an_artifact_check_with_module_is_refused(capsys):
    assert main(["check", "--artifact", "somewhere", "--module", str(TORCH_EXAMPLE)]) == 2
    assert "drop --module" in capsys.readouterr().err


# ---- tuning ------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_tune_module_tunes_its_kernels_and_a_tuned_build_passes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MTP_TVM_TUNED_ROOT", str(tmp_path / "tuned"))
    assert main(["tune", "--module", str(TVMSCRIPT_EXAMPLE), "--trials", "3", "--space", "hand"]) == 0
    out = capsys.readouterr().out
    assert "fused_matmul_add_relu" in out and "module-tvmscript-module" in out
    assert main(["check", "--module", str(TVMSCRIPT_EXAMPLE), "--schedule", "tuned"]) == 0
    assert "schedule=tuned" in capsys.readouterr().out
    assert main(["tune", "--module", str(TVMSCRIPT_EXAMPLE), "--case", "logits"]) == 2


def test_localize_module_refuses_what_only_a_case_has(capsys):
    assert main(["localize", "--module", str(TORCH_EXAMPLE), "--localize-max-mb", "1"]) == 2
    assert "--localize-max-mb applies to a case" in capsys.readouterr().err
    assert main(["localize", "--case", "norm"]) == 2
    assert "localize of a case needs --against" in capsys.readouterr().err


def test_the_api_refuses_an_unknown_option():
    import mtp_tvm

    with pytest.raises(UsageError, match=r"compile\(\) got unknown option\(s\) preset \(a module file takes"):
        mtp_tvm.compile(TVMSCRIPT_EXAMPLE, preset="tiny")


@pytest.mark.slow
def test_profile_times_every_kernel_of_a_module(capsys):
    assert main(["check", "--module", str(TVMSCRIPT_EXAMPLE), "--profile"]) == 0
    out = capsys.readouterr().out
    assert "profile of main: case=module-tvmscript-module" in out and "fused_matmul_add_relu" in out


@pytest.mark.parametrize("text, imports_torch", [
    (TORCH_EXAMPLE.read_text(), True), (TVMSCRIPT_EXAMPLE.read_text(), False),
    ("from torch import nn\n", True), ("if True:\n    import torch.nn as nn\n", True),
    ("# import torch would be slow\nimport torchvision_free\n", False), ("x = 'import torch'\n", False)])
def test_the_torch_modules_of_an_export_are_imported_before_the_fork_only_for_a_file_that_imports_torch(
        tmp_path, monkeypatch, text, imports_torch):
    """A speed-up, never a verdict: the parent imports what the child's export and its own load share (the child
    inherits them), guessed from the file's text."""
    from mtp_tvm.ir import module_file

    imported = []
    monkeypatch.setattr(module_file.importlib, "import_module", imported.append)
    (tmp_path / "file.py").write_text(text)
    module_file._import_torch_export_before_the_fork(tmp_path / "file.py")
    assert imported == (list(module_file.TORCH_EXPORT_MODULES) if imports_torch else [])
    module_file._import_torch_export_before_the_fork(tmp_path / "missing.py")  # the child says why it cannot
