"""`mtp-tvm dumps list | show | diff` read run folders back in the terminal."""

from pathlib import Path

import pytest

import mtp_tvm
from mtp_tvm.cli import main


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("dumps")
    mtp_tvm.compile(case="logits", preset="tiny", frontend="relax", dump_passes=root, dump_only_changed=True)
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


# ---- retention: dump folders do not grow without bound ---------------------------------------------------------

def _fake_runs(root, names, complete=True):
    import time

    runs = []
    for name in names:
        run = root / name
        run.mkdir(parents=True)
        (run / "index.json").write_text("{}")
        if complete:
            (run / "complete").write_text("")
            time.sleep(0.01)  # distinct finish times, oldest first
        runs.append(run)
    return runs


def test_prune_keeps_the_newest_and_never_a_run_being_written_or_kept(tmp_path, capsys):
    old, middle, new = _fake_runs(tmp_path, ["a-old", "b-middle", "c-new"])
    (writing,) = _fake_runs(tmp_path, ["d-writing"], complete=False)
    assert main(["dumps", "--root", str(tmp_path), "keep", "a-old"]) == 0
    assert main(["dumps", "--root", str(tmp_path), "prune", "--keep", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 run(s) removed" in out and str(middle) in out
    assert {p.name for p in tmp_path.iterdir()} == {"a-old", "c-new", "d-writing"}  # kept, newest, in progress
    assert main(["dumps", "--root", str(tmp_path), "prune", "--older-than", "0m"]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"a-old", "d-writing"}


@pytest.mark.parametrize("argv, message", [
    (["prune"], "needs --keep N and/or --older-than AGE"),
    (["prune", "--older-than", "7 days"], "--older-than takes a number with d, h or m"),
    (["prune", "--keep", "-1"], "--keep takes a number of runs >= 0"),
])
def test_prune_usage_errors_are_one_line(argv, message, tmp_path, capsys):
    assert main(["dumps", "--root", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow  # over 1 s: builds with dumps
def test_a_dumping_build_keeps_the_newest_runs_of_its_root(tmp_path, monkeypatch, capsys):
    _fake_runs(tmp_path, ["logits-llvm-1", "logits-llvm-2", "logits-llvm-3"])
    monkeypatch.setenv("MTP_TVM_DUMPS_KEEP", "2")
    r = mtp_tvm.check(case="logits", preset="tiny", dump_passes=tmp_path)
    assert r.passed and "[dumps] removed 2 old run(s) beyond the newest 2" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["logits-llvm-3", Path(r.dump_dir).name])


# ---- links out of the root, special files, read-only roots, extreme ages ----------------

def _cli_sub(argv, timeout=60):
    """The CLI in a process of its own, so that a hang is a timeout, not a stuck test run."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "mtp_tvm", *argv], capture_output=True, text=True, timeout=timeout)


def test_retention_never_follows_a_symlinked_run_out_of_the_root(tmp_path, capsys):
    from mtp_tvm.cli import main

    root, elsewhere = tmp_path / "dumps", tmp_path / "elsewhere"
    _fake_runs(root, ["a-1", "a-2"])
    _fake_runs(elsewhere, ["precious"])
    (root / "link-run").symlink_to(elsewhere / "precious")
    assert main(["dumps", "--root", str(root), "prune", "--keep", "0"]) == 0
    out = capsys.readouterr().out
    assert "link-run" not in out and "2 run(s) removed" in out
    assert sorted(p.name for p in (elsewhere / "precious").iterdir()) == ["complete", "index.json"]
    assert (root / "link-run").is_symlink() and not (root / "a-1").exists()
    assert main(["dumps", "--root", str(root), "list"]) == 0
    assert "link-run" not in capsys.readouterr().out  # not a run of this root


@pytest.mark.slow  # over 1 s
def test_a_fifo_where_a_marker_or_the_index_goes_is_refused_not_waited_on(tmp_path):
    import os

    root = tmp_path / "dumps"
    _fake_runs(root, ["r-1", "r-2"])
    os.mkfifo(root / "r-1" / "kept")
    (root / "r-2" / "index.json").unlink()
    os.mkfifo(root / "r-2" / "index.json")
    keep = _cli_sub(["dumps", "--root", str(root), "keep", str(root / "r-1")])
    assert keep.returncode == 2 and keep.stderr.startswith("mtp-tvm: error: cannot mark") and \
        keep.stderr.count("\n") == 1, keep.stderr
    show = _cli_sub(["dumps", "--root", str(root), "show", str(root / "r-2")])
    assert show.returncode == 2 and "not a regular file" in show.stderr and show.stderr.count("\n") == 1, show.stderr
    listed = _cli_sub(["dumps", "--root", str(root), "list"])
    assert listed.returncode == 0 and "damaged index" in listed.stdout, listed.stdout + listed.stderr


def test_a_read_only_root_is_one_line(tmp_path, capsys, monkeypatch):
    """(Simulated: the tests may run as root, whom permissions do not stop.)"""
    import errno
    import pathlib

    from mtp_tvm.cli import main
    from mtp_tvm.support import plain_files

    root = tmp_path / "dumps"
    _fake_runs(root, ["r-1"])

    def read_only(*_a, **_k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(pathlib.Path, "unlink", read_only)
    monkeypatch.setattr(plain_files.os, "open", read_only)
    assert main(["dumps", "--root", str(root), "prune", "--keep", "0"]) == 2
    assert capsys.readouterr().err == f"mtp-tvm: error: cannot remove {root / 'r-1'}: Read-only file system\n"
    assert main(["dumps", "--root", str(root), "keep", str(root / "r-1")]) == 2
    assert capsys.readouterr().err.startswith(f"mtp-tvm: error: cannot mark {root / 'r-1'} kept: Read-only file ")


@pytest.mark.parametrize("age", ["99999999999d", "1" + "0" * 30 + "h", "1" * 400 + "m"])
def test_extreme_ages_are_one_line(tmp_path, capsys, age):
    from mtp_tvm.cli import main

    _fake_runs(tmp_path, ["r-1"])
    assert main(["dumps", "--root", str(tmp_path), "prune", "--older-than", age]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mtp-tvm: error: --older-than {age} is too long ago") and err.count("\n") == 1
    assert (tmp_path / "r-1" / "complete").exists()


def test_an_age_of_zero_removes_every_complete_run(tmp_path, capsys):
    from mtp_tvm.cli import main

    _fake_runs(tmp_path, ["r-1", "r-2"])
    (tmp_path / "r-2" / "complete").unlink()  # still being written
    assert main(["dumps", "--root", str(tmp_path), "prune", "--older-than", "0d"]) == 0
    assert not (tmp_path / "r-1").exists() and (tmp_path / "r-2").exists()
