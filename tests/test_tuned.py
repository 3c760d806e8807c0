"""Tuning databases at build time: records replay only on the
target they were tuned for, a damaged database is one line naming the file and line for every command, and a
database being written by a `tune` is neither written nor read by another process meanwhile."""

import hashlib
import json

import pytest
from tvm import s_tir

import mtp_tvm
from helpers import slow_except
from mtp_tvm.cli import main
from mtp_tvm.compiler.options import BuildSpec
from mtp_tvm.passes.target import resolve_target
from mtp_tvm.schedule.tuned import (
    RECORDS_FILE,
    WORKLOADS_FILE,
    describe_identity,
    target_identity,
    workload,
)
from mtp_tvm.support.folder_lock import folder_lock

TUNED_FOR = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}  # the records (vdpbf16ps there)
OTHER = {"kind": "llvm", "mcpu": "haswell"}


def _database(folder, target) -> None:
    """A database with one record per kernel of the tiny norm case (a trace that replays anywhere), as
    tuned for ``target``; no measurement, so it takes seconds."""
    from tvm.s_tir import meta_schedule as ms

    from mtp_tvm.tools.tune.kernels import case_kernels

    folder.mkdir(parents=True)
    tgt = resolve_target(target)
    db = ms.database.JSONDatabase(work_dir=str(folder))
    for func in case_kernels(BuildSpec("norm", preset="tiny"), tgt).values():
        key = workload(func)
        sch = s_tir.Schedule(key)
        sch.get_sblock("root")  # a trace of one step that changes nothing (MetaSchedule ignores empty ones)
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, db.commit_workload(key), [1e-3], tgt,
                                                         ms.arg_info.ArgInfo.from_prim_func(func)))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("tuned")
    _database(root / "llvm" / "norm", TUNED_FOR)
    return root


@pytest.fixture
def root(pristine, tmp_path, monkeypatch):
    """A fresh copy of the database root, ``$MTP_TVM_TUNED_ROOT`` pointing at it."""
    import shutil

    shutil.copytree(pristine, tmp_path / "tuned")
    monkeypatch.setenv("MTP_TVM_TUNED_ROOT", str(tmp_path / "tuned"))
    return tmp_path / "tuned" / "llvm" / "norm"


def _digest(folder) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.json"))}


def test_target_identity_is_what_decides_the_instructions():
    znver4 = target_identity(resolve_target(TUNED_FOR))
    assert znver4 == {"kind": "llvm", "mcpu": "znver4"}
    assert target_identity(resolve_target({**TUNED_FOR, "num-cores": 64})) == znver4  # cores: not the ISA
    assert target_identity(resolve_target(OTHER)) != znver4
    mattr = target_identity(resolve_target({**TUNED_FOR, "mattr": ["+fma", "+avx2"]}))
    assert mattr != znver4 and describe_identity(mattr) == "llvm -mcpu=znver4 -mattr=+avx2,+fma"


def test_records_of_another_cpu_are_skipped_and_said_never_replayed(root):
    """The issue's instance: znver4 records replayed for a haswell target (LLVM abort, exit 134)."""
    compiled = mtp_tvm.compile(case="norm", preset="tiny", schedule="tuned", target=OTHER)
    assert compiled.untuned and all("tuned for llvm -mcpu=znver4, not for llvm -mcpu=haswell: not replayed" in why
                                    for why in compiled.untuned.values()), compiled.untuned
    same = mtp_tvm.compile(case="norm", preset="tiny", schedule="tuned", target=TUNED_FOR)
    assert not same.untuned  # the records' own target replays them


def _truncate(path) -> None:
    path.write_bytes(path.read_bytes()[:-25])  # what a killed append leaves


def _missing_workload(path) -> None:
    lines = path.read_text().splitlines()
    entry = json.loads(lines[-1])
    lines[-1] = json.dumps([7, entry[1]])  # a record naming another process's workload number
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("damage, file, message", [
    (_truncate, RECORDS_FILE, "line 3 is damaged (Expecting"),
    (_truncate, WORKLOADS_FILE, "line 3 is damaged (Unterminated string"),
    (_missing_workload, RECORDS_FILE, "line 3 is damaged (names workload 7; the database has 3)"),
])
@pytest.mark.parametrize("command", slow_except(["check", "build", "tune"], {"check"}))
def test_a_damaged_database_is_one_line_naming_file_and_line(root, tmp_path, capsys, damage, file, message,
                                                              command):
    damage(root / file)
    argv = {"check": ["check", "--case", "norm", "--preset", "tiny", "--schedule", "tuned"],
            "build": ["build", "--case", "norm", "--preset", "tiny", "--schedule", "tuned", "--out",
                      str(tmp_path / "art")],
            "tune": ["tune", "--case", "norm", "--preset", "tiny", "--trials", "1", "--work-dir", str(root)]}[command]
    before = _digest(root)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mtp-tvm: error: tuning database {root / file} {message}") and err.count("\n") == 1, err
    assert err.endswith("; remove that line (or the folder) and tune again\n"), err
    assert _digest(root) == before and not (tmp_path / "art").exists()


@pytest.mark.slow  # tune starts its runner's worker process, which imports TVM
def test_a_second_tune_into_a_folder_being_tuned_is_refused_and_the_first_database_is_intact(root, capsys):
    before = _digest(root)
    with folder_lock(root, True, "held by the test"):  # what a running tune holds
        rc = main(["tune", "--case", "norm", "--preset", "tiny", "--trials", "1", "--work-dir", str(root)])
        err = capsys.readouterr().err
        assert rc == 2 and err == (f"mtp-tvm: error: another `mtp-tvm tune` is writing {root}; wait for it to "
                                   "finish or pass another --work-dir\n"), err
        rc = main(["check", "--case", "norm", "--preset", "tiny", "--schedule", "tuned", "--target",
                   json.dumps(TUNED_FOR)])
        assert rc == 2 and f"tuning database {root} is being written by a running `mtp-tvm tune`" in \
            capsys.readouterr().err
    assert _digest(root) == before


@pytest.mark.slow  # tune starts its runner's worker process, which imports TVM
def test_tune_refuses_to_mix_targets_in_one_database(root, capsys):
    rc = main(["tune", "--case", "norm", "--preset", "tiny", "--trials", "1", "--work-dir", str(root), "--target",
               json.dumps({**OTHER, "num-cores": 2})])
    err = capsys.readouterr().err
    assert rc == 2 and "holds records tuned for llvm -mcpu=znver4 (line 1 of database_tuning_record.json), not " \
                       "for llvm -mcpu=haswell: tune into another --work-dir" in err, err


@pytest.mark.slow
def test_two_tunes_of_different_cases_into_one_folder_leave_a_database_both_cases_check_with(tmp_path, prefork):
    """The issue's acceptance: two `tune` runs into one --work-dir either both land intact or the second is
    refused (exit 2) with the first's database intact; then `check --schedule tuned` passes for each case tuned."""
    import os
    import subprocess

    shared = tmp_path / "shared"
    (tmp_path / "root" / "llvm").mkdir(parents=True)
    for case in ("norm", "logits"):  # both cases' database folder is the shared one
        (tmp_path / "root" / "llvm" / case).symlink_to(shared)
    env = {**os.environ, "MTP_TVM_TUNED_ROOT": str(tmp_path / "root")}
    tunes = {case: subprocess.Popen([*prefork.python, "-m", "mtp_tvm", "tune", "--case", case, "--space", "hand",
                                     "--trials", "1", "--work-dir", str(shared)], env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE) for case in ("norm", "logits")}
    done = {case: (p.wait(timeout=1200), p.stderr.read()) for case, p in tunes.items()}
    tuned = [case for case, (rc, _) in done.items() if rc == 0]
    refused = [case for case, (rc, err) in done.items() if rc == 2 and "another `mtp-tvm tune` is writing" in err]
    assert tuned and len(tuned) + len(refused) == 2, done
    for case in tuned:
        check = subprocess.run([*prefork.python, "-m", "mtp_tvm", "check", "--case", case, "--preset", "tiny",
                                "--schedule", "tuned"], env=env, capture_output=True, text=True, timeout=600)
        assert check.returncode == 0 and "PASSED" in check.stdout, check.stdout + check.stderr
