"""The load around a timed run: a move, or more load than cores before or during the rounds, is said, and the
latter marks the ratios unreliable."""

import pytest

from mtp_tvm.support import load_average
from mtp_tvm.support.load_average import LoadWatch


@pytest.mark.parametrize("before, during, unreliable, said", [
    (0.5, [0.6, 0.7], False, None),
    (3.0, [1.0, 1.2], True, "exceeds the 2 cores (before the rounds 3.00)"),
    (0.5, [2.5, 0.9], True, "exceeds the 2 cores (during them (peak) 2.50)"),
    (0.2, [0.9, 1.9], False, "moved from 0.20 to 1.90"),
])
def test_the_load_report_says_when_the_ratios_are_unreliable(monkeypatch, before, during, unreliable, said):
    samples = iter(during)
    monkeypatch.setattr(load_average.os, "getloadavg", lambda: (next(samples), 0.0, 0.0))
    watch = LoadWatch(before)
    for _ in during[:-1]:
        watch.sample()
    report = watch.report(cpus=2)
    assert report["unreliable"] == unreliable and report["peak"] == max(during) and report["after"] == during[-1]
    assert (report["warning"] is None) if said is None else (said in report["warning"])
    if unreliable:
        assert "the ratios are unreliable" in report["warning"]
