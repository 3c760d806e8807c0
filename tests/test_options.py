"""``compiler/options.py``: the specs every verb takes (a case's ``BuildSpec``, a module file's ``ModuleSpec``), told
apart by ``split_options``; either's target resolved once."""

from __future__ import annotations

import pickle

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
