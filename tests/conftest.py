"""Shared fixtures, and the fast loop's guard.

``slow`` marks a test that compiles with nvcc, builds a FLASH-size case, starts a subprocess that imports TVM or
torch, tunes, or takes over ~1 s on its own on two cores. ``make check-fast`` (``-m "not slow"``) runs the rest in
under two minutes and still reaches every layer: tiny LLVM builds checked against the goldens, the CLI, the
comparators, the schedule rules and files, the dumps tools, artifacts. ``make test`` (CI) runs everything, the
``timing`` tests (two timings of one thing compared) last, alone in one process. A test
that only reads a tiny build takes ``compiled`` instead of calling ``mtp_tvm.compile``; a parametrized matrix keeps
one representative fast (``helpers.slow_except``)."""

import functools
import os

import pytest

import mtp_tvm

FAST_TEST_LIMIT_S = 3.0  # a not-slow test over this (setup + call) is named at the end of the run


@functools.cache
def _build(case: str, frontend: str, preset: str, options: tuple):
    return mtp_tvm.compile(case=case, preset=preset, frontend=frontend, **{"target": "llvm", **dict(options)})


def _compiled(case: str, frontend: str, preset: str = "tiny", **options):
    return _build(case, frontend, preset, tuple(sorted(options.items())))


@pytest.fixture(scope="session")
def compiled():
    """``compiled(case, frontend[, preset], **BuildSpec fields)``: one build per combination for the whole session
    (T is symbolic, so one binary serves every token count). Read it, never change it: other tests share it."""
    return _compiled


@pytest.fixture(scope="session")
def prefork(tmp_path_factory):
    """The fork server of this test process (``tests/prefork.py``): ``prefork.python`` runs like ``sys.executable``
    and ``prefork.env()`` puts its ``mtp-tvm`` and ``python`` first on ``PATH``, each a real process that does not
    import TVM and torch again."""
    from prefork import Prefork

    server = Prefork(tmp_path_factory.mktemp("prefork"))
    yield server
    server.close()


@pytest.fixture(autouse=True, scope="session")
def _test_environment(tmp_path_factory):
    """Run folders written without an explicit root (e.g. a failing check's reproducer) go to a temp dir; a bench
    (in this process, or a command a guide runs) warms each contender up for 0.1 s, not a stopwatch's 1.5 s: the
    tests check what bench does, not how fast; the ``timing`` tests set the stopwatch's own. Every bench of the
    session shares one inductor cache: a compiled peer compiles in seconds once another has (cold: tens)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("MTP_TVM_DUMPS", str(tmp_path_factory.mktemp("dumps")))
    mp.setenv("MTP_TVM_BENCH_WARMUP_S", "0.1")
    base = tmp_path_factory.getbasetemp()  # one inductor cache for every worker of the session (their parent)
    mp.setenv("MTP_TVM_INDUCTOR_CACHE", str((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) /
                                           "inductor-cache"))
    yield
    mp.undo()


# module-scoped fixtures that take seconds to make: the tests reading one run on one worker, so it is made once
# (pytest-xdist's loadgroup; every other test goes to whichever worker is free)
SHARED_FIXTURES = {"test_bench": "tiny_logits", "test_artifact": "cuda_artifacts", "test_wheel": "wheel",
                   "test_dump_report": "run", "test_repro": "failing", "test_localize": "broken",
                   "test_dumps": "relax_run", "test_dumps_compare": "runs"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items):
    """The slow tests first: ``make test`` spreads the tests over every core (pytest-xdist), and a long test
    handed out last would leave the other workers idle while it runs alone (a stable sort: the order within each
    group is the files' own, the same on every worker)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    for item in items:
        name = SHARED_FIXTURES.get(getattr(item, "module", None) and item.module.__name__)
        if name in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}.{name}"))


_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    if report.when in ("setup", "call") and "slow" not in report.keywords:
        _seconds[report.nodeid] = _seconds.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """Names the not-slow tests over the limit, so the fast loop stays fast as tests are added (a warning, not a
    failure: a loaded machine can push any test over)."""
    over = sorted(((s, n) for n, s in _seconds.items() if s > FAST_TEST_LIMIT_S), reverse=True)
    if over:
        terminalreporter.section(f"not-slow tests over {FAST_TEST_LIMIT_S:.0f} s: make them cheaper or mark them slow")
        for s, nodeid in over:
            terminalreporter.write_line(f"{s:6.1f} s  {nodeid}")
