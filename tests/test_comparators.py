import numpy as np
import pytest
import torch

from mtp_tvm.contract.golden import compute_lm_head_logits
from mtp_tvm.support.errors import UsageError
from mtp_tvm.verify.comparators import (
    check_logits_contract,
    check_sampled_ids,
    device_hidden_logits_allclose,
    ratio_allclose,
)
from mtp_tvm.verify.tolerances import LogitsTolerance, RatioTolerance


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
    assert not ratio_allclose(RatioTolerance(max_error_ratio=0.025))(a, _ref()).passed
    a = _ref()
    a[:2] += 1
    assert ratio_allclose(RatioTolerance(max_error_ratio=0.025))(a, _ref()).passed


def test_outlier_is_strictly_greater_than_tol():
    e = np.zeros(4, np.float32)
    a = np.full(4, 0.01, np.float32)  # |a-e| == atol exactly: not an outlier
    assert ratio_allclose(RatioTolerance(atol=np.float32(0.01).item(), rtol=0, max_error_ratio=0))(a, e).passed


def test_one_corrupted_element_beyond_a_zero_budget_fails_and_is_located():
    e = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    a = e.copy()
    a[2, 5] += 0.5
    r = ratio_allclose(RatioTolerance(max_error_ratio=0.0))(a, e)
    assert not r.passed and r.mismatches == 1 and r.worst_index == (2, 5)
    assert "Mismatched elements: 1 / 32" in r.detail and "(2, 5)" in r.detail


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_actual_is_a_hard_failure_even_with_full_budget(bad):
    a = _ref()
    a[7] = bad
    r = ratio_allclose(RatioTolerance(max_error_ratio=1.0))(a, _ref())
    assert not r.passed and "illegal values in actual" in r.detail


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_expected_is_rejected(bad):
    e = _ref()
    e[0] = bad
    r = ratio_allclose(RatioTolerance(max_error_ratio=1.0))(_ref(), e)
    assert not r.passed and "non-finite expected" in r.detail


def test_accepts_torch_bf16_and_shape_mismatch_fails():
    t = torch.ones(3, 4, dtype=torch.bfloat16)
    assert ratio_allclose()(t, t.float()).passed
    assert not ratio_allclose()(np.ones((3, 4)), np.ones((4, 3))).passed


@pytest.mark.parametrize("ratio", [-0.1, 1.5])
def test_bad_ratio_is_a_user_error(ratio):
    with pytest.raises(UsageError):
        RatioTolerance(max_error_ratio=ratio)


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


# ---- the LM head's device-hidden comparator (spec §3.3) and greedy sampling ------------------------------

TP = 2


def _lm_head(owners=2, rows=3, d=4, shard=5, seed=11):
    """A small TP-2 LM head: hidden [owners, rows, D], stacked weight (rank r = shard r % 2), indices with -1."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(owners, rows, d, generator=g)
    shards = torch.randn(TP, shard, d, generator=g)
    stacked = torch.stack([shards[r % TP] for r in range(max(owners, TP))])
    idx = torch.tensor([[rows - 1, -1, 0]] * owners, dtype=torch.int32)
    return hidden, stacked, idx


def _check(actual, expected, hidden, stacked, idx, **tolerance):
    cmp = device_hidden_logits_allclose(TP, LogitsTolerance(**tolerance))
    return cmp(actual, expected, hidden=hidden, lm_head_weight=stacked, logit_row_indices=idx)


def test_reference_comes_from_the_device_hidden_not_the_cpu_one():
    cpu_hidden, stacked, idx = _lm_head()
    device_hidden = cpu_hidden + 0.05 * torch.randn(cpu_hidden.shape, generator=torch.Generator().manual_seed(1))
    cpu_golden = compute_lm_head_logits(cpu_hidden, stacked, idx, TP)
    device_logits = compute_lm_head_logits(device_hidden, stacked, idx, TP)
    tight = {"atol": 1e-5, "rtol": 1e-5, "max_error_ratio": 0.0}
    # Against the CPU golden the permitted hidden error, amplified by the projection, fails a tight check ...
    assert not ratio_allclose(RatioTolerance(**tight))(device_logits, cpu_golden).passed
    # ... but the LM head itself is exact given the hidden state it read, and the drift is far below the guard.
    r = _check(device_logits, cpu_golden, device_hidden, stacked, idx, **tight, max_e2e_abs_diff=0.5)
    assert r.passed, r.detail
    assert "end-to-end logits max abs diff=" in r.detail


def test_a_wrong_logit_is_still_caught_and_located():
    hidden, stacked, idx = _lm_head()
    golden_logits = compute_lm_head_logits(hidden, stacked, idx, TP)
    actual = golden_logits.clone()
    actual[1, 0, 3] += 1.0
    r = _check(actual, golden_logits, hidden, stacked, idx, max_error_ratio=0.0)
    assert not r.passed and r.mismatches == 1 and r.worst_index == (1, 0, 3)
    assert "(1, 0, 3)" in r.detail and "Mismatched elements: 1 / 60" in r.detail


def test_nan_in_the_device_logits_fails_whatever_the_budget():
    hidden, stacked, idx = _lm_head()
    golden_logits = compute_lm_head_logits(hidden, stacked, idx, TP)
    actual = golden_logits.clone()
    actual[0, 2, 1] = float("nan")
    r = _check(actual, golden_logits, hidden, stacked, idx, max_error_ratio=1.0)
    assert not r.passed and "illegal values in actual: NaN=1 Inf=0" in r.detail


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_reference_is_rejected(bad):
    hidden, stacked, idx = _lm_head()
    clean = compute_lm_head_logits(hidden, stacked, idx, TP)
    device_hidden = hidden.clone()
    device_hidden[1, 2, 0] = bad  # row 2 is selected (index rows-1), so the reference turns non-finite
    r = _check(clean, clean, device_hidden, stacked, idx, max_error_ratio=1.0)
    assert not r.passed and "non-finite LM-head reference logits" in r.detail


def test_non_finite_values_in_unselected_rows_do_not_matter():
    hidden, stacked, idx = _lm_head()
    clean = compute_lm_head_logits(hidden, stacked, idx, TP)
    device_hidden = hidden.clone()
    device_hidden[:, 1, :] = float("nan")  # row 1 is never selected
    assert _check(clean, clean, device_hidden, stacked, idx).passed


def test_a_catastrophic_upstream_error_trips_the_end_to_end_guard():
    hidden, stacked, idx = _lm_head()
    cpu_golden = compute_lm_head_logits(hidden, stacked, idx, TP)
    broken_hidden = hidden.clone()
    broken_hidden[0, 0, :] = 1000.0  # a wildly wrong (but selected) hidden row upstream of the LM head
    actual = compute_lm_head_logits(broken_hidden, stacked, idx, TP)  # the LM head itself is right
    r = _check(actual, cpu_golden, broken_hidden, stacked, idx)
    assert not r.passed and r.mismatches == 0  # the LM-head part passed ...
    assert "end-to-end logits max abs diff=" in r.detail and "allowed<=0.5" in r.detail  # ... the guard did not


def test_a_non_finite_end_to_end_difference_fails():
    hidden, stacked, idx = _lm_head()
    actual = compute_lm_head_logits(hidden, stacked, idx, TP)
    cpu_golden = actual.clone()
    cpu_golden[0, 0, 0] = float("inf")
    r = _check(actual, cpu_golden, hidden, stacked, idx)
    assert not r.passed and "non-finite end-to-end logits difference: 1 points" in r.detail


@pytest.mark.parametrize("outliers, passes", [(1, True), (2, False)])
def test_the_one_percent_budget_allows_one_outlier_in_a_hundred(outliers, passes):
    hidden = torch.full((2, 1, 2), 0.5)  # 2 owners x 1 row x 50 columns = 100 logits, each exactly 1.0
    stacked = torch.ones(2, 25, 2)
    idx = torch.zeros(2, 1, dtype=torch.int32)
    reference = compute_lm_head_logits(hidden, stacked, idx, TP)
    assert reference.numel() == 100 and torch.equal(reference, torch.ones(2, 1, 50))
    actual = reference.clone().flatten()
    actual[:outliers] += 0.1  # beyond atol + rtol*1 = 0.02, within the 0.5 guard
    r = _check(actual.reshape(reference.shape), reference, hidden, stacked, idx)  # the defaults: 1 %
    assert r.passed is passes and r.mismatches == outliers


def test_comparator_name_and_option_checks():
    assert device_hidden_logits_allclose(TP).__name__ == (
        "device_hidden_ratio_allclose(atol=0.01, rtol=0.01, max_error_ratio=0.01)_with_e2e_max_abs_diff(0.5)")
    for bad in ({"max_e2e_abs_diff": 0.0}, {"max_e2e_abs_diff": -1.0}, {"max_error_ratio": 1.5}, {"atol": -1.0}):
        with pytest.raises(UsageError):
            LogitsTolerance(**bad)


def test_sampled_ids_must_be_the_first_argmax_of_their_row():
    logits = np.zeros((2, 3, 6), np.float32)
    logits[0, 1, [2, 4]] = 5.0  # a tie: the first column wins
    logits[1, 0, 5] = 1.0
    good = np.array([[0, 2, 0], [5, 0, 0]], np.int32)
    assert check_sampled_ids(good, logits).passed
    last_of_tie = good.copy()
    last_of_tie[0, 1] = 4
    r = check_sampled_ids(last_of_tie, logits)
    assert not r.passed and r.worst_index == (0, 1) and "id 4, argmax 2" in r.detail
    assert not check_sampled_ids(good[:, :2], logits).passed


@pytest.mark.parametrize("bad", [{"atol": float("nan")}, {"rtol": float("nan")}, {"atol": float("inf")},
                                 {"rtol": -0.1}, {"max_error_ratio": float("nan")}])
def test_every_tolerance_must_be_finite_and_non_negative(bad):
    with pytest.raises(UsageError, match="must be"):
        RatioTolerance(**bad)
    with pytest.raises(UsageError, match="must be"):
        LogitsTolerance(**bad)


@pytest.mark.parametrize("guard", [float("nan"), float("inf"), 0.0])
def test_the_end_to_end_guard_must_be_finite_and_positive(guard):
    with pytest.raises(UsageError, match="max_e2e_abs_diff must be finite and > 0"):
        LogitsTolerance(max_e2e_abs_diff=guard)


@pytest.mark.slow  # over 1 s
def test_the_logits_contract_stays_linear_in_memory():
    import tracemalloc

    tokens, vocab = 16384, 8  # a T x T matrix would be 2 GiB here, 32 GiB at T = 65536 (the largest T accepted)
    rng = np.random.default_rng(0)
    e = rng.standard_normal((tokens, vocab)).astype(np.float32)
    tracemalloc.start()
    r = check_logits_contract(e, tokens // 2, 2, vocab, e)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert r.passed and peak < 128 << 20
    swapped = e.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    assert not check_logits_contract(swapped, tokens // 2, 2, vocab, e).passed
