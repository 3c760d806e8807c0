import json
import os
import re
import subprocess
import sys

import pytest

from helpers import slow_except
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


@pytest.mark.slow  # a bisection: many builds
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


@pytest.mark.slow  # over 1 s: a build with dumps and pass timing
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


@pytest.mark.parametrize("argv", slow_except([  # two interpreters each: the fast loop keeps one of each kind
    ["--help"], ["list"], ["list", "--preset", "tiny"], ["dumps", "--root", "{tmp}", "list"],
    ["dumps", "--root", "{tmp}", "show", "latest"], ["dumps", "--root", "{tmp}", "prune", "--keep", "3"],
    ["check", "--case", "nope"], ["build", "--preset", "huge", "--out", "{tmp}/a"], ["check", "--tokens", "0"],
    ["tune", "--frontend", "onnx"], ["bench", "--vocab-shard", "0"], ["check", "--no-such-flag"],
    ["run", "{tmp}/a", "--out", "{tmp}/o.npz"], ["inputs", "--case", "tial", "--out", "{tmp}/in.npz"],
], [["--help"], ["list"], ["dumps", "--root", "{tmp}", "list"], ["check", "--case", "nope"]]))
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


def test_inputs_written_for_a_case_run_an_artifact_like_its_random_inputs(tmp_path, capsys):
    """The README's first steps: ``inputs`` writes the seeded inputs (no build), ``build`` an artifact, ``run``
    it on the file; ``run --random-inputs`` draws the same inputs itself, and ``inputs --artifact`` the
    artifact's."""
    import numpy as np

    from mtp_tvm.compiler.arrays import read_npz

    common = ["--case", "logits", "--preset", "tiny", "--vocab-shard", "256"]
    assert main(["inputs", *common, "--tokens", "3", "--seed", "4", "--out", str(tmp_path / "in.npz")]) == 0
    assert "lm_head_weight       (256, 256)       bfloat16" in capsys.readouterr().out
    assert main(["build", *common, "--out", str(tmp_path / "a")]) == 0
    assert main(["run", str(tmp_path / "a"), "--inputs", str(tmp_path / "in.npz"),
                 "--out", str(tmp_path / "o.npz")]) == 0
    assert main(["run", str(tmp_path / "a"), "--random-inputs", "--tokens", "3", "--seed", "4",
                 "--out", str(tmp_path / "r.npz")]) == 0
    assert main(["inputs", "--artifact", str(tmp_path / "a"), "--tokens", "3", "--seed", "4",
                 "--out", str(tmp_path / "ia.npz")]) == 0
    capsys.readouterr()
    with np.load(tmp_path / "o.npz") as o, np.load(tmp_path / "r.npz") as r:
        assert o["candidate_logits"].shape == (3, 256) and np.array_equal(o["candidate_logits"], r["candidate_logits"])
    dtypes = {"hidden_states": "bfloat16", "lm_head_weight": "bfloat16"}
    a, b = read_npz(tmp_path / "in.npz", dtypes), read_npz(tmp_path / "ia.npz", dtypes)
    assert all(np.array_equal(a[k].view(np.uint16), b[k].view(np.uint16)) for k in dtypes)
    assert main(["run", str(tmp_path / "a"), "--random-inputs"]) == 0  # no --out: shapes only, nothing written
    assert "outputs: not written" in capsys.readouterr().out and not (tmp_path / "x.npz").exists()
    assert main(["run", str(tmp_path / "a"), "--out", str(tmp_path / "x.npz")]) == 2
    assert "--random-inputs" in capsys.readouterr().err
    assert main(["inputs", "--artifact", str(tmp_path / "a"), "--case", "tail", "--out", str(tmp_path / "x.npz")]) == 2
    assert "from the artifact's manifest" in capsys.readouterr().err
    assert not (tmp_path / "x.npz").exists()


def test_list_shows_every_tensor_with_shape_and_dtype(capsys):
    assert main(["list", "--preset", "tiny"]) == 0
    lines = {" ".join(line.split()) for line in capsys.readouterr().out.splitlines()}
    assert {"in hidden_states [T, 256] bfloat16", "in lm_head_weight [512, 256] bfloat16",
            "out candidate_logits [T, 512] float32", "in hidden_out [2, R, 256] bfloat16",
            "out logits [2, 8, 1024] float32", "in e_proj_w [256, 256] int8"} <= lines


def test_debug_works_after_the_subcommand(capsys):
    assert main(["dumps", "show", "no-such-run", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().endswith("see `mtp-tvm dumps list`")
    assert main(["dumps", "show", "no-such-run"]) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.slow  # over 10 s on 2 cores
def test_tvm_and_llvm_lines_go_to_the_run_folder_not_between_ours(tmp_path, prefork):
    """TVM's own warnings (here the ``Unroll hint`` of a build whose UnrollLoop is skipped) land in the run
    folder's tvm.log, not on the terminal; --verbose lets them through; an invalid mcpu shows only our message."""
    argv = [*prefork.python, "-m", "mtp_tvm", "check", "--case", "tail", "--preset", "tiny", "--pass-plugin",
            "examples/int32_logits_accumulator.py", "--bisect-limit", "62", "--dump-passes", str(tmp_path / "d")]
    quiet = subprocess.run(argv, capture_output=True, text=True)
    assert quiet.returncode == 1 and "[RUN] seed=0" in quiet.stdout + quiet.stderr
    assert "Unroll hint" not in quiet.stdout + quiet.stderr
    (log,) = (tmp_path / "d").glob("*/tvm.log")
    assert "Warning: Unroll hint get ignore" in log.read_text()
    loud = subprocess.run(argv[:-1] + [str(tmp_path / "e"), "--verbose"], capture_output=True, text=True)
    assert "Warning: Unroll hint get ignore" in loud.stderr
    bad = subprocess.run([*prefork.python, "-m", "mtp_tvm", "check", "--preset", "tiny", "--target",
                          '{"kind": "llvm", "mcpu": "znver9"}'], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("mtp-tvm: error: unknown mcpu 'znver9'") and len(bad.stderr.splitlines()) == 1


_TIME_LINE = re.compile(r"time: (?P<wall>[\d.]+) s = import (?P<import>[\d.]+) \+ build (?P<build>[\d.]+) "
                        r"\(passes (?P<passes>[\d.]+), codegen (?P<codegen>[\d.]+)\) \+ inputs (?P<inputs>[\d.]+) "
                        r"\+ first-call (?P<first>[\d.]+) \+ run (?P<run>[\d.]+) \+ golden (?P<golden>[\d.]+) "
                        r"\+ profile (?P<profile>[\d.]+) \+ dumps (?P<dumps>[\d.]+) "
                        r"\+ other (?P<other>-?[\d.]+)")


@pytest.mark.slow  # a subprocess that imports TVM and builds
@pytest.mark.parametrize("command", ["check", "build"])
def test_the_time_line_accounts_for_the_wall_time(command, tmp_path):
    """check and build end with the split of their wall time; the parts add up to it, what no part covers stays
    under 5 %, and the wall time is the one the process took (its teardown skipped: seconds of TVM and torch
    objects being freed that no command needs). --time-passes shows the same line above the pass table."""
    import time

    argv = [sys.executable, "-m", "mtp_tvm", command, "--case", "logits", "--preset", "tiny", "--time-passes",
            "--dump-passes", str(tmp_path / "d"), *(["--out", str(tmp_path / "a")] if command == "build" else [])]
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True)
    external = time.perf_counter() - t0
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    m = _TIME_LINE.fullmatch(lines[-1])
    assert m, lines[-1]
    t = {k: float(v) for k, v in m.groupdict().items()}
    parts = ("import", "build", "inputs", "first", "run", "golden", "profile", "dumps", "other")
    assert abs(sum(t[p] for p in parts) - t["wall"]) <= 0.1 * len(parts)  # printed to 0.1 s each
    assert t["other"] <= 0.05 * t["wall"] and t["passes"] + t["codegen"] <= t["build"] + 0.1
    assert t["import"] > 0 and t["build"] > 0 and t["dumps"] > 0  # (tiny inputs, run, golden: 0.0 s or so)
    assert abs(t["wall"] - external) <= 0.05 * external, (t["wall"], external)
    if command == "check":  # the header's figures are the footer's: the whole build, the first call apart
        head = re.search(r" build=(?P<build>[\d.]+)s first-call=(?P<first>[\d.]+)ms run=", out.stdout)
        assert abs(float(head["build"]) - t["build"]) <= 0.1 + 0.05 * t["build"], (head["build"], t["build"])
        assert abs(float(head["first"]) / 1e3 - t["first"]) <= 0.1
    above = lines.index(next(ln for ln in lines if ln.startswith("pass timing:"))) - 1
    assert _TIME_LINE.fullmatch(lines[above])


def test_every_command_takes_its_build_defaults_from_one_table():
    """check, build, bisect, bench and tune (and the API's tune) default to BuildSpec's fields: tune once
    defaulted to preset tiny while check and bench built flash."""
    import inspect

    from mtp_tvm.cli import build_parser
    from mtp_tvm.compiler.options import BuildSpec
    from mtp_tvm.tools.tune.tune import tune

    spec = BuildSpec()
    parser = build_parser()
    for command in (["check"], ["build", "--out", "x"], ["bisect"], ["bench"], ["tune"]):
        args = parser.parse_args(command)
        for name in ("case", "preset", "target", "frontend", "schedule"):
            if hasattr(args, name):
                assert getattr(args, name) == getattr(spec, name), (command, name)
    assert list(inspect.signature(tune).parameters)[:2] == ["spec", "options"]  # a BuildSpec: its defaults
    from mtp_tvm.tools.bench.bench import BenchOptions
    from mtp_tvm.tools.tune.tune import TuneOptions

    tune_args, bench_args = parser.parse_args(["tune"]), parser.parse_args(["bench"])
    assert (tune_args.trials, tune_args.space, tune_args.seed) == (TuneOptions().trials, TuneOptions().space,
                                                                   TuneOptions().seed)
    assert bench_args.rounds == BenchOptions().rounds
