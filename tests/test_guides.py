"""The guides' code runs: every ```python block of a guide, in order, in one namespace (each guide's blocks
build on the ones before). Guides: ``docs/guides/*.md`` that this test lists."""

import re

import pytest

from helpers import REPO

GUIDES = ["writing-a-pass.md"]


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", markdown, re.MULTILINE | re.DOTALL)


@pytest.mark.slow
@pytest.mark.parametrize("guide", GUIDES)
def test_a_guides_code_runs(guide):
    blocks = python_blocks((REPO / "docs" / "guides" / guide).read_text())
    assert len(blocks) >= 3
    namespace = {"__name__": f"guide_{guide}"}
    for block in blocks:
        exec(compile(block, f"docs/guides/{guide}", "exec"), namespace)
    assert set(namespace["passes"](None)) == {"legalize", "schedule"}
