"""docs/guides/target-binaries-gpu.md runs: its blocks read and marked as the README's are (``test_readme``), the
runnable ones run on the tiny preset (the CUDA builds with nvcc; the GPU-only blocks say why they are not run)."""

import shutil

import pytest
from test_readme import ReadmeRunner, readme_blocks

from helpers import REPO

GUIDE = REPO / "docs" / "guides" / "target-binaries-gpu.md"


def test_every_guide_block_is_marked_or_runs():
    blocks = readme_blocks(GUIDE.read_text())
    assert {b.kind for b in blocks} == {"python", "run", "not run"}
    assert all(b.why for b in blocks if b.kind == "not run")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_guides_code_runs(tmp_path):
    runner = ReadmeRunner(tmp_path)
    failures = [f for f in map(runner.run, readme_blocks(GUIDE.read_text())) if f]
    assert not failures, "\n\n".join(failures)
