"""verify/tolerances.py: the typed tolerances, checked when made, and the one reading of the dict form."""

import dataclasses

import pytest

from helpers import REPO
from mtp_tvm.cli import main
from mtp_tvm.support.errors import UsageError
from mtp_tvm.verify.golden_check import GoldenOptions
from mtp_tvm.verify.tolerances import LogitsTolerance, ModuleTolerance, RatioTolerance, Tolerance

LOOSE_EPSILON = str(REPO / "tests" / "modules" / "loose_epsilon.py")  # eps 1e-6 -> 1e-3: inside the tolerance
BF16_NORM = str(REPO / "tests" / "modules" / "bf16_norm.py")


def test_the_defaults_are_the_specs():
    assert dataclasses.astuple(RatioTolerance()) == (1e-2, 1e-2, 0.02, False)  # spec §4.1
    assert dataclasses.astuple(LogitsTolerance()) == (1e-2, 1e-2, 0.01, False, 0.5)  # spec §3.3


@pytest.mark.parametrize("kind, bad, message", [
    (RatioTolerance, {"atol": -0.1}, "atol and rtol must be finite and >= 0, got atol=-0.1 rtol=0.01"),
    (RatioTolerance, {"rtol": float("inf")}, "atol and rtol must be finite and >= 0"),
    (RatioTolerance, {"max_error_ratio": 1.5}, r"max_error_ratio must be in \[0, 1\], got 1.5"),
    (RatioTolerance, {"max_error_ratio": float("nan")}, r"max_error_ratio must be in \[0, 1\]"),
    (RatioTolerance, {"atol": "0.1"}, "atol must be a number, got '0.1'"),
    (RatioTolerance, {"rtol": True}, "rtol must be a number, got True"),
    (LogitsTolerance, {"max_e2e_abs_diff": 0.0}, "max_e2e_abs_diff must be finite and > 0, got 0.0"),
    (LogitsTolerance, {"max_e2e_abs_diff": float("nan")}, "max_e2e_abs_diff must be finite and > 0"),
    (LogitsTolerance, {"atol": float("nan")}, "atol and rtol must be finite and >= 0, got atol=nan"),
    (ModuleTolerance, {"rtol": -1.0}, "rtol must be a finite number >= 0, got -1.0"),
    (ModuleTolerance, {"atol": float("inf")}, "atol must be a finite number >= 0, got inf"),
    (ModuleTolerance, {"max_error_ratio": 2.0}, r"max_error_ratio must be in \[0, 1\], got 2.0"),
    (RatioTolerance, {"exact": 1}, "exact must be True or False, got 1"),
])
def test_a_bad_value_is_a_one_line_usage_error(kind, bad, message):
    with pytest.raises(UsageError, match=message) as e:
        kind(**bad)
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match=message):
        kind.of(bad)  # the dict form is checked the same way


def test_a_dict_is_read_over_the_defaults_and_an_instance_passes_as_it_is():
    assert RatioTolerance.of(None) == RatioTolerance()
    assert RatioTolerance.of({"atol": 0.5}) == RatioTolerance(atol=0.5, rtol=1e-2, max_error_ratio=0.02)
    assert LogitsTolerance.of({"max_error_ratio": 0}) == LogitsTolerance(max_error_ratio=0)
    given = LogitsTolerance(max_e2e_abs_diff=1.0)
    assert LogitsTolerance.of(given) is given
    assert ModuleTolerance.of({"atol": 1e-3}).for_dtype("float32") == RatioTolerance(1e-3, 1.3e-6, 0.0)


@pytest.mark.parametrize("kind, given, message", [
    (RatioTolerance, {"atl": 0.1}, r"unknown tolerance \['atl'\]; choose from atol, rtol, max_error_ratio"),
    (RatioTolerance, {"max_e2e_abs_diff": 1.0}, r"unknown tolerance \['max_e2e_abs_diff'\]"),
    (LogitsTolerance, {"max_ratio": 0}, r"unknown logits tolerance \['max_ratio'\]; choose from atol, rtol, "
                                        "max_error_ratio, exact, max_e2e_abs_diff"),
    (ModuleTolerance, {"max_e2e_abs_diff": 0.1}, r"unknown module tolerance \['max_e2e_abs_diff'\]"),
    (RatioTolerance, 0.1, "tolerance must be a Tolerance, a RatioTolerance or a dict with keys "
                          "among atol, rtol, max_error_ratio, exact, got float 0.1"),
    # another kind is not read as this one: a LogitsTolerance's guard would be ignored without a word
    (RatioTolerance, LogitsTolerance(), "tolerance must be a Tolerance, a RatioTolerance or a dict"),
])
def test_an_unknown_key_or_another_type_is_named(kind, given, message):
    with pytest.raises(UsageError, match=message):
        kind.of(given)


def test_a_tolerance_sets_its_given_fields_over_every_kinds_defaults():
    given = Tolerance(rtol=1e-4, max_error_ratio=0.0)
    assert RatioTolerance.of(given) == RatioTolerance(rtol=1e-4, max_error_ratio=0.0)
    assert LogitsTolerance.of(given) == LogitsTolerance(rtol=1e-4, max_error_ratio=0.0)
    assert ModuleTolerance.of(given).for_dtype("bfloat16") == RatioTolerance(1e-5, 1e-4, 0.0)
    assert ModuleTolerance.of(Tolerance(exact=True)).for_dtype("int64").exact
    assert GoldenOptions.judging(0, given).logits_tol == LogitsTolerance(rtol=1e-4, max_error_ratio=0.0)
    assert GoldenOptions.judging(0, RatioTolerance(atol=0.5)).logits_tol == LogitsTolerance()  # a case's own
    assert Tolerance.restating(RatioTolerance(atol=0.5, exact=True)).argv() == ["--exact"]
    assert Tolerance.restating(ModuleTolerance(rtol=0.1, max_error_ratio=0.5)).argv() == [
        "--rtol", "0.1", "--max-error-ratio", "0.5"]


@pytest.mark.parametrize("given, message", [
    ({"exact": True, "atol": 0.1}, "exact compares bits, so atol cannot apply; drop it"),
    ({"max_error_ratio": 3.0}, r"max_error_ratio must be in \[0, 1\], got 3.0"),
    ({"exact": "yes"}, "exact must be True or False, got 'yes'"),
])
def test_a_bad_tolerance_is_refused_when_made(given, message):
    with pytest.raises(UsageError, match=message):
        Tolerance(**given)


def _cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


@pytest.mark.slow  # six tiny builds
def test_a_bug_inside_the_tolerance_passes_a_case_by_default_and_fails_tightened(capsys, tmp_path, monkeypatch):
    """The planted epsilon bug on a case: check passes it, and only a tightened tolerance finds it, in check
    (--exact, --max-error-ratio), localize (against the same build without the plugin) and bisect."""
    monkeypatch.chdir(tmp_path)  # localize's kernel reproducer lands under dumps/
    case = ["--case", "norm", "--preset", "tiny", "--frontend", "relax", "--extra-passes", LOOSE_EPSILON]
    assert _cli(capsys, "check", *case)[0] == 0
    code, out = _cli(capsys, "check", *case, "--exact")
    assert code == 1 and "normed_hidden  bitwise_equal" in out and "differ bitwise, allowed 0 (--exact)" in out
    code, out = _cli(capsys, "check", *case, "--max-error-ratio", "0", "--atol", "0", "--rtol", "0")
    assert code == 1 and "allowed <= 0 (0%)" in out
    code, out = _cli(capsys, "localize", *case, "--against", "schedule=default")
    assert code == 0 and "every partnered call is within tolerance" in out
    code, out = _cli(capsys, "localize", *case, "--against", "schedule=default", "--exact")
    assert code == 1 and "FIRST DIFFERING CALL: #4 fused_multiply1_add_tir_rsqrt" in out
    code, out = _cli(capsys, "bisect", *case)
    assert code == 1 and "nothing to bisect" in out
    code, out = _cli(capsys, "bisect", *case, "--exact")
    assert code == 0 and "FOUND first failing pass: 001 legalize/LooseEpsilon" in out


@pytest.mark.slow  # module builds
def test_a_bug_inside_the_tolerance_passes_a_module_by_default_and_fails_tightened(capsys):
    """The same bug in a user's BF16 RMSNorm: inside BF16's assert_close tolerance; --exact and a zero tolerance
    with a 1 % outlier budget find it in check, localize --module and bisect --module; the clean build passes."""
    module = ["--module", BF16_NORM]
    buggy = [*module, "--extra-passes", LOOSE_EPSILON]
    tight = ["--atol", "0", "--rtol", "0", "--max-error-ratio", "0.01"]
    assert _cli(capsys, "check", *module, "--exact")[0] == 0
    assert _cli(capsys, "check", *buggy)[0] == 0
    code, out = _cli(capsys, "check", *buggy, "--exact")
    assert code == 1 and "bitwise_equal" in out
    code, out = _cli(capsys, "check", *buggy, *tight)
    assert code == 1 and "allowed <= 10 (1%)" in out
    assert _cli(capsys, "localize", *buggy)[0] == 0
    assert _cli(capsys, "localize", *buggy, "--exact")[0] == 1
    assert _cli(capsys, "bisect", *buggy)[0] == 1
    code, out = _cli(capsys, "bisect", *buggy, *tight)
    assert code == 0 and "LooseEpsilon" in out


def test_overrides_are_the_fields_set_away_from_the_defaults():
    assert LogitsTolerance().overrides() == {}
    assert LogitsTolerance(atol=0.1, max_e2e_abs_diff=1.0).overrides() == {"atol": 0.1, "max_e2e_abs_diff": 1.0}


def test_options_hold_the_typed_tolerance_not_a_dict():
    with pytest.raises(UsageError, match="GoldenOptions.tolerance must be a RatioTolerance, got dict"):
        GoldenOptions(0, {"atol": 0.1})
    with pytest.raises(UsageError, match="GoldenOptions.logits_tol must be a LogitsTolerance"):
        GoldenOptions(0, RatioTolerance(), RatioTolerance())


def test_tolerances_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RatioTolerance().atol = 1.0
