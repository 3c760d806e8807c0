import pytest

from mtp_tvm.contract.presets import (
    PRESETS,
    Preset,
    make_shapes,
    padded_tokens,
    tp_vocab_shard,
)
from mtp_tvm.support.errors import UsageError


def test_presets_match_the_spec():
    assert PRESETS["flash"].hidden == 4096 and PRESETS["pro"].hidden == 7168
    assert all(p.vocab == 129280 and p.eps == 1e-6 for p in (PRESETS["flash"], PRESETS["pro"]))
    s = make_shapes("flash")
    assert (s.batch, s.seq, s.tokens, s.vocab_shard) == (4, 2, 8, 512)


@pytest.mark.parametrize("tp, shard", [(2, 64640), (4, 32320), (8, 16160), (16, 8080)])
def test_tp_vocab_shards(tp, shard):
    assert tp_vocab_shard(PRESETS["flash"], tp) == shard


@pytest.mark.parametrize("tokens, layout", [(1, (1, 1)), (8, (4, 2)), (16, (8, 2)), (17, (17, 1))])
def test_token_override_keeps_row_order_meaningful(tokens, layout):
    s = make_shapes("tiny", tokens=tokens)
    assert (s.batch, s.seq) == layout and s.tokens == tokens


@pytest.mark.parametrize("tokens, padded", [(1, 16), (16, 16), (17, 32)])
def test_padding_to_the_token_tile(tokens, padded):
    assert padded_tokens(tokens) == padded


@pytest.mark.parametrize("kwargs, message", [
    ({"preset": "huge"}, "unknown preset"),
    ({"preset": "tiny", "tokens": 0}, "tokens must be"),
    ({"preset": "tiny", "tokens": -3}, "tokens must be"),
    ({"preset": "tiny", "tokens": 10**9}, "tokens must be"),
    ({"preset": "tiny", "vocab_shard": 0}, "vocab shard"),
    ({"preset": Preset("odd", hidden=200), }, "not a multiple of the K chunk"),
])
def test_bad_shapes_are_user_errors(kwargs, message):
    with pytest.raises(UsageError, match=message):
        make_shapes(**kwargs)


def test_bad_tp():
    with pytest.raises(UsageError, match="tp must be"):
        tp_vocab_shard(PRESETS["flash"], 3)


def test_mtp_tvm_dump_turns_dumping_on_for_api_users(tmp_path, monkeypatch):
    """Like torch's TORCH_COMPILE_DEBUG=1: a program calling the API gets run folders without a code change;
    a build that says dump_passes=False keeps its word, and a value other than 1/0 is refused."""
    import mtp_tvm
    from mtp_tvm.compiler.options import DebugOptions

    monkeypatch.setenv("MTP_TVM_DUMPS", str(tmp_path))
    monkeypatch.setenv("MTP_TVM_DUMP", "1")
    assert DebugOptions().from_environment().dump_passes is True
    assert DebugOptions(dump_passes=False).from_environment().dump_passes is False
    m = mtp_tvm.compile(case="norm", preset="tiny")
    assert m.dump_dir is not None and m.dump_dir.parent == tmp_path and (m.dump_dir / "complete").exists()
    monkeypatch.setenv("MTP_TVM_DUMP", "yes")
    with pytest.raises(UsageError, match="MTP_TVM_DUMP must be 1 or 0"):
        mtp_tvm.compile(case="norm", preset="tiny")
    monkeypatch.setenv("MTP_TVM_DUMP", "0")
    assert DebugOptions().from_environment().dump_passes is None


def test_ceil_to_rounds_up_to_the_next_multiple_only_when_needed():
    from mtp_tvm.support.rounding import ceil_div, ceil_to

    assert [ceil_to(n, 16) for n in (0, 1, 15, 16, 17)] == [0, 16, 16, 16, 32]
    assert ceil_div(2**62 + 1, 2) == 2**61 + 1  # exact for sizes where a float ceil would round


def test_ceil_to_of_a_symbolic_size_is_the_tir_expression_kernels_declare():
    import tvm_ffi
    from tvm import tirx

    from mtp_tvm.support.rounding import ceil_to

    n = tirx.Var("n", "int64")
    assert tvm_ffi.structural_equal(ceil_to(n, 16), (n + 16 - 1) // 16 * 16)
