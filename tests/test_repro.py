"""A failing golden check leaves a reproducer that rebuilds and re-checks the failing module on its own."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mtp_tvm
from helpers import INT32_ACCUMULATOR_PLUGIN, slow_except
from mtp_tvm.tools.check.repro import rerun


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    from mtp_tvm.passes.plugins import load_pass_plugin

    return mtp_tvm.check(case="tail", preset="tiny", extra_passes=load_pass_plugin(INT32_ACCUMULATOR_PLUGIN), seed=3,
                         dump_passes=tmp_path_factory.mktemp("dumps"), log=lambda *_: None)


def test_a_failing_check_writes_the_reproducer_into_its_run_folder(failing):
    assert not failing.passed and failing.failed_outputs == ["candidate_logits"]
    repro = Path(failing.repro_dir)
    assert repro.parent == Path(failing.dump_dir)
    assert sorted(p.name for p in repro.iterdir()) == ["command.txt", "expected.npz", "inputs.npz", "module.py",
                                                       "repro.json", "repro.py", "target.json"]
    assert json.loads((repro / "target.json").read_text())["kind"] == "llvm"
    command = (repro / "command.txt").read_text()
    assert command.startswith("mtp-tvm check --case tail --target llvm --preset tiny --frontend tir --tokens 8 "
                              "--vocab-shard 512 --schedule default --owners 2 --tp 2 --seed 3 --extra-passes ")
    assert "Int32LogitsAccumulator" not in (repro / "module.py").read_text()  # a module, not a pipeline
    assert '"int32"' in (repro / "module.py").read_text()  # ... with the broken pass's effect in it
    index = json.loads((Path(failing.dump_dir) / "index.json").read_text())
    assert index["check"] == {"passed": False, "seed": 3, "failed_outputs": ["candidate_logits"], "repro": "repro",
                              "kernel_repro": "kernel_repro"}


@pytest.mark.slow  # the reproducer runs in a fresh interpreter (imports tvm, rebuilds)
def test_repro_py_runs_standalone_and_reproduces(failing, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # it finds mtp_tvm by itself
    out = subprocess.run([sys.executable, str(Path(failing.repro_dir) / "repro.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "REPRODUCED: candidate_logits fails the golden check" in out.stdout
    assert "candidate_logits   ratio_allclose" in out.stdout


@pytest.mark.slow  # over 1 s
def test_the_reproducer_tells_when_the_module_is_fixed(failing, compiled, tmp_path):
    fixed = compiled("tail", "tir")  # the same case without the broken pass
    folder = tmp_path / "repro"
    shutil.copytree(failing.repro_dir, folder)
    (folder / "module.py").write_text(fixed.optimized_module.script())
    lines = []
    assert rerun(folder, log=lines.append) == 0 and lines[-1].startswith("NOT REPRODUCED")


def test_the_reproducer_keeps_the_gate_of_the_lowering_phases(tmp_path):
    from mtp_tvm.passes.plugins import load_pass_plugin

    r = mtp_tvm.check(case="logits", preset="tiny", extra_passes=load_pass_plugin(INT32_ACCUMULATOR_PLUGIN),
                      bisect_limit=10,
                      disable_passes=["FoldConstant", "tirx.UnrollLoop"], dump_passes=tmp_path, log=lambda *_: None)
    spec = json.loads((Path(r.repro_dir) / "repro.json").read_text())
    # FoldConstant ran before the captured module; the limit of 10 lies in the optimizing phases, so the
    # lowering phases run with no optional pass: limit 0
    assert spec["gate"] == {"disabled": ["tirx.UnrollLoop"], "limit": 0}
    assert "--bisect-limit 10" in (Path(r.repro_dir) / "command.txt").read_text()


@pytest.mark.slow  # over 1 s: an export and a run
def test_mtp_tvm_run_accepts_the_reproducers_inputs(failing, compiled, tmp_path, capsys):
    from mtp_tvm.artifact.export import export
    from mtp_tvm.cli import main

    art = export(compiled("tail", "tir"), tmp_path / "tail").path
    out = tmp_path / "out.npz"
    assert main(["run", str(art), "--inputs", str(Path(failing.repro_dir) / "inputs.npz"), "--out", str(out)]) == 0
    assert out.is_file() and "candidate_logits" in capsys.readouterr().out


@pytest.mark.parametrize("damage", slow_except(["repro.json", "module.py", "inputs.npz"], {"repro.json", "module.py"}))
def test_a_broken_reproducer_exits_2_not_reproduced_1(failing, tmp_path, damage):
    folder = tmp_path / "repro"
    shutil.copytree(failing.repro_dir, folder)
    (folder / damage).write_bytes(b"{ damaged" if damage != "inputs.npz" else b"")
    lines = []
    assert rerun(folder, log=lines.append) == 2 and lines[-1].startswith("repro: error:")


@pytest.mark.slow  # over 1 s: a build of the tail
def test_a_failing_check_that_cannot_write_its_reproducer_still_reports_the_failure(monkeypatch, capsys):
    from mtp_tvm.cli import main

    monkeypatch.setenv("MTP_TVM_DUMPS", "/proc/self/no-such-folder/dumps")  # unwritable even as root
    rc = main(["check", "--case", "tail", "--preset", "tiny", "--schedule", "none", "--seed", "3",
               "--pass-plugin", str(INT32_ACCUMULATOR_PLUGIN)])
    out = capsys.readouterr().out
    assert rc == 1 and "FAILED" in out and "reproducer: not written: cannot create dump folder under /proc" in out


def test_the_reproducer_folder_gets_the_mode_mkdir_would_give(failing, tmp_path):
    (tmp_path / "plain").mkdir()
    assert os.stat(failing.repro_dir).st_mode == (tmp_path / "plain").stat().st_mode


def test_a_failing_result_reads_as_one_line_naming_what_failed(failing):
    """``str(r)``/``repr(r)`` of a CheckResult is a summary a notebook user can read, not pages of dataclass."""
    text = str(failing)
    assert text == repr(failing) and "\n" not in text and len(text) < 600
    assert text.startswith("CheckResult(tail on llvm, preset tiny, frontend tir, schedule default, T=8, seed 3): "
                           "FAILED ")
    assert "candidate_logits ratio_allclose " in text and "max |diff|" in text and failing.repro_dir in text
    assert "hidden_states_out" not in text  # the output that passed is not listed


BAD_TOLERANCES = {"deleted": KeyError, "atol -1": -1.0, "atol a string": "x", "atol NaN": float("nan")}


def _with_tolerance(spec: dict, key: str, bad) -> None:
    if bad is KeyError:
        del spec[key]
    else:
        spec[key]["atol"] = bad


@pytest.mark.parametrize("bad", slow_except(list(BAD_TOLERANCES), {"atol -1"}))
def test_a_reproducer_with_a_bad_tolerance_is_broken_2_not_reproduced_1(failing, tmp_path, bad):
    folder = tmp_path / "repro"
    shutil.copytree(failing.repro_dir, folder)
    spec = json.loads((folder / "repro.json").read_text())
    _with_tolerance(spec, "tolerance", BAD_TOLERANCES[bad])
    (folder / "repro.json").write_text(json.dumps(spec))
    lines = []
    assert rerun(folder, log=lines.append) == 2 and lines[-1].startswith("repro: error:"), lines


def test_the_launcher_puts_the_checkout_that_wrote_it_first():
    """repro.py imports the mtp_tvm that wrote it: the folder holding the package (tools/check/ sits two below
    it), not the package itself."""
    from mtp_tvm.tools.check.repro import PROJECT_ROOT, launcher

    assert (PROJECT_ROOT / "mtp_tvm" / "__init__.py").is_file()
    assert repr(str(PROJECT_ROOT)) in launcher("mtp_tvm.tools.check.repro", "rerun", "doc")
