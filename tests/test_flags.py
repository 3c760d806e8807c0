"""Each option declared once (``support.flags``): every flag of a dataclass's field is named after the field and
sets it, the parser tells a given flag from a defaulted one, ``as_argv`` restates an object in flags the parser
reads back to the same object, the refusal sets come from the declarations, and the CLI reference's tables are
the declarations' (docs/guides/cli.md)."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from mtp_tvm.cli import build_parser
from mtp_tvm.cli.common import CASE_OPTIONS, COMMAND_FLAGS, DEBUG_OPTIONS, MANIFEST_OPTIONS
from mtp_tvm.cli.reference import TABLES, regenerate
from mtp_tvm.compiler.options import BuildSpec, DebugOptions
from mtp_tvm.support.flags import Flag, as_argv, flags, options_from
from mtp_tvm.tools.convert.convert import WeightSource
from mtp_tvm.tools.tune.options import TuneOptions

REPO = Path(__file__).resolve().parents[1]
DECLARED = (BuildSpec, DebugOptions)


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_every_field_has_its_flag_and_every_flag_sets_its_field():
    for cls in DECLARED:
        assert set(flags(cls)) == {f.name for f in dataclasses.fields(cls)}, cls  # every field is an option
        for name, flag in flags(cls).items():
            word = name.replace("_", "-")
            assert flag.name == f"--{word}" or (flag.repeat and word.startswith(flag.name[2:])), (cls, name)
    fields = {name: flag for cls in DECLARED for name, flag in flags(cls).items()}
    seen = set()
    for command, parser in _commands().items():
        for action in parser._actions:
            flag = fields.get(action.dest)
            if flag is not None:  # the parser's spelling is the declaration's, and it sets the field
                assert action.option_strings == [flag.name, *flag.aliases], (command, action.dest)
                seen.add(action.dest)
            else:  # no other flag takes a declared flag's name
                assert not set(action.option_strings) & {f.name for f in fields.values()}, (command, action)
    assert seen == set(fields)  # every declared flag is some command's


# bench's --tokens is BenchOptions.tokens, a sweep (a comma list), not BuildSpec's T: BenchOptions lives with the
# bench, which imports TVM, so the parser cannot read its declaration (yet)
SPELLED_BY_HAND = {("bench.py", "--tokens")}


def test_no_command_spells_a_declared_flag_itself():
    """``grep`` finds each declared flag's name in one place: its field (the CLI adds it from there)."""
    declared = (*DECLARED, TuneOptions, WeightSource)
    names = {f.name for cls in declared for f in flags(cls).values()} | {f.name for f in COMMAND_FLAGS}
    for path in (REPO / "mtp_tvm" / "cli").glob("*.py"):
        spelled = set(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", path.read_text()))
        assert {(path.name, n) for n in spelled & names} <= SPELLED_BY_HAND, path.name


def test_a_flag_and_its_field_disagree_is_caught():
    """The check above fails on a drifted name: a flag declared by hand under another name than its field's."""

    @dataclasses.dataclass(frozen=True)
    class Drifted:
        only_changed: bool = dataclasses.field(default=False, metadata={"flag": {"help": "x"}})

    (flag,) = flags(Drifted).values()
    assert flag.name == "--only-changed" and flag.name != "--dump-only-changed"


def test_the_parser_knows_which_flags_were_given_without_a_second_parse():
    parser = build_parser()
    args = parser.parse_args(["check", "--seed", "0", "--preset", "flash"])  # both equal to their defaults
    assert {"seed", "preset"} <= args.given and "case" not in args.given
    assert (args.case, args.preset, args.seed) == (BuildSpec().case, "flash", 0)  # defaults filled from the fields
    assert parser.parse_args(["check"]).given == frozenset()


@pytest.mark.parametrize("spec, debug", [
    (BuildSpec(), DebugOptions()),
    (BuildSpec(case="lm-head", preset="tiny", frontend="relax", tokens=4, vocab_shard=256, schedule="none",
               owners=2, tp=4, cuda_graph=True),
     DebugOptions(dump_passes="out", dump_only_changed=True, dump_filter="^tirx", dump_func="main", dump_nested=True,
                  time_passes=True, disable_passes=("a", "b"), bisect_limit=0)),
    (BuildSpec(target="cuda"), DebugOptions(dump_passes=True)),
])
def test_as_argv_reads_back_to_the_same_options(spec, debug):
    args = build_parser().parse_args(["check", *spec.as_argv(), *as_argv(debug)])
    assert options_from(args, BuildSpec) == spec and options_from(args, DebugOptions) == debug


def test_the_refusal_sets_come_from_the_declarations():
    assert {"case", "preset", "frontend", "tokens", "vocab_shard", "owners", "tp", "cuda_graph", "seed", "arch",
            "compile_only", "nan_check", "max_e2e_abs_diff", "perturb_logit"} == set(CASE_OPTIONS)
    assert {"target", "schedule", "dump_passes"} <= set(MANIFEST_OPTIONS) and "tokens" not in MANIFEST_OPTIONS
    assert set(DEBUG_OPTIONS) == set(flags(DebugOptions)) - {"dump_passes"}


def test_a_declared_flag_restates_its_value():
    flag = Flag("disable_passes", "x", metavar="NAME", repeat=True)
    assert flag.name == "--disable-pass" and flag.words(("a", "b")) == ["--disable-pass", "a", "--disable-pass", "b"]
    assert Flag("dump_passes", "x", metavar="DIR", optional_value=True).words(True) == ["--dump-passes"]
    assert Flag("bisect_limit", "x", type=int).words(0) == ["--bisect-limit", "0"]  # 0 is a value, not unset


def test_the_cli_reference_is_generated_from_the_declarations():
    path = REPO / "docs" / "guides" / "cli.md"
    text = path.read_text()
    assert all(f"<!-- flags: {name} -->" in text for name in TABLES)
    assert regenerate(text) == text, "docs/guides/cli.md's flag tables are stale: python -m mtp_tvm.cli.reference"
