"""Torch golden references, step for step as the reference project computes them (spec §1.7, §2.1, §2.2).

torch is the reference only: nothing here runs through TVM. Every function takes token-major ``[T, D]``
tensors (row t = b*S + s), which is the reference's ``[B, S, D]`` flattened.
"""

from __future__ import annotations

from ..contract.presets import INT8_AMAX_EPS, INT8_SCALE_MAX, K_CHUNK
from ..support.errors import UsageError
from ..support.lazy import lazy_module

torch = lazy_module("torch")  # imported by the first golden, not by reading the case table


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """FP32 RMSNorm whose sum of squares is accumulated per 128-wide chunk, in chunk order (spec §1.7 step 1)."""
    xf = x.float()
    d = xf.shape[-1]
    sq = torch.zeros(xf.shape[0], 1, dtype=torch.float32, device=xf.device)
    for k0 in range(0, d, K_CHUNK):
        chunk = xf[:, k0:k0 + K_CHUNK]
        sq = sq + (chunk * chunk).sum(dim=-1, keepdim=True)
    inv = torch.rsqrt(sq * (1.0 / d) + eps)
    return xf * inv * w.float()


def quantize_rows(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token symmetric INT8 quantisation; returns (q int8, dequant scale [T,1] FP32) (spec §1.7 step 3)."""
    amax = z.abs().amax(dim=-1, keepdim=True).clamp_min(INT8_AMAX_EPS)
    scale_q = INT8_SCALE_MAX / amax
    q = torch.round(z * scale_q).to(torch.int32).to(torch.float16).to(torch.int8)
    return q, 1.0 / scale_q


def quantize_weight_per_out(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel INT8 weight quantisation; returns (Wq int8 [N,K], dequant scale [N] FP32)."""
    wf = w.float()
    amax = wf.abs().amax(dim=-1).clamp_min(INT8_AMAX_EPS)
    scale_q = INT8_SCALE_MAX / amax
    q = torch.round(wf * scale_q[:, None]).to(torch.int32).to(torch.float16).to(torch.int8)
    return q, 1.0 / scale_q



def _exact_int_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` of integer tensors, exact, as INT32: torch's integer GEMM on the CPU; on a GPU (no integer GEMM
    in torch) in FP64, exact while every sum stays below 2**53 (INT8 products over K < 2**39)."""
    if a.device.type == "cpu":
        return a.to(torch.int32) @ b.to(torch.int32)
    return (a.double() @ b.double()).to(torch.int32)

def _w8a8_linear(q: torch.Tensor, scale: torch.Tensor, wq: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    acc = _exact_int_matmul(q, wq.T).float()
    return acc * scale * w_scale.view(1, -1)


def mtp_projection(t: dict[str, torch.Tensor], eps: float) -> torch.Tensor:
    """``e_proj(enorm(hidden)) + h_proj(hnorm(prev))`` in W8A8, BF16 out (spec §1.7)."""
    h = (rms_norm(t["hidden_states"], t["enorm_w"], eps) * t["e_proj_smooth"]).to(torch.bfloat16)
    p = (rms_norm(t["prev_hidden_states"], t["hnorm_w"], eps) * t["h_proj_smooth"]).to(torch.bfloat16)
    q_h, s_h = quantize_rows(h.float())
    q_p, s_p = quantize_rows(p.float())
    e = _w8a8_linear(q_h, s_h, t["e_proj_w"], t["e_proj_w_scale"])
    hh = _w8a8_linear(q_p, s_p, t["h_proj_w"], t["h_proj_w_scale"])
    return (e + hh).to(torch.bfloat16)


def shared_head_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Shared-head RMSNorm: chunked FP32 norm, then BF16 round-to-nearest-even (spec §2.2)."""
    return rms_norm(x, w, eps).to(x.dtype)


def local_logits(x: torch.Tensor, lm_head_weight: torch.Tensor) -> torch.Tensor:
    """FP32 logits of BF16 hidden rows against one vocab shard: one FP32 matmul (spec §2.1)."""
    return x.float() @ lm_head_weight.float().T


def compute_lm_head_logits(hidden: torch.Tensor, stacked_weight: torch.Tensor, row_indices: torch.Tensor,
                           tp: int) -> torch.Tensor:
    """The TP-sharded LM head's reference logits (spec §3.2): ``[owners, max_rows, tp * shard]`` FP32.

    The owner count and row counts come from the tensors at run time, not from constants. Exactly one copy of
    each TP shard is used: the first ``tp`` ranks of ``stacked_weight`` hold shards ``0..tp-1`` in order. A
    row index of ``-1`` selects a zero row (its logits are exactly 0); other indices are clamped into range.
    """
    h = torch.as_tensor(hidden).float()
    owners, rows, d = h.shape
    if stacked_weight.shape[0] < tp:
        raise UsageError(f"stacked weight holds {stacked_weight.shape[0]} ranks, fewer than tp={tp}")
    weight = stacked_weight[:tp].float().reshape(-1, d)
    idx = torch.as_tensor(row_indices, device=h.device).long()
    selected = h[torch.arange(owners, device=h.device)[:, None], idx.clamp(0, rows - 1)]  # [owners, max_rows, d]
    selected = torch.where((idx >= 0)[..., None], selected, selected.new_zeros(()))
    return selected @ weight.T


def sample_argmax(logits: torch.Tensor) -> torch.Tensor:
    """Greedy sampling: the first column holding each row's maximum, as int32."""
    return logits.argmax(dim=-1).to(torch.int32)
