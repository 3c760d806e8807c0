import json

import pytest

import mtp_tvm


def test_check_returns_a_typed_result_and_writes_the_report(tmp_path):
    report = tmp_path / "r.json"
    r = mtp_tvm.check(case="shared-head-logits", preset="tiny", frontend="relax", seed=3, report=report,
                      log=lambda *_: None)
    assert isinstance(r, mtp_tvm.CheckResult) and r.passed
    d = json.loads(report.read_text())
    assert {"case", "target", "preset", "frontend", "seed", "shapes", "passed", "outputs"} <= set(d)
    assert d["seed"] == 3 and d["target"]["kind"] == "llvm" and d["shapes"]["tokens"] == 8
    logits = d["outputs"]["candidate_logits"]
    assert {"comparator", "passed", "mismatches", "numel", "max_abs_diff", "worst_index"} <= set(logits)
    assert [c["comparator"].split("(")[0] for c in logits["checks"]] == ["ratio_allclose", "logits_contract"]


def test_a_zero_tolerance_check_fails_and_names_the_output():
    r = mtp_tvm.check(case="logits", preset="tiny", tolerance={"atol": 0.0, "rtol": 0.0, "max_error_ratio": 0.0},
                      log=lambda *_: None)
    assert not r.passed and not r.outputs["candidate_logits"].passed


@pytest.mark.slow
@pytest.mark.parametrize("case", ["tail", "tail-norm"])
def test_flash_tails_meet_their_goldens(case):
    r = mtp_tvm.check(case=case, preset="flash", frontend="tir", log=lambda *_: None)
    assert r.passed, r.as_dict()


def test_bad_seed_is_a_user_error():
    with pytest.raises(mtp_tvm.UsageError, match="seed"):
        mtp_tvm.check(case="logits", preset="tiny", seed=-1)
