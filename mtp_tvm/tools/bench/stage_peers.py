"""Each stage in the ops a user would call instead of TVM: ``bench``'s peers, stage by stage, keyed by the
stage's name (``contract.cases.STAGES``). ``tools/bench/peer_worker.py`` chains them along a case and times the chain; a
stage without an entry here is not benched.

``torch(inputs, shapes, dtype)`` and ``numpy(inputs, shapes)`` return ``f(x) -> y``, the weights prepared once,
outside the timing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

# The torch peers import torch here, not through the spec's lazy module: torch.compile traces them (bench's
# compiled chain calls them inside ``forward``) and cannot trace the lazy module's first import.
import torch
import torch.nn.functional as F

from ...contract.presets import INT8_AMAX_EPS, INT8_SCALE_MAX, Shapes


@dataclasses.dataclass(frozen=True)
class StagePeers:
    """One stage's bench peers: its torch and its numpy implementation (see the module docstring)."""

    torch: Callable[[dict, Shapes, torch.dtype], Callable]
    numpy: Callable[[dict, Shapes], Callable]


def _np_rms_norm(x, w, eps: float):  # numpy has no RMSNorm: the formula, in FP32
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _torch_projection(t: dict, s: Shapes, dtype: torch.dtype) -> Callable:
    w = {k: v.to(dtype) for k, v in t.items()}

    def projection(_x):  # W8A8 with the INT8 GEMMs as dtype GEMMs of the (exactly representable) integers
        out = 0
        for tag, act in (("e", "hidden_states"), ("h", "prev_hidden_states")):
            y = F.rms_norm(w[act], (w[act].shape[-1],), w[f"{tag}norm_w"], s.eps) * w[f"{tag}_proj_smooth"]
            scale = INT8_SCALE_MAX / y.abs().amax(-1, keepdim=True).clamp_min(INT8_AMAX_EPS)
            q = torch.round(y * scale)
            out = out + F.linear(q, w[f"{tag}_proj_w"]) / scale * w[f"{tag}_proj_w_scale"]
        return out

    return projection


def _numpy_projection(t: dict, s: Shapes) -> Callable:
    w = {k: v.float().numpy() for k, v in t.items()}

    def projection(_x):
        out = 0
        for tag, act in (("e", "hidden_states"), ("h", "prev_hidden_states")):
            y = _np_rms_norm(w[act], w[f"{tag}norm_w"], s.eps) * w[f"{tag}_proj_smooth"]
            scale = INT8_SCALE_MAX / np.maximum(np.abs(y).max(-1, keepdims=True), INT8_AMAX_EPS)
            out = out + (np.rint(y * scale) @ w[f"{tag}_proj_w"].T) / scale * w[f"{tag}_proj_w_scale"]
        return out

    return projection


def _torch_norm(t: dict, s: Shapes, dtype: torch.dtype) -> Callable:
    w = t["shared_head_norm_w"].to(dtype)
    return lambda x: F.rms_norm(x, (x.shape[-1],), w, s.eps)


def _numpy_norm(t: dict, s: Shapes) -> Callable:
    w = t["shared_head_norm_w"].numpy()
    return lambda x: _np_rms_norm(x, w, s.eps)


def _torch_logits(t: dict, _s: Shapes, dtype: torch.dtype) -> Callable:
    w = t["lm_head_weight"].to(dtype)
    return lambda x: F.linear(x, w)


def _numpy_logits(t: dict, _s: Shapes) -> Callable:
    w = t["lm_head_weight"].float().numpy()
    return lambda x: x @ w.T


STAGE_PEERS: dict[str, StagePeers] = {
    "projection": StagePeers(_torch_projection, _numpy_projection),
    "norm": StagePeers(_torch_norm, _numpy_norm),
    "logits": StagePeers(_torch_logits, _numpy_logits),
}

