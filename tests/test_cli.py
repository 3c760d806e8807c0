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


_IMPORTS = """
import json, sys, time
t0 = time.perf_counter()
from mtp_tvm.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:  # --help and argparse's usage errors
    rc = e.code
print(json.dumps({"rc": rc, "heavy": sorted(m for m in ("tvm", "torch") if m in sys.modules)}), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [
    ["--help"], ["list"], ["list", "--preset", "tiny"], ["dumps", "--root", "{tmp}", "list"],
    ["dumps", "--root", "{tmp}", "show", "latest"], ["dumps", "--root", "{tmp}", "prune", "--keep", "3"],
    ["check", "--case", "nope"], ["build", "--preset", "huge", "--out", "{tmp}/a"], ["check", "--tokens", "0"],
    ["tune", "--frontend", "onnx"], ["bench", "--vocab-shard", "0"], ["check", "--no-such-flag"],
    ["run", "{tmp}/a", "--out", "{tmp}/o.npz"], ["inputs", "--case", "tial", "--out", "{tmp}/in.npz"],
])
def test_commands_that_build_nothing_import_neither_tvm_nor_torch_and_answer_within_a_second(argv, tmp_path):
    """--help, list, dumps and every usage error: the handlers import TVM and torch only to build or run, so
    these answer at once (a newcomer waited 6-9 s for each, mostly on ``import tvm``)."""
    import time

    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    walls = []
    for _ in range(2):  # the faster of two: one run may share the CPUs with a build
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", _IMPORTS, *argv], capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
    result = json.loads(out.stderr.strip().splitlines()[-1])
    assert result["heavy"] == [], (argv, result, out.stderr)
    assert result["rc"] in (0, 2), (argv, out.stderr)
    assert min(walls) < 1.0, (argv, walls)
