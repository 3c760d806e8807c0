"""spec/convert_weights.py: FP8 blocks dequantised, smoothing, INT8 per output channel with the spec's rounding,
the error within the bound the FP8 and INT8 grids give, every weight input of a case named as the case names it."""

from __future__ import annotations

import math

import pytest
import torch
from checkpoint_files import checkpoint_tensors, fp8_blocks, write_checkpoint

from mtp_tvm.contract import golden
from mtp_tvm.contract.cases import get_case
from mtp_tvm.contract.checkpoint import LAYOUTS, Checkpoint, LayoutName
from mtp_tvm.contract.convert_weights import (
    BOUND_SLACK,
    Smoothing,
    convert_case,
    dequantize_fp8,
    quantize_smoothed,
    smoothquant,
    weight_names,
)
from mtp_tvm.contract.presets import make_shapes
from mtp_tvm.support.errors import UsageError

TINY_TP8 = make_shapes("tiny", vocab_shard=512, tp=8)


@pytest.mark.parametrize("scale_dtype", ["F32", "F8_E8M0"])
def test_fp8_blocks_dequantise_to_the_float64_product(scale_dtype):
    """E8M0 scales are powers of two: exact in FP32; FP32 scales round each product once (2^-24 relative)."""
    w = torch.randn(300, 200, generator=torch.Generator().manual_seed(1))
    q, scale = fp8_blocks(w, scale_dtype)
    exact = q.double() * scale.double().repeat_interleave(128, 0)[:300].repeat_interleave(128, 1)[:, :200]
    rel = ((dequantize_fp8(q, scale).double() - exact).abs() / exact.abs().clamp_min(1e-300)).max()
    assert rel == 0 if scale_dtype == "F8_E8M0" else rel <= 2.0 ** -24


def test_int8_error_stays_within_half_a_step_of_each_row_and_the_spec_rounding_is_kept():
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(2)) * torch.logspace(-3, 1, 64)[:, None]
    wq, w_scale, err = quantize_smoothed(w, torch.ones(256), "m")
    ref_q, ref_scale = golden.quantize_weight_per_out(w)
    assert torch.equal(wq, ref_q) and torch.equal(w_scale, ref_scale)  # the spec's quantiser, bit for bit
    assert err.max_rel_bound == pytest.approx(1 / 254 * BOUND_SLACK, rel=1e-6)  # ones: 1/254 of the row's max
    assert 0.5 / 254 < err.max_rel <= err.max_rel_bound and err.rms_rel <= err.rms_rel_bound


def test_smoothquant_moves_activation_outliers_into_the_weights_and_keeps_the_bound():
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(128, 256, generator=gen) / 16
    act = torch.rand(256, generator=gen) + 0.1
    act[7] = 50.0  # one outlier channel
    s = smoothquant(act, w, 0.5)
    assert s[7] == s.max() and torch.allclose(s, (act.sqrt() / w.abs().amax(0).sqrt()))
    s0 = smoothquant(torch.where(torch.arange(256) == 3, 0.0, act), w, 0.5)
    assert s0[3] == 1.0  # a channel without activations is left alone
    _, _, err = quantize_smoothed(w, s, "m")
    assert err.max_rel <= err.max_rel_bound and err.rms_rel <= err.rms_rel_bound
    with pytest.raises(UsageError, match="alpha must be a number in"):
        Smoothing(alpha=1.5)


def test_calibration_rows_of_another_width_are_refused(tmp_path):
    ckpt = Checkpoint(write_checkpoint(tmp_path, LayoutName.V4_FLASH))
    acts = {"hidden_states": torch.randn(4, 128), "prev_hidden_states": torch.randn(4, 256)}
    with pytest.raises(UsageError, match=r"calibration 'hidden_states' has shape \[4, 128\]: SmoothQuant needs "
                                         r"finite \[N, 256\] rows"):
        convert_case(ckpt, LAYOUTS[LayoutName.V4_FLASH], get_case("projection"), TINY_TP8, 0, Smoothing(acts))


@pytest.mark.parametrize("layout", list(LayoutName))
def test_a_case_gets_every_weight_named_as_listed_within_the_grids_bound(tmp_path, layout):
    tensors = checkpoint_tensors(layout)
    ckpt = Checkpoint(write_checkpoint(tmp_path, layout, tensors=tensors))
    lay = LAYOUTS[layout]
    case = get_case("tail-norm")
    got = convert_case(ckpt, lay, case, TINY_TP8, rank=3)
    specs = case.input_specs(TINY_TP8)
    assert list(got.weights) == weight_names(case, TINY_TP8)
    for name, t in got.weights.items():
        assert tuple(t.shape) == specs[name].shape and str(t.dtype).removeprefix("torch.") == specs[name].dtype
    assert torch.equal(got.weights["lm_head_weight"], tensors[lay.head][3 * 512:4 * 512])  # BF16 unchanged
    assert torch.equal(got.weights["shared_head_norm_w"], tensors[lay.norm].float())
    assert torch.equal(got.weights["e_proj_smooth"], torch.ones(256))
    head_bytes = 4096 * 256 * 2
    assert ckpt.bytes_read < head_bytes / 4  # only the rank's eighth of the head, and the small tensors
    for e in got.errors:  # ones: each row within half an INT8 step, 1/254 of its max
        assert e.within_bound and e.max_rel_bound < 1 / 254 * (1 + 1e-4), e
        assert 0.003 < e.rms_rel < 0.01  # uniform rounding of N(0,1) rows: ~ (amax/127)/sqrt(12) / sigma
    w_e = got.reference["e_proj_w"]
    lin = lay.e_proj
    assert w_e.shape == (256, 256) and torch.equal(
        w_e, dequantize_fp8(tensors[lin.weight][:, :256] if lin.half == 0 else tensors[lin.weight],
                            tensors[lin.scale][:, :2] if lin.half == 0 else tensors[lin.scale]))


def test_the_lm_head_stage_gets_every_tp_shard_stacked_as_the_spec_places_them(tmp_path):
    tensors = checkpoint_tensors(LayoutName.V4_FLASH)
    ckpt = Checkpoint(write_checkpoint(tmp_path, LayoutName.V4_FLASH, tensors=tensors))
    s = make_shapes("tiny", vocab_shard=1024, tp=4, owners=8)
    got = convert_case(ckpt, LAYOUTS[LayoutName.V4_FLASH], get_case("lm-head"), s).weights
    head = tensors["head.weight"]
    assert got["lm_head_weight"].shape == (8, 1024, 256)
    assert all(torch.equal(got["lm_head_weight"][r], head[(r % 4) * 1024:(r % 4 + 1) * 1024]) for r in range(8))
    assert got["logit_row_indices"].shape == (8, 8)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.pop("mtp.0.hnorm.weight"), "no tensor 'mtp.0.hnorm.weight'"),
    (lambda t: t.update({"mtp.0.enorm.weight": t["mtp.0.enorm.weight"].float()}),
     "'mtp.0.enorm.weight' has dtype F32, expected BF16 for preset 'tiny'"),
    (lambda t: t.update({"mtp.0.e_proj.weight": t["mtp.0.e_proj.weight"][:, :128].contiguous()}),
     r"'mtp.0.e_proj.weight' has shape \[256, 128\], expected \[256, 256\]"),
    (lambda t: t["mtp.0.h_proj.scale"].view(torch.uint8).__setitem__((1, 0), 255),
     r"'mtp.0.h_proj.scale' has 1 NaN/Inf or non-positive scales, the first at block \(1, 0\): nan"),
    (lambda t: t["head.weight"].__setitem__((1600, 5), float("inf")), "'head.weight' has 1 NaN/Inf values"),
])
def test_a_bad_tensor_is_one_line_naming_its_file_and_name(tmp_path, edit, message):
    tensors = checkpoint_tensors(LayoutName.V4_FLASH)
    edit(tensors)
    ckpt = Checkpoint(write_checkpoint(tmp_path, LayoutName.V4_FLASH, tensors=tensors))
    with pytest.raises(UsageError, match=message) as err:
        convert_case(ckpt, LAYOUTS[LayoutName.V4_FLASH], get_case("tail-norm"), TINY_TP8, rank=3)
    assert str(tmp_path) in str(err.value) and "\n" not in str(err.value)


def test_zero_v3_scales_and_a_rank_outside_tp_are_refused(tmp_path):
    tensors = checkpoint_tensors(LayoutName.V3)
    tensors["model.layers.61.eh_proj.weight_scale_inv"][0, 3] = 0.0
    ckpt = Checkpoint(write_checkpoint(tmp_path, LayoutName.V3, tensors=tensors))
    with pytest.raises(UsageError, match=r"weight_scale_inv' has 1 NaN/Inf or non-positive scales, the first at "
                                         r"block \(0, 1\): 0.0"):  # the h half's columns start at block 2
        convert_case(ckpt, LAYOUTS[LayoutName.V3], get_case("projection"), TINY_TP8)
    with pytest.raises(UsageError, match=r"--rank must be an integer in \[0, 8\) for --tp 8, got 8"):
        convert_case(ckpt, LAYOUTS[LayoutName.V3], get_case("logits"), TINY_TP8, rank=8)
    assert math.isclose(BOUND_SLACK, 1 + 2 ** -15)
