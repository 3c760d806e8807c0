"""Pass plugins load from a file, and bad plugins or extra passes are one-line user errors."""

import pytest
import tvm

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
    ("import nonexistent_module_xyz\n", "failed to load: ModuleNotFoundError"),
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
