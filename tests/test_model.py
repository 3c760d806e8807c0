"""Every case x both frontends builds, runs and meets its golden; T is any count >= 1 and padding never leaks."""

import numpy as np
import pytest

from helpers import slow_except
from mtp_tvm.compiler.arrays import to_numpy
from mtp_tvm.contract.cases import CASES
from mtp_tvm.contract.presets import make_shapes
from mtp_tvm.verify.golden_check import compare_outputs

FRONTENDS = ("tir", "relax")


def _run_and_compare(compiled_case, tokens):
    case = compiled_case.case
    s = make_shapes("tiny", tokens=tokens)
    inputs = case.make_inputs(s, seed=tokens)
    actual = compiled_case.run({k: to_numpy(v) for k, v in inputs.items()})
    return actual, compare_outputs(case, s, actual, case.golden(inputs, s), inputs=inputs)


# the fast loop: every case through TIR (the builds other tests share), the Relax builds that take under ~1 s
@pytest.mark.parametrize("case, frontend", slow_except(
    [(case, frontend) for case in CASES for frontend in FRONTENDS],
    {(case, frontend) for case in CASES for frontend in FRONTENDS
     if frontend == "tir" or case in ("norm", "logits", "lm-head")}))
def test_every_case_meets_its_golden(compiled, case, frontend):
    actual, checks = _run_and_compare(compiled(case, frontend), tokens=8)
    assert set(actual) == set(CASES[case].output_specs(make_shapes("tiny")))
    for name, check in checks.items():
        assert check.passed, f"{case}/{frontend}/{name}: " + "; ".join(c.detail for c in check.checks)


@pytest.mark.parametrize("frontend", slow_except(FRONTENDS, {"tir"}))
@pytest.mark.parametrize("tokens", [1, 8, 16, 17])
def test_any_token_count(compiled, tokens, frontend):
    actual, checks = _run_and_compare(compiled("tail-norm", frontend), tokens)
    for name, check in checks.items():
        assert check.passed, f"T={tokens}/{name}: " + "; ".join(c.detail for c in check.checks)
        assert actual[name].shape[0] == tokens  # the pad to 16 stays inside the module


@pytest.mark.slow  # the Relax projection builds for seconds
def test_frontends_agree_on_the_projection(compiled):
    s = make_shapes("tiny")
    inputs = {k: to_numpy(v) for k, v in CASES["projection"].make_inputs(s, 3).items()}
    a = compiled("projection", "tir").run(inputs)["hidden_states_out"].astype(np.float32)
    b = compiled("projection", "relax").run(inputs)["hidden_states_out"].astype(np.float32)
    np.testing.assert_array_equal(a, b)


def test_specs_describe_the_binary(compiled):
    m = compiled("tail", "tir")
    assert m.input_specs["hidden_states"].shape == ("T", 256)
    assert m.output_specs["candidate_logits"].dtype == "float32"
    assert m.output_specs["hidden_states_out"].dtype == "bfloat16"
