import numpy as np
import pytest
import torch

from mtp_tvm.compare import check_logits_contract, ratio_allclose
from mtp_tvm.errors import UsageError


def _ref(n=100, value=2.0):
    return np.full(n, value, np.float32)


def test_exact_match_passes():
    r = ratio_allclose()(_ref(), _ref())
    assert r.passed and r.mismatches == 0 and r.numel == 100


def test_outlier_budget_is_round_of_ratio_times_numel():
    # 0.02 * 100 = 2 outliers allowed; 3 fail.
    for k, ok in ((2, True), (3, False)):
        a = _ref()
        a[:k] += 1.0
        r = ratio_allclose()(a, _ref())
        assert r.passed is ok and r.mismatches == k


def test_threshold_uses_bankers_rounding():
    # 0.025 * 100 = 2.5 -> round() = 2 (half to even), so 3 outliers fail and 2 pass.
    a = _ref()
    a[:3] += 1
    assert not ratio_allclose(max_error_ratio=0.025)(a, _ref()).passed
    a = _ref()
    a[:2] += 1
    assert ratio_allclose(max_error_ratio=0.025)(a, _ref()).passed


def test_outlier_is_strictly_greater_than_tol():
    e = np.zeros(4, np.float32)
    a = np.full(4, 0.01, np.float32)  # |a-e| == atol exactly: not an outlier
    assert ratio_allclose(atol=np.float32(0.01).item(), rtol=0, max_error_ratio=0)(a, e).passed


def test_one_corrupted_element_beyond_a_zero_budget_fails_and_is_located():
    e = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    a = e.copy()
    a[2, 5] += 0.5
    r = ratio_allclose(max_error_ratio=0.0)(a, e)
    assert not r.passed and r.mismatches == 1 and r.worst_index == (2, 5)
    assert "Mismatched elements: 1 / 32" in r.detail and "(2, 5)" in r.detail


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_actual_is_a_hard_failure_even_with_full_budget(bad):
    a = _ref()
    a[7] = bad
    r = ratio_allclose(max_error_ratio=1.0)(a, _ref())
    assert not r.passed and "illegal values in actual" in r.detail


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_expected_is_rejected(bad):
    e = _ref()
    e[0] = bad
    r = ratio_allclose(max_error_ratio=1.0)(_ref(), e)
    assert not r.passed and "non-finite expected" in r.detail


def test_accepts_torch_bf16_and_shape_mismatch_fails():
    t = torch.ones(3, 4, dtype=torch.bfloat16)
    assert ratio_allclose()(t, t.float()).passed
    assert not ratio_allclose()(np.ones((3, 4)), np.ones((4, 3))).passed


@pytest.mark.parametrize("ratio", [-0.1, 1.5])
def test_bad_ratio_is_a_user_error(ratio):
    with pytest.raises(UsageError):
        ratio_allclose(max_error_ratio=ratio)


def _logits(batch=4, seq=2, v=16):
    return np.random.default_rng(1).standard_normal((batch * seq, v)).astype(np.float32)


def test_logits_contract_holds_for_good_logits():
    x = _logits()
    assert check_logits_contract(x, 4, 2, 16, expected=x + 1e-3).passed


def test_logits_contract_rejects_wrong_row_order():
    x = _logits()
    s_major = x.reshape(4, 2, 16).transpose(1, 0, 2).reshape(8, 16)  # rows written s*B + b
    r = check_logits_contract(s_major, 4, 2, 16, expected=x)
    assert not r.passed and "misplaced" in r.detail


def test_logits_contract_rejects_wrong_shape():
    r = check_logits_contract(_logits()[:7], 4, 2, 16)
    assert not r.passed and "shape" in r.detail
