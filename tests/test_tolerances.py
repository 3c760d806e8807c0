"""verify/tolerances.py: the typed tolerances, checked when made, and the one reading of the dict form."""

import dataclasses

import pytest

from mtp_tvm.support.errors import UsageError
from mtp_tvm.verify.golden_check import GoldenOptions
from mtp_tvm.verify.tolerances import LogitsTolerance, ModuleTolerance, RatioTolerance


def test_the_defaults_are_the_specs():
    assert dataclasses.astuple(RatioTolerance()) == (1e-2, 1e-2, 0.02)  # spec §4.1
    assert dataclasses.astuple(LogitsTolerance()) == (1e-2, 1e-2, 0.01, 0.5)  # spec §3.3


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
                                        "max_error_ratio, max_e2e_abs_diff"),
    (ModuleTolerance, {"max_error_ratio": 0.1}, r"unknown module tolerance \['max_error_ratio'\]"),
    (RatioTolerance, 0.1, "tolerance must be a RatioTolerance or a dict with keys among atol, rtol, "
                          "max_error_ratio, got float 0.1"),
    # another kind is not read as this one: a LogitsTolerance's guard would be ignored without a word
    (RatioTolerance, LogitsTolerance(), "tolerance must be a RatioTolerance or a dict"),
])
def test_an_unknown_key_or_another_type_is_named(kind, given, message):
    with pytest.raises(UsageError, match=message):
        kind.of(given)


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
