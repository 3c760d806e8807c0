"""``compiler/options.py``: the specs every verb takes (a case's ``BuildSpec``, a module file's ``ModuleSpec``), told
apart by ``split_options``; either's target resolved once."""

from __future__ import annotations

import pickle

import pytest
from tvm.target import Target

from mtp_tvm.compiler.options import EITHER, BuildSpec, DebugOptions, ModuleSpec, split_options


def test_a_spec_resolves_its_target_once_and_travels_without_it():
    spec = BuildSpec(case="norm", preset="tiny")
    assert isinstance(spec.resolved_target, Target) and spec.resolved_target is spec.resolved_target
    again = pickle.loads(pickle.dumps(spec))  # to a worker process: it resolves its own
    assert again == spec and "resolved_target" not in again.__dict__
    assert ModuleSpec("m.py", target="cuda").resolved_target.kind.name == "cuda"
    assert split_options(spec, None, {}, "check", EITHER)[0] is spec  # a verb keeps the spec it was given


def test_split_options_tells_a_module_file_from_a_case():
    spec, debug = split_options("m.py", None, {"schedule": "none", "time_passes": True}, "check", EITHER)
    assert spec == ModuleSpec("m.py", schedule="none") and debug == DebugOptions(time_passes=True)
    assert split_options(None, None, {"module": "m.py", "target": "cuda"}, "check", EITHER)[0] == \
        ModuleSpec("m.py", target="cuda")
    assert split_options(ModuleSpec("a.py"), None, {"module": "b.py"}, "check", EITHER)[0] == ModuleSpec("b.py")
    assert split_options(None, None, {"case": "norm"}, "check", EITHER)[0] == BuildSpec(case="norm")
    assert split_options(None, None, {}, "compile", EITHER)[0] == BuildSpec()


def _count_resolutions(monkeypatch) -> list:
    """Each time a case's sizing is worked out, an item: the memo emptied first."""
    from mtp_tvm.compiler import options

    calls = []
    work = options._resolve_case
    monkeypatch.setattr(options, "_RESOLVED", {})
    monkeypatch.setattr(options, "_resolve_case", lambda spec: calls.append(spec) or work(spec))
    return calls


def test_a_spec_resolved_once_carries_its_case_to_a_worker_and_to_its_retargeted_copies(monkeypatch):
    import dataclasses
    import pickle

    from mtp_tvm.compiler import options

    calls = _count_resolutions(monkeypatch)
    spec = BuildSpec("logits", preset="tiny")
    case, shapes = spec.resolve()
    assert dataclasses.replace(spec, schedule="none", target="cuda").resolve() == (case, shapes)
    sent = pickle.dumps(spec)
    options._RESOLVED.clear()  # a worker process: nothing resolved yet
    assert pickle.loads(sent).resolve() == (case, shapes) and len(calls) == 1
    assert dataclasses.replace(spec, tokens=4).resolve()[1].tokens == 4 and len(calls) == 2  # another sizing


@pytest.mark.slow  # three commands on the tiny preset
@pytest.mark.parametrize("argv", [
    ["check", "--case", "norm", "--preset", "tiny"],
    ["localize", "--case", "norm", "--preset", "tiny", "--against", "schedule=none"],
    ["bench", "--case", "norm", "--preset", "tiny", "--tokens", "8", "--rounds", "1", "--peers", "numpy_fp32"],
], ids=["check", "localize", "bench"])
def test_a_command_resolves_its_case_once(argv, monkeypatch, capsys):
    from mtp_tvm.cli import main

    calls = _count_resolutions(monkeypatch)
    assert main(argv) == 0, capsys.readouterr().err
    assert len(calls) == 1
