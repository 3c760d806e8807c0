"""A user's own block (``tests/module_blocks/rope_block.py``: RMSNorm, RoPE with constant frequencies, causal
attention, a gated MLP) through ``check --module``: a plugin in the wrong phase is warned about, and the dump
folds FoldConstant's inner TIR pipelines (one per folded constant) into its row."""

import json

import pytest

from helpers import REPO
from mtp_tvm.cli import main
from mtp_tvm.instrument.pass_tree import top_level_of

BLOCK = REPO / "tests" / "module_blocks" / "rope_block.py"
WRONG_PHASE_PLUGIN = REPO / "tests" / "module_blocks" / "tag_fused_norm.py"


@pytest.mark.slow
def test_a_user_block_warns_of_a_plugin_in_the_wrong_phase_and_folds_nested_passes(tmp_path, capsys):
    rc = main(["check", "--module", str(BLOCK), "--pass-plugin", str(WRONG_PHASE_PLUGIN),
               "--dump-passes", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "PASSED" in out
    warning = next(line for line in out.splitlines() if "TagFusedNorm" in line)
    assert warning.startswith(f"[passes] warning: pass plugin {WRONG_PHASE_PLUGIN}: pass 'TagFusedNorm' changed "
                              "nothing in any function (phase 'fuse', 1 run); at that point the module holds ")
    assert "(0 fused, 0 scheduled)" in warning and "belongs under 'schedule'" in warning
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    passes = json.loads((run / "index.json").read_text())["passes"]
    fold = next(p for p in passes if p["name"] == "FoldConstant")
    inside = [p for p, top in zip(passes, top_level_of(passes)) if top == fold["index"] and p["depth"]]
    top = [p for p in passes if not p["depth"]]
    assert len(inside) > 300 and len(top) < 100  # a TIR pipeline per folded constant, folded into one row
    files = [f for f in run.iterdir() if f.is_file()]
    assert len([f for f in files if f.suffix in (".py", ".diff")]) <= 2 * len(top) + 1  # no nested pass's file
    rc = main(["dumps", "show", str(run), "--changed"])
    table = capsys.readouterr().out
    assert f"{len(top)} passes (+{len(passes) - len(top)} nested, folded)" in table
    assert any(line.split()[2:4] == ["FoldConstant", f"[+{len(inside)}"] for line in table.splitlines())
    rc = main(["dumps", "show", str(run), "--changed", "--nested"])
    assert len(capsys.readouterr().out.splitlines()) > len(table.splitlines()) + 50
    rc = main(["check", "--module", str(BLOCK), "--dump-passes", str(tmp_path / "nested"), "--dump-nested"])
    capsys.readouterr()
    (nested_run,) = [p for p in (tmp_path / "nested").iterdir() if p.is_dir()]
    assert rc == 0 and len(list(nested_run.iterdir())) > 3 * len(files)
