"""What several test files share: where the checkout and its examples are, a silent log, and the fast loop's
representative of a parametrized matrix, a guard against a test that blocks, the GEMM the CPU dot-product
schedules are tested on and the hot loop of its assembly."""

import contextlib
import re
import signal
from pathlib import Path

import pytest
from tvm.script import tirx as T

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


def gemm(K: int, N: int, Q: int = 8, name: str = "gemm", operand: str = "bfloat16", accumulator: str = "float32"):
    """The production GEMM form: ``blocks * Q`` of A's m rows (m a multiple of 16) run."""

    @T.prim_func(s_tir=True)
    def gemm(a: T.handle, w: T.Buffer((N, K), operand), c: T.handle, blocks: T.int64):
        T.func_attr({"tir.noalias": True, "global_symbol": name})
        m = T.int64()
        A = T.match_buffer(a, (m, K), operand)
        C = T.match_buffer(c, (m, N), accumulator)
        for t, n, k in T.grid(blocks * Q, N, K):
            with T.sblock("gemm"):
                vt, vn, vk = T.axis.remap("SSR", [t, n, k])
                with T.init():
                    C[vt, vn] = T.Cast(accumulator, 0)
                C[vt, vn] = C[vt, vn] + T.Cast(accumulator, A[vt, vk]) * T.Cast(accumulator, w[vn, vk])

    return gemm


def hot_loop(asm: str, instruction: str) -> str:
    """The innermost loop body of ``asm`` that holds the most ``instruction``s (the K-pair loop of the general
    tile): the lines from a loop label to the backward jump to it."""
    best = ""
    for label in re.findall(r"^(\.LBB\w+):", asm, re.M):
        start = asm.index(f"\n{label}:")
        end = asm.find(f"\t{label}\n", start)
        body = asm[start:end] if end > 0 else ""
        if "\n.LBB" not in body[1:] and body.count(instruction) > best.count(instruction):
            best = body
    return best
