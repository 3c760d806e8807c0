"""Each option declared once (``support.flags``): every flag of a dataclass's field is named after the field and
sets it, the parser tells a given flag from a defaulted one, ``as_argv`` restates an object in flags the parser
reads back to the same object, the refusal sets come from the declarations, and the CLI reference's tables are
the declarations' (docs/guides/cli.md)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import textwrap
from pathlib import Path

import pytest

from mtp_tvm.cli import build_parser
from mtp_tvm.cli.common import CASE_OPTIONS, DEBUG_OPTIONS, MANIFEST_OPTIONS
from mtp_tvm.cli.reference import TABLES, regenerate
from mtp_tvm.compiler.options import BuildSpec, DebugOptions
from mtp_tvm.support.flags import Flag, as_argv, flags, options_from
from mtp_tvm.tools.bench.options import BenchOptions
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


def raw_flags(source: str) -> list[str]:
    """The option strings (``--x``) of the ``add_argument`` calls written in ``source``: a flag spelt by hand, not
    derived from the field or keyword ``Flag`` it sets (positional arguments are no flags)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "add_argument":
            found += [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                      and a.value.startswith("-")]
    return found


def test_no_command_spells_a_flag_itself():
    """Every option of the CLI comes from a declaration (a dataclass field's ``option`` or a keyword ``Flag``):
    name, type, default, help and choices in one place; ``grep`` finds no flag spelt in cli/."""
    for path in sorted((REPO / "mtp_tvm" / "cli").glob("*.py")):
        assert raw_flags(path.read_text()) == [], f"{path.name}: a flag added by hand; declare it (support/flags.py)"


def test_a_flag_spelt_by_hand_is_caught():
    """The scan above fails on a raw flag planted in a command, however it is called."""
    planted = textwrap.dedent("""
        def add_thing_command(sub, common):
            p = sub.add_parser("thing")
            p.add_argument("run", help="a positional argument is no flag")
            group = p.add_mutually_exclusive_group()
            group.add_argument("--foo", type=int, default=3, help="a field's flag spelt again")
            add_argument("-x", "--bar")
    """)
    assert raw_flags(planted) == ["--foo", "-x", "--bar"]
    assert raw_flags((REPO / "mtp_tvm" / "cli" / "dumps.py").read_text() + planted) == ["--foo", "-x", "--bar"]


def test_every_declared_flag_name_is_one_declarations():
    """A flag name several commands share means one thing: ``--tokens`` is ``BuildSpec.tokens`` on every verb
    (a list of one is one T; a sweep where a verb sweeps), --peers/--rounds are ``BenchOptions``' on either bench."""
    assert build_parser().parse_args(["check", "--tokens", "8"]).tokens == 8
    assert build_parser().parse_args(["bench", "--tokens", "8"]).tokens == 8
    assert build_parser().parse_args(["bench", "--tokens", "1,2,4"]).tokens == (1, 2, 4)
    fields = {f.name for cls in (*DECLARED, TuneOptions, WeightSource, BenchOptions) for f in flags(cls).values()}
    assert {"--tokens", "--peers", "--rounds", "--case", "--preset", "--tp", "--owners"} <= fields
    assert not {"--case", "--preset", "--tp", "--owners"} & {f.name for f in flags(WeightSource).values()}


def test_a_renamed_flag_still_works_and_says_so(capsys):
    args = build_parser().parse_args(["bench", "--contenders", "numpy_fp32,torch_bf16"])
    assert args.peers == ("numpy_fp32", "torch_bf16") and "peers" in args.given
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--contenders is deprecated" in err[0] and "use --peers" in err[0]


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
