"""What several test files share: where the checkout and its examples are, a silent log, and the fast loop's
representative of a parametrized matrix, a guard against a test that blocks."""

import contextlib
import signal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
# the int32-accumulator plugin pass: a build that fails its golden check in a known kernel
INT32_ACCUMULATOR_PLUGIN = EXAMPLES / "int32_logits_accumulator.py"
QUIET = {"log": lambda *_: None}  # keyword for check/localize: no progress lines in the test output


def slow_except(values, fast):
    """``values`` for ``parametrize`` with all but ``fast`` marked slow: the fast loop keeps a representative,
    ``make test`` runs the whole matrix (test ids unchanged)."""
    return [v if v in fast else pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=pytest.mark.slow)
            for v in values]


@contextlib.contextmanager
def within(seconds: int):
    """Fail with ``TimeoutError`` where the body blocks longer than ``seconds`` (a FIFO opened for reading waits
    for a writer for ever), instead of hanging the test run. SIGALRM: the main thread only."""
    def expire(*_):
        raise TimeoutError(f"blocked for over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
