"""localize names the first kernel call that computes differently from a reference build; --nan-check names the
first call that makes a NaN; kernel_repro/ reruns that one kernel on its own."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mtp_tvm
from helpers import EXAMPLES, QUIET, slow_except
from mtp_tvm.cli import main
from mtp_tvm.passes.plugins import load_pass_plugin
from mtp_tvm.support.errors import UsageError
from mtp_tvm.tools.check.kernel_calls import record
from mtp_tvm.tools.check.kernel_repro import kernel_script, rerun_kernels
from mtp_tvm.tools.check.localize import Against, localize
from mtp_tvm.tools.check.repro import save_arrays
from mtp_tvm.verify.results import NanReport
from mtp_tvm.verify.subject import CaseSubject

INT32 = EXAMPLES / "int32_logits_accumulator.py"
NAN = EXAMPLES / "nan_in_rms_norm.py"


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    return localize(case="tail", preset="tiny", extra_passes=load_pass_plugin(INT32), against="schedule=none",
                    dump_passes=tmp_path_factory.mktemp("dumps"), **QUIET)


def test_the_broken_kernel_is_the_first_differing_call_and_its_inputs_matched(broken):
    first = broken.first
    assert first.test.kernel == "lm_head_logits_prepacked" and first.reference.kernel == "lm_head_logits"
    assert first.inputs_matched and not first.outputs[0].passed
    before = broken.pairs[:broken.pairs.index(first)]
    assert before and all(not p.differs for p in before)  # the projection's calls agree
    after = broken.pairs[broken.pairs.index(first) + 1]
    assert after.test.kernel == "unpad_rows_float32" and after.differs and not after.inputs_matched
    assert not broken.passed and not broken.unpartnered_test and not broken.unpartnered_reference
    text = broken.table()
    assert "FIRST DIFFERING CALL: #9 lm_head_logits_prepacked (reference #9 lm_head_logits)" in text
    assert "its inputs matched the reference's: this kernel computes differently" in text
    assert "(main's argument)" in text and "from #7 w8a8_dual_gemm_prepacked" in text
    d = broken.as_dict()
    assert d["first"]["test"] == "#9 lm_head_logits_prepacked" and d["first_inputs_matched"] is True


@pytest.mark.slow  # a subprocess and builds
def test_the_kernel_reproducer_reproduces_alone_and_agrees_once_the_kernel_is_fixed(broken, compiled, tmp_path):
    folder = Path(broken.kernel_repro_dir)
    assert folder.parent == Path(broken.dump_dir)
    assert sorted(p.name for p in folder.iterdir()) == ["kernel.json", "reference_inputs.npz", "reference_kernel.py",
                                                        "repro.py", "test_inputs.npz", "test_kernel.py"]
    assert '"int32"' in (folder / "test_kernel.py").read_text()  # the plugin's effect, not the plugin
    run = subprocess.run([sys.executable, str(folder / "repro.py")], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "REPRODUCED: lm_head_logits_prepacked (test call #9)" in run.stdout
    # the plugin removed: the same call of a clean build (its kernel, its inputs) agrees with the reference
    fixed = tmp_path / "fixed"
    shutil.copytree(folder, fixed)
    clean = compiled("tail", "tir")
    call = record(clean, clean.case.make_inputs(clean.shapes, 0), keep=lambda i: i == 9)[8]
    (fixed / "test_kernel.py").write_text(kernel_script(clean, call.kernel))
    spec = json.loads((fixed / "kernel.json").read_text())
    spec["test"]["inputs"] = save_arrays(fixed / "test_inputs.npz",
                                         {f"in{i}": a for i, a in enumerate(call.input_arrays)})
    spec["test"]["args"] = [list(a) for a in call.args]
    (fixed / "kernel.json").write_text(json.dumps(spec))
    lines = []
    assert rerun_kernels(fixed, log=lines.append) == 0, lines
    assert lines[-1].startswith("NOT REPRODUCED")
    (fixed / "test_inputs.npz").unlink()
    assert rerun_kernels(fixed, log=lines.append) == 2 and "test_inputs.npz" in lines[-1]


@pytest.mark.slow  # two builds, over 1 s
def test_against_the_relax_frontend_a_passing_case_agrees_and_lists_the_calls_without_partner(capsys):
    assert main(["localize", "--case", "tail", "--preset", "tiny", "--against", "frontend=relax"]) == 0
    out = capsys.readouterr().out
    assert "every partnered call is within tolerance (2 calls)" in out
    assert "#17 unpad_rows" in out and "#19 unpad_rows1" in out  # renamed kernels still partner
    assert "no partner in the other build (test): #1 pad_rows_bfloat16" in out
    assert "no partner in the other build (reference): #1 fused_pad_rows_cast" in out
    assert "kernel reproducer" not in out


@pytest.mark.slow  # check and localize each build the NaN case
def test_a_nan_plugin_is_named_by_check_nan_check_and_by_localize(capsys, tmp_path):
    code = main(["check", "--case", "tail", "--preset", "tiny", "--pass-plugin", str(NAN), "--nan-check",
                 "--dump-passes", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert ("first non-finite value in the build: call #3 rms_norm_smooth, output 0 holds 256 NaN/Inf "
            "(the first at (0, 0)), while its inputs held none") in out
    # the failing dumped check also localized it against schedule=none, beside repro/
    assert "kernel reproducer: " in out
    run = next(tmp_path.iterdir())
    index = json.loads((run / "index.json").read_text())
    assert index["check"]["kernel_repro"] == "kernel_repro"
    assert json.loads((run / "kernel_repro" / "kernel.json").read_text())["test"]["kernel"] == "rms_norm_smooth"
    r = localize(case="tail", preset="tiny", extra_passes=load_pass_plugin(NAN), against="schedule=none",
                 kernel_repro=False, **QUIET)
    assert r.nan_test.kernel == "rms_norm_smooth" and r.nan_test.inputs_finite and r.nan_reference is None
    assert isinstance(r.nan_test, NanReport)  # what CheckResult.nan_origin is typed as
    assert r.first.test.kernel == "rms_norm_smooth" and r.kernel_repro_dir is None


def test_a_passing_check_with_nan_check_says_no_call_made_one(capsys):
    assert main(["check", "--case", "norm", "--preset", "tiny", "--nan-check"]) == 0
    assert "NaN/Inf: none in any kernel call's output" in capsys.readouterr().out


@pytest.mark.slow  # over 1 s
def test_the_memory_bound_compares_in_windows_with_the_same_verdicts(broken):
    r = localize(case="tail", preset="tiny", extra_passes=load_pass_plugin(INT32), against="schedule=none",
                 max_mb=0.1, kernel_repro=False, **QUIET)
    assert r.windows > 1 and r.kept_mb <= broken.kept_mb
    assert [(p.test.name, p.differs) for p in r.pairs] == [(p.test.name, p.differs) for p in broken.pairs]
    assert r.first.test.name == broken.first.test.name and r.first.inputs_matched
    assert f"compared in {r.windows} window(s) within --localize-max-mb 0.1" in r.table()


@pytest.mark.parametrize("against, message", [
    ("shedule=none", "did you mean schedule?"),
    ("schedule=nne", "--against schedule=nne: unknown schedule 'nne'"),
    ("frontend=tvm", "--against frontend=tvm: choose one of"),
    ("bisect-limit=x", "must be an integer"),
    ("schedule=none,schedule=default", "names schedule twice"),
    ("", "--against needs KEY=VALUE"),
])
def test_a_mistyped_against_is_a_one_line_error_before_any_build(against, message, capsys):
    assert main(["localize", "--case", "tail", "--preset", "tiny", "--against", against]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_against_parses_several_keys_and_drops_the_test_builds_debugging_changes():
    a = Against.parse('schedule=none,disable-pass=tirx.UnrollLoop,disable-pass=s_tir.X,target={"kind": "llvm"}')
    assert a.schedule == "none" and a.disable_passes == ("tirx.UnrollLoop", "s_tir.X")
    assert a.target == '{"kind": "llvm"}'
    subject = CaseSubject(mtp_tvm.compiler.options.BuildSpec(preset="tiny"))
    reference, debug = Against.parse("frontend=relax").reference(subject)
    assert reference.spec.frontend == "relax" and reference.spec.preset == "tiny"
    assert debug.extra_passes is None and debug.disable_passes == () and debug.bisect_limit is None
    with pytest.raises(UsageError, match="max-mb"):
        localize(case="tail", preset="tiny", against="schedule=none", max_mb=0, **QUIET)


@pytest.mark.parametrize("bad", slow_except(["tolerance deleted", "atol -1", "atol a string", "no test side"],
                                            {"tolerance deleted", "atol a string", "no test side"}))
def test_a_kernel_reproducer_with_a_bad_tolerance_or_field_is_broken_2_not_reproduced_1(broken, tmp_path, bad):
    folder = tmp_path / "kernel_repro"
    shutil.copytree(broken.kernel_repro_dir, folder)
    spec = json.loads((folder / "kernel.json").read_text())
    if bad == "tolerance deleted":
        del spec["tolerance"]
    elif bad == "no test side":
        del spec["test"]
    else:
        spec["tolerance"]["atol"] = -1.0 if bad == "atol -1" else "x"
    (folder / "kernel.json").write_text(json.dumps(spec))
    lines = []
    assert rerun_kernels(folder, log=lines.append) == 2 and lines[-1].startswith("repro: error:"), lines
    if bad == "atol -1":  # the launcher too: exit 2, one line (the launcher is a subprocess: slow only)
        run = subprocess.run([sys.executable, str(folder / "repro.py")], capture_output=True, text=True,
                             cwd=tmp_path)
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stdout + run.stderr


EVERY_DTYPE = ("int64", "int32", "int8", "float16", "float32", "bfloat16", "bool")
EVERY_DTYPE_MODULE = '''
import ml_dtypes
import numpy as np
from tvm.script import ir as I, relax as R


@I.ir_module
class Mod:
    @R.function
    def main(a: R.Tensor((2, 3), "int64"), b: R.Tensor((2, 3), "int32"), c: R.Tensor((2, 3), "int8"),
             d: R.Tensor((2, 3), "float16"), e: R.Tensor((2, 3), "float32"), f: R.Tensor((2, 3), "bfloat16"),
             g: R.Tensor((2, 3), "bool")):
        return (R.add(a, a), R.add(b, b), R.add(c, c), R.add(d, d), R.add(e, e), R.add(f, f), R.logical_not(g))


def module():
    return Mod


def example_inputs():
    return tuple(np.ones((2, 3), ml_dtypes.bfloat16 if d == "bfloat16" else d) for d in DTYPES)
'''


@pytest.fixture(scope="module")
def every_dtype(tmp_path_factory):
    path = tmp_path_factory.mktemp("dtypes") / "every_dtype.py"
    path.write_text(f"DTYPES = {EVERY_DTYPE!r}\n" + EVERY_DTYPE_MODULE)
    return mtp_tvm.compile(path)


@pytest.mark.slow  # builds a module of seven kernels
def test_the_kernel_call_recorder_and_the_kernel_reproducer_take_every_dtype(every_dtype, tmp_path):
    import numpy as np

    calls = record(every_dtype, every_dtype.make_inputs(), keep=lambda _i: True)
    assert sorted(c.outputs[0][1] for c in calls) == sorted(EVERY_DTYPE)
    for c in calls:
        expected = np.zeros((2, 3), bool) if c.outputs[0][1] == "bool" else np.full((2, 3), 2)
        assert (c.output_arrays[0].astype(np.float32) == expected).all() and c.nbytes > 0 and not c.nonfinite_inputs
        folder = tmp_path / c.kernel  # both sides the same kernel on the same inputs: must agree, whatever dtype
        folder.mkdir()
        side = {"kernel": c.kernel, "call": c.index, "target": "llvm", "args": [list(a) for a in c.args],
                "outputs": [[list(s), d] for s, d in c.outputs]}
        spec = {"tolerance": {}}
        for name in ("test", "reference"):
            (folder / f"{name}_kernel.py").write_text(kernel_script(every_dtype, c.kernel))
            inputs = save_arrays(folder / f"{name}_inputs.npz", {f"in{i}": a for i, a in enumerate(c.input_arrays)})
            spec[name] = {**side, "inputs": inputs}
        (folder / "kernel.json").write_text(json.dumps(spec))
        lines = []
        assert rerun_kernels(folder, log=lines.append) == 0, (c.kernel, lines)


def _every_case_and_frontend():
    from mtp_tvm.contract.cases import CASES
    from mtp_tvm.ir.frontend_names import FRONTEND_NAMES

    return [(c, f) for c in CASES for f in FRONTEND_NAMES]


@pytest.mark.slow  # a build per case and frontend (shared with the session)
@pytest.mark.parametrize("case, frontend", _every_case_and_frontend())
def test_localize_and_nan_check_run_on_every_case_and_frontend(compiled, case, frontend):
    """Every dtype a case's kernels take or return (int64 indices of the torch frontend's LM head...) goes
    through the recorder: the NaN search finds none, and localize against the relax frontend compares every
    call without an error."""
    from mtp_tvm.tools.check.kernel_calls import nan_origin
    from mtp_tvm.tools.check.localize import Against, LocalizeOptions, compare_builds

    test = compiled(case, frontend)
    assert nan_origin(record(test, test.case.make_inputs(test.shapes, 0))) is None
    result = compare_builds(test, compiled(case, "relax"), LocalizeOptions(Against(frontend="relax")))
    assert result.pairs or result.unpartnered_test  # every call recorded (partnered by kernel name, or listed)
