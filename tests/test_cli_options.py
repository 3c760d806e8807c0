"""No option is silently ignored: every option of every command, set away from its default in each way the
command runs (a case, ``--module``, ``--artifact``, ``--compile-only``...), is either read by the command before
its work starts (passed on, or checked) or refused with a message naming it. The work itself (each API entry
point) is replaced by a stop, so the walk builds nothing."""

from __future__ import annotations

import argparse
from unittest import mock

import pytest

from mtp_tvm.cli import build_parser
from mtp_tvm.compiler.options import token_counts
from mtp_tvm.support.errors import MtpError
from mtp_tvm.verify.tolerances import parse_logit_perturbation

GLOBAL = {"help", "debug", "verbose", "command", "handler", "dumps_command"}

# every API call a command hands its work to (patched to stop there)
ENTRY_POINTS = {
    "mtp_tvm.tools.check.check": ["check"], "mtp_tvm.tools.check.localize": ["localize"],
    "mtp_tvm.tools.tune.tune": ["tune"],
    "mtp_tvm.tools.minimize.minimize": ["minimize_module"], "mtp_tvm.artifact.export": ["build"],
    "mtp_tvm.artifact.load": ["check_artifact"],
    "mtp_tvm.tools.bisect.bisection": ["bisect_passes", "bisect_schedule"], "mtp_tvm.tools.bench.bench": ["bench"],
    "mtp_tvm.compiler.arrays": ["read_npz", "write_npz"], "mtp_tvm.tools.convert.convert": ["read_weight_source"],
}

# the ways each command runs: the argv before the option under test
CONTEXTS = {
    "check": [[], ["--module", "m.py"], ["--artifact", "ART"], ["--compile-only"]],
    "build": [["--out", "OUT"], ["--out", "OUT", "--module", "m.py"]],
    "bench": [[], ["--module", "m.py"], ["--artifact", "ART"]],
    "localize": [["--against", "schedule=none"], ["--module", "m.py"]],
    "minimize": [["--module", "m.py"]],
    "run": [["ART", "--random-inputs", "--out", "o.npz"], ["ART", "--inputs", "i.npz", "--out", "o.npz"]],
    "inputs": [["--out", "IN.npz"], ["--out", "IN.npz", "--artifact", "ART"]],
    "bisect": [[], ["--module", "m.py"]],
    "tune": [[], ["--module", "m.py"]],
}


class _Stop(Exception):
    """The command reached its work."""


class _Watched(argparse.Namespace):
    """A namespace that remembers which options the command read."""

    def __getattribute__(self, name):
        if not name.startswith("_"):
            object.__getattribute__(self, "_read").add(name)
        return object.__getattribute__(self, name)


def _value(action: argparse.Action, default) -> list[str]:
    """Command-line words that set ``action`` away from its default."""
    if action.nargs == 0:
        return []
    if action.choices:
        return [next(str(c) for c in action.choices if c != default)]
    if action.type in (int, float, token_counts):
        return ["3"]
    if action.type is parse_logit_perturbation:
        return ["0,0,0"]
    return ["x1.py" if action.dest in ("module", "extra_passes") else "x1"]


def _walk():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for command, contexts in CONTEXTS.items():
        for context in contexts:
            for action in commands[command]._actions:
                if action.dest in GLOBAL or not action.option_strings or action.dest in {
                        w.lstrip("-").replace("-", "_") for w in context}:
                    continue
                yield command, context, action


def argv_last(action, default) -> str:
    return (_value(action, default) or [action.option_strings[-1]])[-1]


def _reached_work(monkeypatch, parser, argv) -> tuple[set[str], str | None]:
    """Run ``argv``'s command (parsed by ``parser``: one for all, a build takes 20 ms) up to its work: the options
    it read, and its refusal (None: it reached the work)."""
    import importlib

    def stop(*_a, **_k):
        raise _Stop

    for module, names in ENTRY_POINTS.items():
        mod = importlib.import_module(module)
        for name in names:
            monkeypatch.setattr(mod, name, stop)
    monkeypatch.setattr("mtp_tvm.contract.cases.Case.make_inputs", stop)
    artifact = mock.MagicMock()  # what is read of it
    artifact.sized.return_value = (mock.MagicMock(), mock.MagicMock())  # (case, shapes): --weights sizes by them
    monkeypatch.setattr("mtp_tvm.artifact.load.load", lambda *_a, **_k: artifact)
    monkeypatch.setattr("mtp_tvm.artifact.manifest.read_manifest", lambda _p: {"module": {}}
                        if "--module" in argv else {})
    try:
        args = parser.parse_args(argv)
    except SystemExit:  # argparse refused it (its message names the option)
        return set(), argv[-1]
    watched = _Watched(**vars(args))
    object.__setattr__(watched, "_read", set())
    try:
        args.handler(watched)
    except _Stop:
        return object.__getattribute__(watched, "_read"), None
    except (MtpError, SystemExit) as e:
        return object.__getattribute__(watched, "_read"), str(e)
    return object.__getattribute__(watched, "_read"), None


@pytest.mark.slow  # hundreds of parses; imports every tool
def test_every_option_of_every_command_is_used_or_refused(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    ignored, parser = [], build_parser()
    for command, context, action in _walk():
        base_read, base_error = _reached_work(monkeypatch, parser, [command, *context])
        assert base_error is None, (command, context, base_error)
        flag = action.option_strings[-1]
        default = parser.parse_args([command, *context]).__dict__[action.dest]
        read, error = _reached_work(monkeypatch, parser, [command, *context, flag, *_value(action, default)])
        named = any(spelling in (error or "") for spelling in action.option_strings)  # an alias: the flag's name
        if action.dest not in read and not (error and (named or error == argv_last(action, default))):
            ignored.append(f"{command} {' '.join(context)} {flag}")
    assert not ignored, "options neither used nor refused:\n" + "\n".join(ignored)
