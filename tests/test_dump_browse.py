"""`mtp-tvm dumps list | show | diff` read run folders back in the terminal."""

import pytest

import mtp_tvm
from mtp_tvm.cli import main


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("dumps")
    mtp_tvm.compile(case="logits", preset="tiny", frontend="relax", dump_passes=root, only_changed=True)
    return root


def _run(argv, capsys):
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_list_and_show(root, capsys):
    rc, out, _ = _run(["dumps", "--root", str(root), "list"], capsys)
    assert rc == 0 and out.splitlines()[0].split() == ["run", "case", "target", "passes", "changed", "status",
                                                       "golden"]
    assert out.splitlines()[1].startswith("logits-llvm-") and " ok" in out
    rc, out, _ = _run(["dumps", "--root", str(root), "show", "latest"], capsys)
    assert rc == 0 and "case logits on llvm, preset tiny, frontend relax" in out
    assert "001  legalize" in out and "LegalizeOps" in out
    rc, out, _ = _run(["dumps", "--root", str(root), "show", "logits-llvm", "LegalizeOps"], capsys)
    assert rc == 0 and "@I.ir_module" in out and "def main(" in out


def test_diff_between_two_passes(root, capsys):
    rc, out, _ = _run(["dumps", "--root", str(root), "diff", "latest", "input", "LegalizeOps"], capsys)
    assert rc == 0 and out.startswith("--- 000_input.py\n+++ 001_legalize__LegalizeOps.py")
    assert "+    @T.prim_func" in out


@pytest.mark.parametrize("argv, message", [
    (["show", "nope"], "no run matches 'nope'"),
    (["show", "latest", "999"], "no pass '999' in this run"),
    (["show", "latest", "tirx.RemoveNoOp"], "runs 2 times here: use a number"),
    (["show", "latest", "3"], "has no dump file: unchanged, and this run dumped changed passes only"),
])
def test_lookup_errors_are_one_line_usage_errors(root, capsys, argv, message):
    rc, _, err = _run(["dumps", "--root", str(root), *argv], capsys)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.fixture()
def damaged(root, tmp_path):
    """A copy of the module's dump root to break."""
    import shutil

    copy = tmp_path / "dumps"
    shutil.copytree(root, copy)
    return copy, next(p for p in copy.iterdir() if p.is_dir())


@pytest.mark.parametrize("damage, argv, message", [
    (lambda run: (run / "index.json").write_text("{ not json"), ["show", "RUN"], "cannot read .*index.json"),
    (lambda run: (run / "index.json").write_text('{"case": 1}'), ["show", "RUN"], "index.json is damaged"),
    (lambda run: (run / "index.json").unlink(), ["show", "RUN"], "no run matches|has no index.json"),
    (lambda run: (run / "000_input.py").unlink(), ["show", "RUN", "input"], "000_input.py .* is missing"),
    (lambda run: (run.parent.parent / "secret.txt").write_text("not a dump"), ["show", "RUN", "../../secret.txt"],
     "is outside the run folder"),
])
def test_a_damaged_run_folder_is_one_line(damaged, capsys, damage, argv, message):
    import re

    root, run = damaged
    damage(run)
    rc, _, err = _run(["dumps", "--root", str(root), *[run.name if a == "RUN" else a for a in argv]], capsys)
    assert rc == 2 and re.search(message, err) and len(err.strip().splitlines()) == 1


def test_list_names_what_show_refuses(damaged, capsys):
    root, run = damaged
    (run / "index.json").unlink()
    rc, out, _ = _run(["dumps", "--root", str(root), "list"], capsys)
    assert rc == 0 and "no index" in out and "complete" not in out.split(run.name)[1].splitlines()[0]
