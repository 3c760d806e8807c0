"""Comparators with the reference project's semantics (spec §4.1, §2.3). No TVM in here.

Each comparator returns a ``Comparison``: pass/fail, the figures a failure report needs (mismatches out of
numel, greatest absolute and relative difference with their index) and a torch.testing-style message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from .tolerances import LogitsTolerance, RatioTolerance


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The verdict of one comparator on one output."""

    comparator: str
    passed: bool
    numel: int
    mismatches: int = 0
    max_abs_diff: float = 0.0
    worst_index: tuple[int, ...] | None = None
    max_rel_diff: float = 0.0
    detail: str = ""

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["worst_index"] = list(self.worst_index) if self.worst_index is not None else None
        return d


def as_float32(x) -> np.ndarray:
    """Any numpy/torch tensor (BF16 included) as an FP32 numpy array."""
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch here
        x = x.detach().cpu().float().numpy()
    return np.asarray(x).astype(np.float32, copy=False)


def flat_outputs(outputs) -> np.ndarray:
    """Every output of a call, FP32, end to end in one vector: one comparison covers a call's many outputs."""
    return np.concatenate([as_float32(o).ravel() for o in outputs]) if outputs else np.zeros(0, np.float32)


def _nonfinite_counts(x: np.ndarray) -> tuple[int, int]:
    return int(np.isnan(x).sum()), int(np.isinf(x).sum())


def ratio_allclose(tolerance: RatioTolerance = RatioTolerance(), max_show: int = 10) -> Callable[..., Comparison]:
    """Outlier-budget allclose (spec §4.1).

    A point is an outlier iff ``|a-e| > atol + rtol*|e|``; the check passes iff the outlier count is at most
    ``round(max_error_ratio * numel)`` (Python's banker's rounding). NaN/Inf in *actual* is a hard failure
    before any ratio logic. Unlike the reference, non-finite *expected* values are rejected too: a NaN
    difference compares False and would otherwise never count as an outlier. ``tolerance.exact``: bitwise
    equality instead (``bitwise_equal``).
    """
    if tolerance.exact:
        return bitwise_equal(max_show)
    atol, rtol, max_error_ratio = tolerance.atol, tolerance.rtol, tolerance.max_error_ratio
    name = f"ratio_allclose(atol={atol}, rtol={rtol}, max_error_ratio={max_error_ratio})"

    def compare(actual, expected) -> Comparison:
        a, e = as_float32(actual), as_float32(expected)
        numel = int(a.size)
        if a.shape != e.shape:
            return Comparison(name, False, numel, detail=f"shape mismatch: actual {a.shape} vs expected {e.shape}")
        nan, inf = _nonfinite_counts(a)
        if nan or inf:
            return Comparison(name, False, numel, mismatches=nan + inf,
                              detail=f"illegal values in actual: NaN={nan} Inf={inf}")
        nan, inf = _nonfinite_counts(e)
        if nan or inf:
            return Comparison(name, False, numel, detail=f"non-finite expected values: NaN={nan} Inf={inf}")
        diff = np.abs(a - e)
        tol = np.float32(atol) + np.float32(rtol) * np.abs(e)
        bad = diff > tol
        count = int(bad.sum())
        threshold = round(max_error_ratio * numel)
        with np.errstate(over="ignore"):  # a huge diff over a tiny expected value is an infinite relative diff
            rel = diff / np.maximum(np.abs(e), np.finfo(np.float32).tiny)
        if numel:
            worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
            worst_rel = np.unravel_index(int(np.argmax(rel)), rel.shape)
            max_abs, max_rel = float(diff[worst]), float(rel[worst_rel])
        else:
            worst, worst_rel, max_abs, max_rel = (), (), 0.0, 0.0
        worst = tuple(int(i) for i in worst)
        passed = count <= threshold
        lines = [
            f"Mismatched elements: {count} / {numel} ({100.0 * count / max(numel, 1):.4f}%), "
            f"allowed <= {threshold} ({100.0 * max_error_ratio:g}%)",
            f"Greatest absolute difference: {max_abs:.6g} at index {worst} "
            f"(up to {float(tol[worst]) if numel else atol:.6g} allowed)",
            f"Greatest relative difference: {max_rel:.6g} at index {tuple(int(i) for i in worst_rel)} "
            f"(atol={atol}, rtol={rtol})",
        ]
        if not passed:
            shown = np.argwhere(bad)[:max_show]
            lines += [f"  at {tuple(int(i) for i in ix)}: actual={a[tuple(ix)]:.6g} expected={e[tuple(ix)]:.6g}"
                      for ix in shown]
        return Comparison(name, passed, numel, count, max_abs, worst, max_rel, "\n".join(lines))

    compare.__name__ = name
    return compare


def bitwise_equal(max_show: int = 10) -> Callable[..., Comparison]:
    """Every element's bits equal to the reference's, as FP32 (BF16 and FP16 widen exactly, so a value's bits are
    compared, not its closeness): a pass bug within any tolerance still differs here; -0.0 is not 0.0, and a NaN
    equals only the same NaN."""
    name = "bitwise_equal"

    def compare(actual, expected) -> Comparison:
        a, e = as_float32(actual), as_float32(expected)
        numel = int(a.size)
        if a.shape != e.shape:
            return Comparison(name, False, numel, detail=f"shape mismatch: actual {a.shape} vs expected {e.shape}")
        bad = a.view(np.uint32) != e.view(np.uint32)
        count = int(bad.sum())
        if not count:
            return Comparison(name, True, numel, detail=f"Bitwise equal: {numel} / {numel} elements")
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(bad, np.abs(a.astype(np.float64) - e.astype(np.float64)), 0.0)
        diff = np.where(np.isnan(diff), np.inf, diff)  # a NaN against a number is the worst difference
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
        lines = [f"Mismatched elements: {count} / {numel} ({100.0 * count / max(numel, 1):.4f}%) differ bitwise, "
                 "allowed 0 (--exact)", f"Greatest absolute difference: {float(diff[worst]):.6g} at index {worst}"]
        lines += [f"  at {tuple(int(i) for i in ix)}: actual={a[tuple(ix)].item()!r} expected={e[tuple(ix)].item()!r}"
                  for ix in np.argwhere(bad)[:max_show]]
        return Comparison(name, False, numel, count, float(diff[worst]), worst, detail="\n".join(lines))

    compare.__name__ = name
    return compare


DISTANCE_BLOCK_BYTES = 16 << 20  # the row-distance block of the logits contract: memory linear in T


def _nearest_rows(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """For every row of ``x``, the index of the nearest (L2) row of ``e``, a block of rows at a time so that
    memory stays linear in T (a whole T x T matrix is 32 GiB at T = 65536)."""
    e = e.astype(np.float64)
    e_sq = (e * e).sum(1)
    rows = max(1, DISTANCE_BLOCK_BYTES // (8 * max(len(e), 1)))
    nearest = np.empty(len(x), dtype=np.int64)
    for lo in range(0, len(x), rows):
        dist = e_sq[None, :] - 2.0 * (x[lo:lo + rows].astype(np.float64) @ e.T)  # |x|^2 is the same per row
        nearest[lo:lo + rows] = np.argmin(dist, axis=1)
    return nearest


def check_logits_contract(logits, batch: int, seq: int, vocab_shard: int, expected=None) -> Comparison:
    """The reference's logits contract (spec §2.3), made able to fail on device output.

    Shape is ``(T, V)``; the ``[B, S, V]`` view's ``[b, s]`` is row ``b*S + s`` exactly; every row's argmax is a
    valid column. With ``expected`` it also checks row identity: each actual row is nearer (L2) to its own
    expected row than to any other, so rows written in the wrong order (say s-major) fail.
    """
    name = "logits_contract"
    x = as_float32(logits)
    numel = int(x.size)
    tokens = batch * seq
    if x.shape != (tokens, vocab_shard):
        return Comparison(name, False, numel, detail=f"logits shape {x.shape} != expected {(tokens, vocab_shard)}")
    view = x.reshape(batch, seq, vocab_shard)
    for b in range(batch):
        for s in range(seq):
            if not np.array_equal(view[b, s], x[b * seq + s], equal_nan=True):
                return Comparison(name, False, numel, worst_index=(b * seq + s,),
                                  detail=f"view[{b},{s}] is not row {b * seq + s}")
    idx = np.argmax(x, axis=-1)
    if idx.shape != (tokens,) or (idx < 0).any() or (idx >= vocab_shard).any():
        return Comparison(name, False, numel, detail=f"argmax indices out of range [0, {vocab_shard})")
    if expected is not None:
        nearest = _nearest_rows(x, as_float32(expected))
        wrong = np.flatnonzero(nearest != np.arange(tokens))
        if wrong.size:
            t = int(wrong[0])
            return Comparison(name, False, numel, mismatches=int(wrong.size), worst_index=(t,),
                              detail=f"{wrong.size} of {tokens} rows are misplaced: row {t} matches "
                                     f"expected row {int(nearest[t])}")
    return Comparison(name, True, numel, detail="shape, row order and argmax range hold")


def device_hidden_logits_allclose(tp: int, tolerance: LogitsTolerance = LogitsTolerance()) -> Callable[..., Comparison]:
    """The LM-head logits comparator conditioned on the device's own hidden state (spec §3.3).

    Projecting the CPU golden hidden state through the LM head amplifies the error the hidden state is
    allowed, so device logits are instead compared with a reference projected on the CPU from the hidden
    state the device produced (``hidden``, ``[owners, rows, D]``): that isolates the LM head, which must
    meet ``ratio_allclose(tolerance)``. A non-finite reference is rejected (a NaN difference would never count
    as an outlier). Then an end-to-end guard against the original CPU golden catches a
    catastrophic upstream error the conditioning would hide: every ``|actual - expected|`` must be finite
    and at most ``max_e2e_abs_diff``.
    """
    max_e2e_abs_diff = tolerance.max_e2e_abs_diff
    base = ratio_allclose(tolerance)
    name = f"device_hidden_{base.__name__}_with_e2e_max_abs_diff({max_e2e_abs_diff})"

    def compare(actual, expected, *, hidden, lm_head_weight, logit_row_indices) -> Comparison:
        import torch  # the reference projection is torch's, as every golden here

        from ..contract.golden import compute_lm_head_logits

        def as_torch(x):  # torch inputs pass as they are: a 1 GiB BF16 weight is not copied to FP32 twice
            return x if isinstance(x, torch.Tensor) else torch.from_numpy(as_float32(x))

        reference = compute_lm_head_logits(as_torch(hidden), as_torch(lm_head_weight),
                                           torch.as_tensor(logit_row_indices), tp).numpy()
        nan, inf = _nonfinite_counts(reference)
        if nan or inf:
            return Comparison(name, False, int(reference.size),
                              detail=f"non-finite LM-head reference logits: NaN={nan} Inf={inf} "
                                     "(the device hidden state holds non-finite values)")
        lm_head = base(actual, reference)
        verdict = dataclasses.replace(lm_head, comparator=name,
                                      detail="against the reference from the device hidden state:\n" + lm_head.detail)
        if not lm_head.passed:
            return verdict
        diff = np.abs(as_float32(actual) - as_float32(expected))
        if not np.isfinite(diff).all():
            return dataclasses.replace(verdict, passed=False, detail=verdict.detail + "\nnon-finite end-to-end "
                                       f"logits difference: {int((~np.isfinite(diff)).sum())} points")
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape)) if diff.size else ()
        e2e = float(diff[worst]) if diff.size else 0.0
        guard = f"end-to-end logits max abs diff={e2e:.6g} at {worst}, allowed<={max_e2e_abs_diff}"
        return dataclasses.replace(verdict, passed=e2e <= max_e2e_abs_diff, detail=verdict.detail + "\n" + guard)

    compare.__name__ = name
    return compare


def check_sampled_ids(sampled_ids, logits) -> Comparison:
    """Greedy sampling: every id is the first column holding its row's maximum in the device logits.

    The logits themselves are validated by ``device_hidden_logits_allclose``; this pins the sampling to them
    exactly (a wrong tie rule or an off-by-one fails).
    """
    name = "sampled_ids_argmax"
    ids, x = np.asarray(sampled_ids), as_float32(logits)
    if ids.shape != x.shape[:-1]:
        return Comparison(name, False, int(ids.size), detail=f"sampled_ids shape {ids.shape} != {x.shape[:-1]}")
    want = np.argmax(x, axis=-1)
    wrong = np.argwhere(ids != want)
    if not wrong.size:
        return Comparison(name, True, int(ids.size), detail="every id is its row's argmax")
    first = tuple(int(i) for i in wrong[0])
    return Comparison(name, False, int(ids.size), mismatches=len(wrong), worst_index=first,
                      detail=f"{len(wrong)} of {ids.size} ids are not their row's argmax; first at {first}: "
                             f"id {int(ids[first])}, argmax {int(want[first])}")
