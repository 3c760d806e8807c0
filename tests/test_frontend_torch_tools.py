"""The debugging tools on the torch frontend's importer-made IR (tiny preset): bisect names a broken pass in it,
--profile times its kernels, tune tunes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtp_tvm.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.slow
def test_bisect_names_a_broken_pass_in_the_torch_frontends_ir(tmp_path, capsys):
    plugin = tmp_path / "int32_matmul.py"  # the example's INT32 accumulator, on the importer's logits kernel
    plugin.write_text(f"""
import importlib.util

_spec = importlib.util.spec_from_file_location("int32_example", {str(EXAMPLES / "int32_logits_accumulator.py")!r})
_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_example)


def passes(_target):
    return {{"fuse": [_example.int32_accumulator(kernel="matmul", block="matmul")]}}
""")
    assert main(["bisect", "--case", "logits", "--preset", "tiny", "--frontend", "torch",
                 "--pass-plugin", str(plugin)]) == 0
    assert "FOUND first failing pass: 004 fuse/Int32LogitsAccumulator" in capsys.readouterr().out


@pytest.mark.slow
def test_profile_and_tune_run_on_the_torch_frontend(tmp_path, capsys):
    assert main(["check", "--case", "tail", "--preset", "tiny", "--frontend", "torch", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "profile of main: case=tail" in out and "PASSED" in out
    assert main(["tune", "--case", "logits", "--preset", "tiny", "--frontend", "torch", "--trials", "2",
                 "--space", "hand", "--work-dir", str(tmp_path / "tuned")]) == 0
    assert "matmul" in capsys.readouterr().out
