import pytest

from mtp_tvm.spec.presets import (
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
