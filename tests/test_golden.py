"""The goldens follow the spec's steps; these pin the steps whose detail matters."""

import pytest
import torch

from mtp_tvm.contract import golden
from mtp_tvm.contract.presets import INT8_AMAX_EPS


def test_quantize_rows_rounds_half_to_even_and_floors_amax():
    z = torch.tensor([[127.0, 0.5 * 127 / 127, 1.5, 2.5, -2.5]], dtype=torch.float32)
    q, scale = golden.quantize_rows(z)
    # amax = 127, scale_q = 1: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -2.5 -> -2 (half to even)
    assert q.tolist() == [[127, 0, 2, 2, -2]] and q.dtype == torch.int8
    assert torch.equal(scale, torch.tensor([[1.0]]))
    q0, s0 = golden.quantize_rows(torch.zeros(1, 4))
    assert torch.equal(q0, torch.zeros(1, 4, dtype=torch.int8))
    assert s0.item() == pytest.approx(INT8_AMAX_EPS / 127.0, rel=1e-6)


def test_weight_quantisation_is_per_output_row():
    w = torch.tensor([[0.5, -1.0], [0.25, 0.125]], dtype=torch.bfloat16)
    q, scale = golden.quantize_weight_per_out(w)
    assert q.tolist() == [[64, -127], [127, 64]]
    assert torch.allclose(scale, torch.tensor([1.0 / 127, 0.25 / 127]))


def test_rms_norm_accumulates_in_128_chunks():
    x = torch.randn(3, 512)
    got = golden.rms_norm(x, torch.ones(512), 1e-6)
    sq = sum((x[:, k:k + 128] ** 2).sum(-1, keepdim=True) for k in range(0, 512, 128))
    assert torch.equal(got, x * torch.rsqrt(sq / 512 + 1e-6))


def test_local_logits_is_one_fp32_matmul():
    x, w = torch.randn(5, 256).to(torch.bfloat16), torch.randn(7, 256).to(torch.bfloat16)
    assert torch.equal(golden.local_logits(x, w), x.float() @ w.float().T)


def test_the_w8a8_golden_gemm_is_exact_where_torch_has_no_integer_gemm():
    """On a GPU the INT8 GEMM runs in FP64 (CUDA torch has no integer addmm): exact, even at the extremes."""
    import torch

    from mtp_tvm.contract.golden import _exact_int_matmul

    a = torch.full((3, 4096), -128, dtype=torch.int8)
    b = torch.full((4096, 5), -128, dtype=torch.int8)
    exact = _exact_int_matmul(a, b)
    assert exact.dtype == torch.int32 and int(exact[0, 0]) == 128 * 128 * 4096
    assert torch.equal((a.double() @ b.double()).to(torch.int32), exact)
