"""Property-based tests (hypothesis) for ratio_allclose: the outlier count is a direct count, the threshold is
round(ratio * numel), and NaN/Inf in the actual output never passes."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mtp_tvm.verify.comparators import ratio_allclose
from mtp_tvm.verify.tolerances import RatioTolerance

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)
shapes = st.integers(1, 64)
tolerance = st.floats(0, 0.5, allow_nan=False, width=32)
ratios = st.floats(0, 1, allow_nan=False)


@st.composite
def pairs(draw):
    n = draw(shapes)
    e = draw(arrays(np.float32, n, elements=finite))
    a = draw(arrays(np.float32, n, elements=finite))
    return a, e


@settings(max_examples=200, deadline=None)
@given(pairs(), tolerance, tolerance, ratios)
def test_outlier_count_and_threshold_follow_the_definition(pair, atol, rtol, ratio):
    a, e = pair
    r = ratio_allclose(RatioTolerance(atol=atol, rtol=rtol, max_error_ratio=ratio))(a, e)
    tol32 = lambda y: np.float32(atol) + np.float32(rtol) * np.float32(abs(y))  # noqa: E731  (FP32, as specified)
    direct = sum(1 for x, y in zip(a, e) if np.float32(abs(x - y)) > tol32(y))
    assert r.mismatches == direct
    assert r.passed == (direct <= round(ratio * a.size))


@settings(max_examples=100, deadline=None)
@given(pairs(), st.sampled_from([np.nan, np.inf, -np.inf]), st.data())
def test_nonfinite_actual_never_passes(pair, bad, data):
    a, e = pair
    a = a.copy()
    a[data.draw(st.integers(0, a.size - 1))] = bad
    r = ratio_allclose(RatioTolerance(atol=1e3, rtol=1e3, max_error_ratio=1.0))(a, e)
    assert not r.passed and "illegal values in actual" in r.detail


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10_000), ratios)
def test_threshold_is_pythons_round_of_ratio_times_numel(numel, ratio):
    threshold = round(ratio * numel)
    e = np.zeros(numel, np.float32)
    for k, ok in ((threshold, True), (threshold + 1, False)):
        if k > numel:
            continue
        a = e.copy()
        a[:k] = 1.0
        assert ratio_allclose(RatioTolerance(atol=0.5, rtol=0.0, max_error_ratio=ratio))(a, e).passed is ok
