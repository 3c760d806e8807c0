"""Every name a hand schedule file gives (blocks, buffers) exists in the kernel it schedules, on every target and
ISA entry; a file naming a block the kernel lacks fails the build with one line naming the file, before any rule
runs."""

import dataclasses

import pytest
from tvm import tirx

import mtp_tvm
from mtp_tvm.contract.cases import CASES
from mtp_tvm.contract.presets import make_shapes
from mtp_tvm.ir.model import build_relax_module
from mtp_tvm.passes.target import resolve_target
from mtp_tvm.schedule import files
from mtp_tvm.schedule.files import kernel_of, load_schedules
from mtp_tvm.schedule.knobs import CpuGemm
from mtp_tvm.schedule.names import kernel_names, knob_names, missing_names
from mtp_tvm.support.errors import MtpError


def _kernels() -> dict[str, tirx.PrimFunc]:
    """The TIR frontend's kernels of every case, by schedule file stem."""
    found = {}
    for case in CASES.values():
        mod = build_relax_module(case, make_shapes("tiny", None, None), "tir")
        found.update({kernel_of(gv.name_hint): f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)})
    return found


@pytest.mark.parametrize("target", ["llvm", "cuda"])
def test_every_name_a_schedule_file_gives_is_in_its_kernel(target):
    kernels = _kernels()
    per_kernel = load_schedules(resolve_target(target))
    assert per_kernel
    for kernel, schedules in per_kernel.items():
        assert kernel in kernels, f"{target}/{kernel}.json schedules a kernel no case has"
        for ks in schedules.values():
            for knobs in (ks.knobs, *ks.per_isa.values()):
                assert knob_names(knobs).blocks, ks.source
                assert missing_names(knobs, kernels[kernel]) is None, f"{ks.source}#{ks.name}"


def test_the_names_are_read_from_the_knobs_and_the_kernel():
    ks = load_schedules(resolve_target("llvm"))["lm_head_logits"]["default"]
    assert knob_names(ks.knobs).blocks == {"logits"} and knob_names(ks.knobs).buffers == {"X", "w"}
    have = kernel_names(_kernels()["lm_head_logits"])
    assert "logits" in have.blocks and {"X", "w", "Y"} <= have.buffers


def test_a_schedule_naming_a_missing_block_is_one_line(monkeypatch):
    real = files._load  # the package's files, with one block renamed in the LM head's schedule

    def renamed(target_dir):
        loaded = real(target_dir)
        ks = loaded["lm_head_logits"]["default"]
        knobs = dataclasses.replace(ks.knobs, blocks={"logit": ks.knobs.blocks["logits"]})
        assert isinstance(knobs, CpuGemm)
        schedules = {**loaded["lm_head_logits"], "default": dataclasses.replace(ks, knobs=knobs, per_isa={})}
        return {**loaded, "lm_head_logits": schedules}

    monkeypatch.setattr(files, "_load", renamed)
    with pytest.raises(MtpError, match=r"build of logits for llvm failed in pass schedule/ApplySchedules on TIR kernel "
                       r"lm_head_logits: schedule 'default' "
                       r"\(llvm/lm_head_logits.json, rule cpu_gemm\) on lm_head_logits: no block named 'logit' in the "
                       r"kernel \(its blocks: logits, root\)$"):
        mtp_tvm.compile(case="logits", preset="tiny")
