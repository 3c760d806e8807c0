"""A DeepSeek checkpoint's MTP weights as the spec's inputs (spec §1.1, §1.7, §2): FP8 e4m3 blocks dequantised
with their FP32 or E8M0 scales, a smoothing per input channel (ones, or SmoothQuant from calibration
activations), INT8 per output channel with the spec's own quantiser (``golden.quantize_weight_per_out``), the
BF16 weights passed through (norm gains widened to the FP32 the spec takes, exactly).

The error of the INT8 weights is measured against the dequantised FP8 weights, with its bound from the grids:
the quantiser rounds ``V = W / s`` (``s`` the smoothing) to the nearest step ``vs[n] = amax_n(V) / 127`` of its
row, so ``|W'[n, k] - W[n, k]| <= vs[n] * s[k] / 2`` (``W' = Vq * vs * s``, what the projection applies), up to
the FP32 roundings of ``V * sq`` and ``vs = 1 / sq`` (``BOUND_SLACK``). With ones that is at most ``1/254`` of the
row's largest weight; FP8 e4m3 spaces its values ``2^-3`` apart relative to their size, so INT8 adds less than
the checkpoint's own rounding to every weight above 1/16 of its row's largest. A power-of-two (E8M0) scale makes
the dequantised weights exact in FP32; an FP32 scale rounds each once (2^-24 relative).
"""

from __future__ import annotations

import dataclasses
import math

from ..contract import golden
from ..support.errors import UsageError
from ..support.lazy import lazy_module
from .cases import Case, leading_activations
from .checkpoint import FP8_BLOCK, Checkpoint, FP8Linear, Layout
from .presets import Shapes

torch = lazy_module("torch")

BOUND_SLACK = 1 + 2.0 ** -15  # |q - V*sq| <= 0.5 + 127u and vs = fl(1/sq): (0.5 + 255u) / 0.5 < 1 + 2^-15
SMOOTH_FLOOR = 1e-5  # SmoothQuant's clamp of both statistics (a zero column gets no information: smoothing 1)
CALIBRATION_INPUTS = ("hidden_states", "prev_hidden_states")  # e_proj's and h_proj's activations, before the norms
SEED_FREE = {"logit_row_indices"}  # inputs the case makes without drawing: not weights a checkpoint holds


@dataclasses.dataclass(frozen=True)
class MatrixError:
    """The INT8 weights of one projection against the dequantised FP8 ones: ``max_rel`` the largest error over
    its row's largest |weight|, ``rms_rel`` the Frobenius norm of the error over the weights', each with the
    bound the INT8 grid gives (the module docstring)."""

    name: str
    max_rel: float
    rms_rel: float
    max_rel_bound: float
    rms_rel_bound: float

    @property
    def within_bound(self) -> bool:
        return self.max_rel <= self.max_rel_bound and self.rms_rel <= self.rms_rel_bound


def dequantize_fp8(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """FP8 ``[N, K]`` times its ``[ceil(N/128), ceil(K/128)]`` block scales, in FP32."""
    n, k = w.shape
    s = scale.float().repeat_interleave(FP8_BLOCK, 0)[:n].repeat_interleave(FP8_BLOCK, 1)[:, :k]
    return w.float() * s


def smoothquant(act_amax: torch.Tensor, w: torch.Tensor, alpha: float) -> torch.Tensor:
    """SmoothQuant's per-input-channel factor ``amax(x)^alpha / amax(W)^(1-alpha)`` (FP32 [K]); 1 where either
    column is all zero."""
    w_amax = w.abs().amax(dim=0)
    s = act_amax.clamp_min(SMOOTH_FLOOR) ** alpha / w_amax.clamp_min(SMOOTH_FLOOR) ** (1 - alpha)
    return torch.where((act_amax > 0) & (w_amax > 0), s, torch.ones_like(s)).float()


def quantize_smoothed(w: torch.Tensor, smooth: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor,
                                                                                  MatrixError]:
    """``(Wq int8, w_scale FP32 [N], error)`` of ``W / smooth`` by the spec's per-output-channel quantiser."""
    wq, w_scale = golden.quantize_weight_per_out(w / smooth[None, :])
    return wq, w_scale, matrix_error(name, w, wq, w_scale, smooth)


ERROR_ROWS = 256  # rows measured at a time in FP64: temporaries of a few MB, not several copies of the matrix


def matrix_error(name: str, w: torch.Tensor, wq: torch.Tensor, w_scale: torch.Tensor,
                 smooth: torch.Tensor) -> MatrixError:
    """The INT8 weights as the projection applies them (``Wq * w_scale * smooth``) against ``w``, in FP64, with
    the bound half an INT8 step per weight gives (the module docstring)."""
    tiny, s = torch.finfo(torch.float32).tiny, smooth.double()[None, :]
    max_rel = max_bound = err_sq = step_sq = w_sq = 0.0
    for a in range(0, w.shape[0], ERROR_ROWS):
        rows = slice(a, a + ERROR_ROWS)
        wb, scale = w[rows].double(), w_scale[rows].double()[:, None]
        err = (wq[rows].double() * scale * s - wb).abs()
        step = scale * s / 2  # half the INT8 step, in W's units
        row_amax = wb.abs().amax(dim=1, keepdim=True).clamp_min(tiny)
        max_rel = max(max_rel, float((err / row_amax).max()))
        max_bound = max(max_bound, float((step.amax(dim=1, keepdim=True) / row_amax).max()))
        err_sq += float(err.square().sum())
        step_sq += float(step.square().sum())
        w_sq += float(wb.square().sum())
    w_norm = max(math.sqrt(w_sq), tiny)
    return MatrixError(name, max_rel, math.sqrt(err_sq) / w_norm, max_bound * BOUND_SLACK,
                       math.sqrt(step_sq) / w_norm * BOUND_SLACK)


@dataclasses.dataclass(frozen=True)
class Smoothing:
    """``activations``: calibration inputs by name (``CALIBRATION_INPUTS``, ``[N, D]``) for SmoothQuant with
    ``alpha``; None: ones."""

    activations: dict | None = None
    alpha: float = 0.5

    def __post_init__(self):
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0 <= self.alpha <= 1:
            raise UsageError(f"alpha must be a number in [0, 1], got {self.alpha!r}")

    @property
    def name(self) -> str:
        return "ones" if self.activations is None else f"smoothquant(alpha={self.alpha})"


@dataclasses.dataclass(frozen=True)
class ConvertedWeights:
    """Every weight input of a case, named as ``mtp-tvm list`` names them (torch, CPU), the error of each INT8
    matrix, and what the projection's reference applies: the dequantised FP8 weights and the norm gains."""

    weights: dict
    errors: tuple[MatrixError, ...]
    reference: dict


class _Reader:
    """Reads, checks and converts the tensors of one checkpoint for one case's sizes."""

    def __init__(self, ckpt: Checkpoint, layout: Layout, shapes: Shapes, rank: int, smoothing: Smoothing):
        self.ckpt, self.layout, self.s, self.rank, self.smoothing = ckpt, layout, shapes, rank, smoothing
        self.why = f" for preset {shapes.preset.name!r} (layout {layout.name})"
        self.errors: list[MatrixError] = []
        self.reference: dict = {}
        self._gains: dict = {}

    def gain(self, name: str) -> torch.Tensor:
        """A BF16 [D] norm gain as the spec's FP32 (exact), read once."""
        if name not in self._gains:
            self.ckpt.expect(name, "BF16", (self.s.hidden,), self.why)
            self._gains[name] = self._finite(name, self.ckpt.read(name)).float()
        return self._gains[name]

    def _finite(self, name: str, t: torch.Tensor) -> torch.Tensor:
        bad = ~torch.isfinite(t.float())
        if bool(bad.any()):
            raise UsageError(f"{self.ckpt.info(name).where()} has {int(bad.sum())} NaN/Inf values")
        return t

    def fp8(self, linear: FP8Linear) -> torch.Tensor:
        """The dequantised FP32 ``[D, D]`` weight (a half of a side-by-side one), its scales checked."""
        d, parts = self.s.hidden, 1 if linear.half is None else 2
        self.ckpt.expect(linear.weight, "F8_E4M3", (d, parts * d), self.why)
        blocks = (math.ceil(d / FP8_BLOCK), math.ceil(parts * d / FP8_BLOCK))
        self.ckpt.expect(linear.scale, linear.scale_dtype, blocks, self.why)
        cols = None if linear.half is None else (linear.half * d, (linear.half + 1) * d)
        scale_cols = None if cols is None else (cols[0] // FP8_BLOCK, cols[1] // FP8_BLOCK)
        scale = self.ckpt.read(linear.scale, scale_cols).float()
        bad = ~(torch.isfinite(scale) & (scale > 0))
        if bool(bad.any()):
            where = tuple(int(i) for i in bad.nonzero()[0])
            raise UsageError(f"{self.ckpt.info(linear.scale).where()} has {int(bad.sum())} NaN/Inf or non-positive "
                             f"scales, the first at block {where}: {float(scale[where])}")
        w = self.ckpt.read(linear.weight, cols)
        return self._finite(linear.weight, dequantize_fp8(w, scale))

    def projection(self, prefix: str, linear: FP8Linear, norm: str, stream: str) -> dict:
        """``<prefix>_w``, ``_w_scale``, ``_smooth`` of one projection (its norm gain read for SmoothQuant)."""
        w = self.fp8(linear)
        self.reference[f"{prefix}_w"] = w
        acts = self.smoothing.activations
        if acts is None:
            smooth = torch.ones(self.s.hidden, dtype=torch.float32)
        else:
            x = torch.as_tensor(acts[stream])
            if x.ndim != 2 or x.shape[1] != self.s.hidden or not x.shape[0] or not bool(torch.isfinite(x).all()):
                raise UsageError(f"calibration {stream!r} has shape {list(x.shape)}: SmoothQuant needs finite "
                                 f"[N, {self.s.hidden}] rows (N >= 1) for preset {self.s.preset.name!r}")
            x = golden.rms_norm(x, self.gain(norm), self.s.eps)
            smooth = smoothquant(x.abs().amax(dim=0), w, self.smoothing.alpha)
        wq, w_scale, error = quantize_smoothed(w, smooth, prefix)
        self.errors.append(error)
        return {f"{prefix}_w": wq, f"{prefix}_w_scale": w_scale, f"{prefix}_smooth": smooth}

    def head_rows(self, shard: int) -> torch.Tensor:
        """TP shard ``shard``'s rows of the LM head, BF16 as stored; the other rows never read."""
        s, head = self.s, self.layout.head
        self.ckpt.expect(head, "BF16", (s.preset.vocab, s.hidden), self.why)
        return self._finite(head, self.ckpt.read_rows(head, shard * s.vocab_shard, (shard + 1) * s.vocab_shard))

    def weight(self, name: str, stage: str) -> dict:
        lay = self.layout
        if name in ("enorm_w", "hnorm_w"):
            self.reference[name] = self.gain(lay.enorm if name == "enorm_w" else lay.hnorm)
            return {name: self.reference[name]}
        if name in ("e_proj_w", "h_proj_w"):
            e = name == "e_proj_w"
            return self.projection(name[:6], lay.e_proj if e else lay.h_proj, lay.enorm if e else lay.hnorm,
                                   CALIBRATION_INPUTS[0 if e else 1])
        if name == "shared_head_norm_w":
            return {name: self.gain(lay.norm)}
        if name == "lm_head_weight" and stage == "logits":
            return {name: self.head_rows(self.rank)}
        if name == "lm_head_weight":  # the full-vocabulary head: rank r holds shard r % TP (spec §3.1)
            shards = [self.head_rows(r) for r in range(self.s.tp)]
            return {name: torch.stack([shards[r % self.s.tp] for r in range(self.s.ranks)])}
        return {}


def weight_names(case: Case, shapes: Shapes) -> list[str]:
    """The case's weight inputs (after its activations), in spec order."""
    specs = case.input_specs(shapes)
    return list(specs)[leading_activations(specs):]


def check_rank(rank: int, tp: int) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < tp:
        raise UsageError(f"--rank must be an integer in [0, {tp}) for --tp {tp}, got {rank!r}")
    return rank


def convert_case(ckpt: Checkpoint, layout: Layout, case: Case, shapes: Shapes, rank: int = 0,
                 smoothing: Smoothing = Smoothing()) -> ConvertedWeights:
    """Every weight input of ``case`` at ``shapes`` from ``ckpt``: only the tensors the case needs are read, and
    of the LM head only TP rank ``rank``'s rows (``shapes.vocab_shard`` of them; every shard for the LM-head
    stage, which takes the whole vocabulary)."""
    check_rank(rank, shapes.tp)
    if shapes.tp * shapes.vocab_shard != shapes.preset.vocab and "lm_head_weight" in weight_names(case, shapes):
        raise UsageError(f"the checkpoint's LM head of {shapes.preset.vocab} rows splits into {shapes.tp} TP shards "
                         f"of {shapes.preset.vocab // shapes.tp}, not {shapes.vocab_shard}")
    reader = _Reader(ckpt, layout, shapes, rank, smoothing)
    out: dict = {}
    params = {p.name: (p, st.name) for st in case.chain for p in st.params}
    for name in weight_names(case, shapes):
        if name in out:
            continue
        if name in SEED_FREE:
            out[name] = params[name][0].draw(None, shapes)
            continue
        found = reader.weight(name, params[name][1])
        if name not in found:
            raise UsageError(f"case {case.name!r} takes weight {name!r}, which no checkpoint layout holds")
        out.update(found)
    return ConvertedWeights({n: out[n] for n in weight_names(case, shapes)}, tuple(reader.errors),
                            reader.reference)


def reference_projection(reference: dict, activations: dict, eps: float) -> torch.Tensor:
    """The projection as the checkpoint computes it, without W8A8: the normed activations (FP32) against the
    dequantised FP8 weights in FP32, summed, BF16 out (the rounding the spec's output has)."""
    e = golden.rms_norm(activations["hidden_states"], reference["enorm_w"], eps) @ reference["e_proj_w"].T
    h = golden.rms_norm(activations["prev_hidden_states"], reference["hnorm_w"], eps) @ reference["h_proj_w"].T
    return (e + h).to(torch.bfloat16)
