"""instrument/pass_failure.py: a failed build names the pass, the Relax function and the op; the dumps mark the
pass FAILED."""

import json

import pytest

import mtp_tvm
from helpers import REPO
from mtp_tvm.support.errors import BuildError

CAUSAL_MASK = REPO / "tests" / "modules" / "causal_mask_full.py"


@pytest.mark.slow  # a module file's export and import
def test_a_failed_build_names_the_pass_function_and_op_and_the_dumps_mark_it_failed(tmp_path):
    with pytest.raises(BuildError) as e:
        mtp_tvm.compile(CAUSAL_MASK, dump_passes=tmp_path)
    message = str(e.value)
    assert "\n" not in message
    assert ("failed in pass legalize/LegalizeOps on Relax function main, op relax.full (binding full): argument of "
            "type 'PrimType' is not iterable") in message
    (run,) = tmp_path.iterdir()
    failed = [p for p in json.loads((run / "index.json").read_text())["passes"] if p["error"]]
    assert [p["name"] for p in failed] == ["LegalizeOps"] and "op relax.full" in failed[0]["error"]


@pytest.mark.slow  # a case's build
def test_a_failure_inside_a_nested_pass_names_both_and_the_dumps_mark_the_outer_failed(tmp_path, monkeypatch):
    """SplitLayoutRewritePreproc raising inside LiftWeightPacking (issue 44: 'There should be a compute block' on an
    own model), planted: the error names the outer pass and the inner one, and the dumps mark them FAILED."""
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name="SplitLayoutRewritePreproc")
    def broken(mod, _ctx):
        raise ValueError("There should be a compute block")

    monkeypatch.setattr(relax.transform, "SplitLayoutRewritePreproc", lambda: broken)
    with pytest.raises(BuildError) as e:
        mtp_tvm.compile(case="logits", preset="tiny", dump_passes=tmp_path)
    message = str(e.value)
    assert "\n" not in message and message.endswith(f"(IR dumps: {next(tmp_path.iterdir())})")
    assert ("failed in pass schedule/LiftWeightPacking (inside it, SplitLayoutRewritePreproc)" in message
            and "There should be a compute block" in message)
    (run,) = tmp_path.iterdir()
    failed = [p["name"] for p in json.loads((run / "index.json").read_text())["passes"] if p["error"]]
    assert "LiftWeightPacking" in failed
