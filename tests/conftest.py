import functools

import pytest

import mtp_tvm


@functools.cache
def _compiled(case: str, frontend: str, preset: str = "tiny"):
    return mtp_tvm.compile(case=case, target="llvm", preset=preset, frontend=frontend)


@pytest.fixture(scope="session")
def compiled():
    """``compiled(case, frontend[, preset])``: one build per combination for the whole session (T is symbolic,
    so one binary serves every token count)."""
    return _compiled


@pytest.fixture(autouse=True, scope="session")
def _dumps_outside_the_repo(tmp_path_factory):
    """Run folders written without an explicit root (e.g. a failing check's reproducer) go to a temp dir."""
    mp = pytest.MonkeyPatch()
    mp.setenv("MTP_TVM_DUMPS", str(tmp_path_factory.mktemp("dumps")))
    yield
    mp.undo()
