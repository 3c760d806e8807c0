"""The TP-sharded LM head (spec §3): its reference projection, its kernels in both frontends, and the
stabilised end-to-end check of ``tail-lm-head``."""

import functools
import json

import numpy as np
import pytest
import torch
import tvm

import mtp_tvm
from helpers import QUIET, slow_except
from mtp_tvm.cli import main
from mtp_tvm.compiler.arrays import to_numpy
from mtp_tvm.contract.cases import get_case
from mtp_tvm.contract.golden import compute_lm_head_logits, sample_argmax
from mtp_tvm.contract.presets import make_shapes
from mtp_tvm.ir import tir_kernels as kernels
from mtp_tvm.passes.target import resolve_target
from mtp_tvm.schedule.apply import ApplySchedules
from mtp_tvm.support.errors import UsageError

FRONTENDS = ("tir", "relax")


@functools.cache
def _tp_binary(frontend: str, tp: int, vocab_shard: int):
    return mtp_tvm.compile(case="lm-head", preset="tiny", frontend=frontend, tp=tp, vocab_shard=vocab_shard)


def _run(m, hidden, stacked, idx):
    out = m.run({"hidden_out": to_numpy(hidden.to(torch.bfloat16)), "lm_head_weight": to_numpy(
        stacked.to(torch.bfloat16)), "logit_row_indices": to_numpy(idx)})
    return out["logits"], out["sampled_ids"]


# ---- the reference projection -------------------------------------------------------------------------------

def test_reference_matches_a_projection_worked_by_hand():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[-1.0, 0.0], [0.5, 2.0]]])  # [owners=2, rows=2, D=2]
    shard0, shard1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[2.0, 1.0], [1.0, -1.0]])
    stacked = torch.stack([shard0, shard1])  # rank r holds shard r % 2
    idx = torch.tensor([[1, -1, 5], [0, 1, -1]], dtype=torch.int32)  # 5 clamps to the last row, -1 is a zero row
    want = torch.tensor([[[3.0, 4.0, 10.0, -1.0], [0.0, 0.0, 0.0, 0.0], [3.0, 4.0, 10.0, -1.0]],
                         [[-1.0, 0.0, -2.0, -1.0], [0.5, 2.0, 3.0, -1.5], [0.0, 0.0, 0.0, 0.0]]])
    assert torch.equal(compute_lm_head_logits(hidden, stacked, idx, tp=2), want)


def test_reference_uses_exactly_one_copy_of_each_shard():
    g = torch.Generator().manual_seed(0)
    hidden, shards = torch.randn(2, 3, 8, generator=g), torch.randn(2, 4, 8, generator=g)
    idx = torch.tensor([[0, 1, 2, -1]] * 2, dtype=torch.int32)
    two_ranks = compute_lm_head_logits(hidden, shards, idx, tp=2)
    eight_ranks = torch.stack([shards[r % 2] for r in range(8)])
    eight_ranks[2:] = float("nan")  # ranks >= tp are never read
    assert torch.equal(compute_lm_head_logits(hidden, eight_ranks, idx, tp=2), two_ranks)
    assert two_ranks.shape == (2, 4, 8)
    with pytest.raises(UsageError, match="fewer than tp=4"):
        compute_lm_head_logits(hidden, shards, idx, tp=4)


@pytest.mark.parametrize("owners", [2, 4, 8])
def test_reference_reads_the_owner_count_at_run_time(owners):
    g = torch.Generator().manual_seed(owners)
    hidden, stacked = torch.randn(owners, 5, 8, generator=g), torch.randn(owners, 3, 8, generator=g)
    idx = torch.tensor([[4, 0]] * owners, dtype=torch.int32)
    logits = compute_lm_head_logits(hidden, stacked, idx, tp=2)
    assert logits.shape == (owners, 2, 6)
    last_alone = compute_lm_head_logits(hidden[-1:], stacked, idx[-1:], tp=2)
    assert torch.equal(logits[-1:], last_alone)


# ---- the kernels, both frontends ----------------------------------------------------------------------------

@pytest.mark.parametrize("frontend", FRONTENDS)
@pytest.mark.parametrize("owners", slow_except([2, 4, 8], {2}))
def test_kernel_serves_every_owner_count(owners, frontend):
    r = mtp_tvm.check(case="lm-head", preset="tiny", frontend=frontend, owners=owners, **QUIET)
    assert r.passed, r.as_dict()
    assert r.outputs["logits"].checks[0].numel == owners * 8 * 1024


@pytest.mark.slow  # builds the LM head once per TP degree
@pytest.mark.parametrize("frontend", FRONTENDS)
def test_tp_degrees_give_identical_logits_for_identical_weights(compiled, frontend):
    vocab, d = 1024, 256
    g = torch.Generator().manual_seed(5)
    full_weight = (torch.randn(vocab, d, generator=g) / 16).to(torch.bfloat16)
    hidden = torch.randn(2, 4, d, generator=g).to(torch.bfloat16)
    idx = torch.tensor([[0, 1, 2, 3, -1, -1, -1, -1]] * 2, dtype=torch.int32)
    results = {}
    for tp in (2, 4, 8, 16):
        shards = full_weight.reshape(tp, vocab // tp, d)
        stacked = torch.stack([shards[r % tp] for r in range(max(2, tp))])
        m = compiled("lm-head", frontend) if tp == 2 else _tp_binary(frontend, tp, vocab // tp)
        results[tp] = _run(m, hidden, stacked, idx)
    for tp in (4, 8, 16):
        np.testing.assert_array_equal(results[tp][0], results[2][0])
        np.testing.assert_array_equal(results[tp][1], results[2][1])
    want = compute_lm_head_logits(hidden, full_weight.reshape(2, vocab // 2, d), idx, tp=2)
    np.testing.assert_allclose(results[2][0], want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_row_indices_are_clamped_any_order_and_padding_rows_are_zero(compiled, frontend):
    m = compiled("lm-head", frontend)
    s = m.shapes
    inputs = get_case("lm-head").make_inputs(s, 3)
    idx = torch.tensor([[3, 0, 99, -1, 2, 2, -1, 1], [-1] * 8], dtype=torch.int32)
    logits, ids = _run(m, inputs["hidden_out"], inputs["lm_head_weight"], idx)
    want = compute_lm_head_logits(inputs["hidden_out"], inputs["lm_head_weight"], idx, s.tp)
    np.testing.assert_allclose(logits, want.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(logits[0, 2], logits[0, 0])  # 99 clamps to the last row, 3
    assert not logits[0, 3].any() and not logits[1].any()  # -1 rows: exactly zero ...
    assert ids[0, 3] == 0 and not ids[1].any()  # ... so their first argmax is column 0
    np.testing.assert_array_equal(ids, sample_argmax(want).numpy())


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_sampling_takes_the_first_of_tied_maxima(compiled, frontend):
    m = compiled("lm-head", frontend)
    d, shard = m.shapes.hidden, m.shapes.vocab_shard
    stacked = torch.zeros(2, shard, d)
    stacked[1, 7] = stacked[0, 5] = 0.25  # columns 5 and shard + 7 are the same, larger than all others
    hidden = torch.ones(2, 4, d)
    idx = torch.tensor([[0, 1, 2, 3, -1, -1, -1, -1]] * 2, dtype=torch.int32)
    logits, ids = _run(m, hidden, stacked, idx)
    assert logits[0, 0, 5] == logits[0, 0, shard + 7] == 64.0
    np.testing.assert_array_equal(ids, [[5, 5, 5, 5, 0, 0, 0, 0]] * 2)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_one_binary_serves_any_rows_per_owner(compiled, frontend):
    m = compiled("lm-head", frontend)
    for rows in (1, 5, 11):
        s = make_shapes("tiny", tokens=2 * rows)
        inputs = get_case("lm-head").make_inputs(s, rows)
        logits, ids = _run(m, inputs["hidden_out"], inputs["lm_head_weight"], inputs["logit_row_indices"])
        want = compute_lm_head_logits(inputs["hidden_out"], inputs["lm_head_weight"], inputs["logit_row_indices"], 2)
        np.testing.assert_allclose(logits, want.numpy(), rtol=1e-5, atol=1e-5)
        assert (inputs["logit_row_indices"][:, :min(rows, 8)] >= 0).all() and logits.shape == (2, 8, 1024)


@pytest.mark.slow  # over 1 s
def test_cpu_schedule_keeps_the_logits_bitwise():
    """The LM head's CPU schedule goes through the schedule system (``--schedule none`` and traces see it)."""
    args = (256, 384, 2, 2, 2)  # D, shard, tp, ranks, owners
    target = resolve_target("llvm")
    plain = tvm.IRModule({"lm_head_tp": kernels.lm_head_tp(*args).with_attr("global_symbol", "lm_head_tp")})
    g = torch.Generator().manual_seed(9)
    x = torch.randn(10, 256, generator=g).to(torch.bfloat16)
    w = torch.randn(2, 384, 256, generator=g).to(torch.bfloat16)
    idx = torch.tensor([[4, 0, -1, 9, 1, 2, 3, 4], [0, 1, 2, 3, 4, -1, -1, 7]], dtype=torch.int32)
    outs = []
    for schedule in ("none", "default"):
        applier = ApplySchedules(target, schedule)
        lib = tvm.compile(applier(plain), target=target)
        assert ("lm_head_tp" in applier.traces) == (schedule == "default")
        bufs = [tvm.runtime.tensor(to_numpy(a)) for a in (x, w, idx)] + [
            tvm.runtime.tensor(np.zeros((2, 8, 768), np.float32)), tvm.runtime.tensor(np.zeros((2, 8), np.int32))]
        lib["lm_head_tp"](*bufs)
        outs.append((bufs[3].numpy(), bufs[4].numpy()))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])


def test_relax_lm_head_builds_for_cuda():
    """No GPU is needed to build; dlight schedules the Relax kernels (the hand kernel carries a CPU schedule)."""
    m = mtp_tvm.compile(case="lm-head", target="cuda", preset="tiny", frontend="relax")
    assert m.target.kind.name == "cuda"


# ---- inputs -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["lm-head", "tail-lm-head"])
def test_same_seed_gives_bitwise_identical_inputs(case):
    s = make_shapes("tiny", owners=8, tp=2)
    a, b, c = (get_case(case).make_inputs(s, seed) for seed in (4, 4, 5))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["lm_head_weight"], c["lm_head_weight"])
    w = a["lm_head_weight"]
    assert w.shape == (8, 512, 256) and all(torch.equal(w[r], w[r % 2]) for r in range(8))
    assert not torch.equal(w[0], w[1])
    assert torch.equal(a["logit_row_indices"], torch.tensor([[0, -1, -1, -1, -1, -1, -1, -1]] * 8, dtype=torch.int32))


def test_lm_head_shapes_are_checked(compiled):
    with pytest.raises(UsageError, match="not a multiple"):
        mtp_tvm.compile(case="tail-lm-head", preset="tiny", tokens=6, owners=4)
    with pytest.raises(UsageError, match="exceeds preset 'tiny'"):
        mtp_tvm.compile(case="lm-head", preset="tiny", tp=16, vocab_shard=512)
    m = compiled("lm-head", "tir")
    inputs = {k: to_numpy(v) for k, v in get_case("lm-head").make_inputs(make_shapes("tiny"), 0).items()}
    inputs["hidden_out"] = inputs["hidden_out"][:, :0]
    with pytest.raises(UsageError, match="0 tokens"):
        m.run(inputs)


# ---- end to end: projection -> norm -> LM head ----------------------------------------------------------------

@pytest.mark.slow  # a build per check; test_model checks the tiny build against the goldens
@pytest.mark.parametrize("frontend", FRONTENDS)
@pytest.mark.parametrize("preset", ["tiny", "flash"])
def test_tail_lm_head_meets_its_goldens(preset, frontend):
    r = mtp_tvm.check(case="tail-lm-head", preset=preset, frontend=frontend, owners=2, tp=2, **QUIET)
    assert r.passed, r.as_dict()
    assert list(r.outputs) == ["hidden_states_out", "normed_hidden", "logits", "sampled_ids"]
    assert r.outputs["logits"].checks[0].comparator.startswith("device_hidden_ratio_allclose")


def test_tail_lm_head_odd_token_counts(compiled):
    m = compiled("tail-lm-head", "tir")
    s = make_shapes("tiny", tokens=6)
    inputs = get_case("tail-lm-head").make_inputs(s, 1)
    out = m.run({k: to_numpy(v) for k, v in inputs.items()})
    want = compute_lm_head_logits(torch.from_numpy(out["normed_hidden"].astype(np.float32)).reshape(2, 3, -1),
                                  inputs["lm_head_weight"], inputs["logit_row_indices"], 2)
    np.testing.assert_allclose(out["logits"], want.numpy(), rtol=1e-5, atol=1e-5)
    inputs = get_case("tail-lm-head").make_inputs(make_shapes("tiny", tokens=5), 1)
    with pytest.raises(UsageError, match="T=5 is not a multiple"):
        m.run({k: to_numpy(v) for k, v in inputs.items()})


@pytest.mark.slow  # over 1 s
def test_cli_perturbed_logit_fails_a_zero_budget_and_is_named(tmp_path, capsys):
    report = tmp_path / "r.json"
    rc = main(["check", "--case", "tail-lm-head", "--preset", "tiny", "--max-error-ratio", "0",
               "--perturb-logit", "1,2,300", "--report", str(report)])
    out = capsys.readouterr().out
    assert rc == 1 and "[PERTURB] logits(1, 2, 300) += 1.0" in out
    assert "Greatest absolute difference: 1 at index (1, 2, 300)" in out and "FAILED" in out
    d = json.loads(report.read_text())
    assert d["perturbation"] == {"index": [1, 2, 300], "delta": 1.0}
    assert d["outputs"]["logits"]["worst_index"] == [1, 2, 300] and d["outputs"]["logits"]["mismatches"] == 1


@pytest.mark.parametrize("delta, passes, message", [
    ("0.3", True, "PASSED"),  # one outlier is within the 1 % budget and 0.3 is within the 0.5 guard
    ("1.0", False, "end-to-end logits max abs diff=1 at (0, 1, 7), allowed<=0.5"),  # the guard catches it
])
def test_cli_default_budget_and_guard(delta, passes, message, capsys):
    rc = main(["check", "--case", "lm-head", "--preset", "tiny", "--perturb-logit", f"0,1,7,{delta}"])
    out = capsys.readouterr().out
    assert rc == (0 if passes else 1) and message in out


@pytest.mark.parametrize("argv, message", [
    (["--case", "lm-head", "--perturb-logit", "1,2"], "OWNER,ROW,COL"),
    (["--case", "lm-head", "--perturb-logit", "2,0,0"], "inside logits (2, 8, 1024)"),
    (["--case", "tail", "--max-e2e-abs-diff", "0.4"], "'tail' has none"),
    (["--case", "lm-head", "--max-error-ratio", "1.5"], "max_error_ratio must be in [0, 1]"),
    (["--case", "lm-head", "--max-e2e-abs-diff", "0"], "max_e2e_abs_diff must be finite and > 0"),
    (["--case", "lm-head", "--owners", "3"], "owners must be one of"),
    (["--case", "lm-head", "--tp", "3"], "tp must be one of"),
    (["--case", "tail-lm-head", "--tokens", "7"], "T=7 is not a multiple"),
])
def test_cli_lm_head_user_errors_exit_2_with_one_line(argv, message, capsys):
    assert main(["check", "--preset", "tiny", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
