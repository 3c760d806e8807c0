"""Pass plugins load from a file, and bad plugins or extra passes are one-line user errors."""

import re

import pytest
import tvm

from helpers import REPO
from mtp_tvm.passes.plugins import load_pass_plugin, resolve_extra_passes
from mtp_tvm.passes.target import resolve_target
from mtp_tvm.support.errors import UsageError


def test_a_plugin_file_gives_passes_per_phase():
    plugin = load_pass_plugin("examples/int32_logits_accumulator.py")
    extra = resolve_extra_passes(plugin, resolve_target("llvm"))
    assert list(extra) == ["fuse"] and extra["fuse"][0].info.name == "Int32LogitsAccumulator"


@pytest.mark.parametrize("source, message", [
    ("def passes(target):\n    return {'finalize': []}\n", "only legalize, fuse, schedule take them"),
    ("def passes(target):\n    return {'fuse': ['not a pass']}\n", "must be tvm.transform.Pass"),
    ("x = 1\n", r"defines no passes\(target\) function"),
    ("import nonexistent_module_xyz\n", r"\(loading it\) failed: ModuleNotFoundError"),
])
def test_bad_plugins_are_user_errors(tmp_path, source, message):
    path = tmp_path / "plugin.py"
    path.write_text(source)
    with pytest.raises(UsageError, match=message):
        resolve_extra_passes(load_pass_plugin(path), resolve_target("llvm"))


def test_a_missing_plugin_file():
    with pytest.raises(UsageError, match="does not exist"):
        load_pass_plugin("no/such/plugin.py")


def test_extra_passes_may_be_a_plain_mapping():
    p = tvm.transform.module_pass(lambda m, _c: m, opt_level=0, name="Noop")
    assert resolve_extra_passes({"legalize": [p]}, resolve_target("llvm")) == {"legalize": [p]}


def test_a_plugin_that_is_not_python_is_refused(tmp_path):
    (tmp_path / "passes.txt").write_text("def passes(target): return {}\n")
    with pytest.raises(UsageError, match="is not a Python file"):
        load_pass_plugin(tmp_path / "passes.txt")


def test_a_plugin_pass_returning_an_empty_module_is_a_build_error():
    import mtp_tvm

    @tvm.transform.module_pass(opt_level=0, name="Emptier")
    def emptier(mod, _ctx):
        return tvm.IRModule()

    with pytest.raises(mtp_tvm.BuildError, match="has no function 'main' to run"):
        mtp_tvm.check(case="norm", preset="tiny", extra_passes={"fuse": [emptier]}, log=lambda *_: None)


EXIT_IN_PASS = """import sys, tvm
@tvm.transform.module_pass(opt_level=0, name="Exiter")
def exiter(mod, ctx):
    sys.exit(0)
def passes(target):
    return {"fuse": [exiter]}
"""
RAISE_IN_PASS = """import tvm
@tvm.transform.module_pass(opt_level=0, name="Raiser")
def raiser(mod, ctx):
    raise KeyError('no such block')
def passes(target):
    return {"fuse": [raiser]}
"""


@pytest.mark.parametrize("source, message", [
    ("import sys\nsys.exit(0)\n", r"\(loading it\) called sys.exit\(0\)"),
    ("raise SystemExit\n", r"\(loading it\) called sys.exit\(None\)"),
    ("def passes(target):\n    import sys; sys.exit(0)\n", r"passes\(target\) called sys.exit\(0\)"),
    ("def passes(target):\n    raise ValueError('no')\n", r"passes\(target\) failed: ValueError: no"),
    ("def passes(target):\n    return None\n", r"passes\(target\) must map phase names .* got NoneType"),
    ("def passes(target):\n    return [1]\n", r"passes\(target\) must map phase names .* got list"),
    ("def passes(target):\n    return {'fuse': 'tirx.X'}\n", r"for phase 'fuse' must be a list of passes, got str"),
    ("def passes(target):\n    return {'fuse': 3}\n", r"for phase 'fuse' must be a list of passes, got int"),
    (EXIT_IN_PASS, r"called sys.exit\('0'\) during the build of norm"),
    (RAISE_IN_PASS, r"raised KeyError in raiser \(line 4\) during the build of norm: .*no such block"),
])
@pytest.mark.parametrize("command", ["check", "build"])
def test_a_plugin_that_exits_raises_or_returns_garbage_is_one_line_exit_2(tmp_path, capsys, source, message,
                                                                             command):
    """Issue 25: sys.exit(0) in a plugin made check a silent pass and build a success that wrote nothing."""
    from mtp_tvm.cli import main

    plugin = tmp_path / "plugin.py"
    plugin.write_text(source)
    extra = ["--out", str(tmp_path / "art")] if command == "build" else []
    rc = main([command, "--case", "norm", "--preset", "tiny", "--pass-plugin", str(plugin), *extra])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("mtp-tvm: error: ") and err.count("\n") == 1 and str(plugin) in err, err
    assert re.search(message, err), err
    assert not (tmp_path / "art").exists()


def test_an_extra_passes_function_that_exits_is_a_usage_error():
    import sys

    import mtp_tvm

    with pytest.raises(UsageError, match=r"extra_passes\(target\) called sys.exit\(3\)"):
        mtp_tvm.compile(case="norm", preset="tiny", extra_passes=lambda t: sys.exit(3))


def test_systemexit_from_a_handler_never_reads_as_success(monkeypatch, capsys):
    from mtp_tvm import cli
    from mtp_tvm.cli import cases

    def exits(_args):
        raise SystemExit(0)

    monkeypatch.setattr(cases, "_cmd_list", exits)
    assert cli.main(["list"]) == 2
    assert "user code called sys.exit(0) during list" in capsys.readouterr().err


@pytest.mark.parametrize("phase, idle", [("fuse", True), ("schedule", False)])
def test_a_plugin_pass_that_changed_nothing_is_said_with_its_phase(phase, idle):
    import mtp_tvm

    lines = []
    plugin = load_pass_plugin(REPO / "tests" / "module_blocks" / "tag_fused_norm.py")  # tags fused norm kernels
    touch = plugin(resolve_target("llvm"))["fuse"][0]
    result = mtp_tvm.check(case="norm", preset="tiny", frontend="relax", extra_passes={phase: [touch]},
                           log=lines.append)
    warned = [line for line in lines if "TagFusedNorm" in line]
    assert result.passed and bool(warned) == idle
    if idle:
        assert warned == [
            "[passes] warning: a pass of extra_passes: pass 'TagFusedNorm' changed nothing in any function (phase "
            f"'fuse', 1 run); at that point the module holds {warned[0].split('module holds ')[1]}"]
        assert "0 fused" in warned[0] and "before FuseOps/FuseTIR" in warned[0]


def test_a_compile_only_build_says_which_plugin_pass_changed_nothing():
    from mtp_tvm.artifact.export import build, describe
    from mtp_tvm.compiler.options import BuildSpec, DebugOptions

    plugin = load_pass_plugin(REPO / "tests" / "module_blocks" / "tag_fused_norm.py")
    built = build(None, BuildSpec(case="norm", preset="tiny", frontend="relax"), DebugOptions(extra_passes=plugin))
    assert "[passes] warning: pass plugin " in describe(built) and "'TagFusedNorm' changed nothing" in describe(built)
