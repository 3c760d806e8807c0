"""The gate's decisions pass by pass: disabled names, LLVM-style limits, optional units decided as a whole."""

import pytest

import mtp_tvm
from mtp_tvm.passes.gate import SKIP_DISABLED, SKIP_LIMIT, PassGate, describe_gate
from mtp_tvm.passes.target import resolve_target

# (phase, name) in the order a build runs them; numbers are 1-based positions.
PIPELINE = [("legalize", "LegalizeOps"), ("legalize", "FoldConstant"), ("fuse", "FuseOps"),
            ("fuse", "FuseTIR"), ("fuse", "ExpandTupleArguments"), ("schedule", "dl.Rule"),
            ("schedule", "dl.Other"), ("tir-lower", "tirx.UnrollLoop"), ("tir-lower", "tirx.MakePackedAPI")]


def _run(gate):
    return [gate.decide(i, phase, name) for i, (phase, name) in enumerate(PIPELINE, 1)]


def test_without_options_every_pass_runs_and_optional_units_are_known():
    decisions = _run(PassGate.for_target(resolve_target("llvm")))
    assert all(reason is None for reason, _ in decisions)
    units = [unit for _, unit in decisions]
    # FoldConstant alone; FuseTIR follows FuseOps; the schedule phase is one unit on LLVM; UnrollLoop alone
    assert units == [None, 2, 3, 3, None, 6, 6, 8, None]


def test_the_schedule_phase_is_required_on_cuda():
    units = [unit for _, unit in _run(PassGate.for_target(resolve_target("cuda")))]
    assert units[5] is None and units[6] is None


def test_limit_skips_optional_units_opened_after_it_and_keeps_required_passes():
    reasons = [reason for reason, _ in _run(PassGate.for_target(resolve_target("llvm"), limit=3))]
    # FuseOps (3) is within the limit, so FuseTIR (4) runs with it; the schedule phase and UnrollLoop do not
    assert reasons == [None, None, None, None, None, SKIP_LIMIT, SKIP_LIMIT, SKIP_LIMIT, None]
    reasons = [reason for reason, _ in _run(PassGate.for_target(resolve_target("llvm"), limit=2))]
    assert reasons[2] == reasons[3] == SKIP_LIMIT  # a group goes as a whole
    assert [r for r, _ in _run(PassGate.for_target(resolve_target("llvm"), limit=0))].count(None) == 3


def test_disabled_names_skip_required_passes_too_and_extra_passes_are_their_own_units():
    gate = PassGate.for_target(resolve_target("llvm"), disabled=["tirx.MakePackedAPI"], extra_names=["dl.Rule"])
    decisions = _run(gate)
    assert decisions[8] == (SKIP_DISABLED, None)
    assert decisions[5][1] == 6 and decisions[6][1] == 7  # the extra pass is a unit; the phase's own passes another


def test_a_build_says_which_optional_pass_was_applied_last():
    m = mtp_tvm.compile(case="logits", preset="tiny", frontend="relax", bisect_limit=10,
                        disable_passes=["FoldConstant"])
    gate = m.gate
    assert gate["limit"] == 10 and gate["disabled"] == ["FoldConstant"]
    assert gate["last_applied"]["name"] == "FuseOps" and gate["last_applied"]["index"] <= 10
    skipped = {s["name"]: s["reason"] for s in gate["skipped"]}
    assert skipped["FoldConstant"] == SKIP_DISABLED and skipped["s_tir.HoistIfThenElse"] == SKIP_LIMIT
    line = describe_gate(gate)
    assert "last optional pass applied" in line and "FuseOps" in line and "FoldConstant" in line


@pytest.mark.parametrize("name, idle", [("FoldConstant", True), ("FuseOps", False)])
def test_a_disabled_pass_that_would_have_changed_nothing_is_said(name, idle):
    """The norm case (Relax frontend) has no constant to fold: disabling FoldConstant made no difference."""
    lines = []
    result = mtp_tvm.check(case="norm", preset="tiny", frontend="relax", disable_passes=(name,), log=lines.append)
    warned = [line for line in lines if f"--disable-pass {name}" in line]
    assert result.passed and warned == ([f"[passes] warning: --disable-pass {name}: the pass changes nothing in any "
                                         "function where it was skipped (1 place): disabling it made no difference"]
                                        if idle else [])
