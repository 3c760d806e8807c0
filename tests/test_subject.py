"""``verify.subject``: a case or a module file made once per command, and every verb asking it rather than the
spec's type."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mtp_tvm
from mtp_tvm.compiler.options import BuildSpec, DebugOptions, ModuleSpec
from mtp_tvm.ir import module_file
from mtp_tvm.support.errors import UsageError
from mtp_tvm.verify.subject import CaseSubject, ModuleSubject, subject_of
from mtp_tvm.verify.tolerances import ModuleTolerance, RatioTolerance

REPO = Path(__file__).resolve().parent.parent
TORCH_EXAMPLE = REPO / "examples" / "torch_mlp_block.py"


def test_every_form_of_the_api_makes_one_subject():
    case, debug = subject_of(None, None, {"case": "tail", "preset": "tiny", "dump_passes": True}, "check")
    assert isinstance(case, CaseSubject) and case.spec == BuildSpec(case="tail", preset="tiny")
    assert debug.dump_passes and "case=tail preset=tiny" in case.describe()
    module, _ = subject_of(str(TORCH_EXAMPLE), None, {"schedule": "none"}, "check")
    assert isinstance(module, ModuleSubject) and module.spec == ModuleSpec(str(TORCH_EXAMPLE), schedule="none")
    same, _ = subject_of(case, DebugOptions(), {}, "check")
    assert same is case  # a subject given is the subject used
    other, _ = subject_of(case, None, {"schedule": "none"}, "check")
    assert isinstance(other, CaseSubject) and other.spec.schedule == "none" and case.spec.schedule != "none"
    with pytest.raises(UsageError, match="unknown option"):
        subject_of(case, None, {"shedule": "none"}, "check")


def test_each_kind_says_how_its_outputs_are_judged():
    case = CaseSubject(BuildSpec(case="tail", preset="tiny"))
    module = ModuleSubject(ModuleSpec(str(TORCH_EXAMPLE)))
    assert isinstance(case.tolerance(None), RatioTolerance) and isinstance(module.tolerance(None), ModuleTolerance)
    exact = module.tolerance({"exact": True})
    a, b = np.array([1.0, 2.0], np.float32), np.array([1.0, 2.5], np.float32)
    assert module.comparison(exact)(a, a).passed and not module.comparison(exact)(a, b).passed
    with pytest.raises(UsageError):
        module.rebuilt(ModuleSpec(str(REPO / "examples" / "tvmscript_module.py")))


@pytest.mark.slow  # three builds of a module file
def test_a_module_file_is_loaded_once_per_command(monkeypatch):
    """Its reference builds and rechecks reuse the first load: the file runs once, in one child process."""
    loads = []
    real = module_file.load_module_file
    monkeypatch.setattr(module_file, "load_module_file", lambda path: loads.append(path) or real(path))
    subject = ModuleSubject(ModuleSpec(str(TORCH_EXAMPLE)))
    result = mtp_tvm.localize(subject, against="schedule=none", kernel_repro=False, log=lambda *_: None)
    assert result.first is None and len(loads) == 1
    assert mtp_tvm.check(subject, log=lambda *_: None).passed and len(loads) == 1
    assert mtp_tvm.check(str(TORCH_EXAMPLE), log=lambda *_: None).passed and len(loads) == 2  # a new command


def test_tune_takes_a_module_file_as_its_subject_or_as_its_option_not_both():
    from mtp_tvm.tools.tune.options import TuneOptions
    from mtp_tvm.tools.tune.tune import tune

    with pytest.raises(UsageError, match="module file twice"):
        tune(str(TORCH_EXAMPLE), TuneOptions(module=str(TORCH_EXAMPLE)))
    with pytest.raises(UsageError, match="a module file takes module, target, schedule"):
        tune(None, TuneOptions(module=str(TORCH_EXAMPLE)), preset="tiny")  # a case's knob cannot apply
