import json
import os
import subprocess
import sys

import pytest

from mtp_tvm.cli import main


def test_check_exit_zero_and_summary(tmp_path, capsys):
    report = tmp_path / "r.json"
    rc = main(["check", "--case", "logits", "--preset", "tiny", "--frontend", "tir", "--tokens", "3",
               "--vocab-shard", "256", "--seed", "5", "--report", str(report)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "[RUN] seed=5" in out and "PASSED" in out and "candidate_logits" in out
    d = json.loads(report.read_text())
    assert d["shapes"]["tokens"] == 3 and d["shapes"]["vocab_shard"] == 256 and d["passed"]


@pytest.mark.parametrize("argv, message", [
    (["check", "--case", "nope"], "unknown case"),
    (["check", "--preset", "huge"], "unknown preset"),
    (["check", "--frontend", "onnx", "--preset", "tiny"], "unknown frontend"),
    (["check", "--target", "{oops", "--preset", "tiny"], "malformed target JSON"),
    (["check", "--tokens", "0", "--preset", "tiny"], "tokens must be"),
])
def test_user_errors_exit_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_python_dash_m_and_list():
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-m", "mtp_tvm", "list"], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert "tail-norm" in out and "flash (D=4096" in out


def test_check_with_debugging_options(tmp_path, capsys):
    rc = main(["check", "--case", "logits", "--preset", "tiny", "--frontend", "relax", "--time-passes",
               "--bisect-limit", "5", "--disable-pass", "FoldConstant", "--dump-passes", str(tmp_path),
               "--dump-only-changed"])
    out = capsys.readouterr().out
    assert rc == 0 and "pass timing: top 15 of" in out
    assert "disabled FoldConstant; bisect-limit 5: last optional pass applied 004 fuse/FuseOps" in out
    assert f"IR dumps: {tmp_path}/logits-llvm-" in out


def test_bisect_names_the_broken_pass_and_dumps_its_failing_build(tmp_path, capsys):
    rc = main(["bisect", "--case", "tail", "--preset", "tiny", "--pass-plugin",
               "examples/int32_logits_accumulator.py", "--dump-passes", str(tmp_path)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "FOUND first failing pass: 004 fuse/Int32LogitsAccumulator" in captured.out
    assert "004_fuse__Int32LogitsAccumulator.diff" in captured.out
    assert "[bisect] [" in captured.err


def test_bisect_says_when_there_is_nothing_to_find(capsys):
    assert main(["bisect", "--case", "logits", "--preset", "tiny"]) == 1
    assert "NOT FOUND: the golden check passes with every pass applied" in capsys.readouterr().out


def test_build_takes_the_debugging_options_and_artifact_checks_refuse_them(tmp_path, capsys):
    rc = main(["build", "--case", "logits", "--preset", "tiny", "--out", str(tmp_path / "art"), "--time-passes",
               "--dump-passes", str(tmp_path / "dumps"), "--disable-pass", "FoldConstant"])
    out = capsys.readouterr().out
    assert rc == 0 and "pass timing: top" in out and "disabled FoldConstant" in out
    assert f"IR dumps: {tmp_path}/dumps/logits-llvm-" in out
    assert main(["check", "--artifact", str(tmp_path / "art"), "--bisect-limit", "3"]) == 2
    assert "--artifact does not compile, so --bisect-limit cannot apply" in capsys.readouterr().err
