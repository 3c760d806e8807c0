"""Model presets and the shape of one decode step, in one typed place.

Every constant the spec fixes (eps, K chunk, token tile, INT8 scale and amax floor) lives here, so kernels,
goldens and tests read the same numbers.
"""

from __future__ import annotations

import dataclasses

from ..support.errors import UsageError
from ..support.rounding import ceil_to

RMS_EPS = 1e-6
K_CHUNK = 128  # K is accumulated in 128-wide chunks (spec §1.2, §2.1)
TOKEN_TILE = 16  # token rows are padded to a tile of 16 (spec §1.2 LINEAR_T_TILE, §2.1 MATMUL_T_TILE)
INT8_SCALE_MAX = 127.0
INT8_AMAX_EPS = 1e-4
VOCAB_SIZE = 129280
DEFAULT_VOCAB_SHARD = 512  # the fork's local-logits smoke shard (spec §2)
TP_SIZES = (2, 4, 8, 16)
OWNER_COUNTS = (2, 4, 8)  # EP ranks that own tokens (spec §3.1 N_RANKS)
MAX_LOGIT_ROWS = 8  # logit rows selected per owner (spec §3.1)
DEFAULT_OWNERS = 2
DEFAULT_TP = 2  # prefill_mtp's LM_HEAD_TP_SIZE (spec §3.1)
NO_PRESET = "-"  # a module file has no preset: its sizes are its example inputs' (``shapes``)
MAX_TOKENS = 1 << 16  # far beyond a decode step; guards against typos such as --tokens 80000000


@dataclasses.dataclass(frozen=True)
class Preset:
    """A model size: hidden size, vocabulary and decode batch layout."""

    name: str
    hidden: int
    vocab: int = VOCAB_SIZE
    batch: int = 4
    seq: int = 2
    eps: float = RMS_EPS


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("tiny", hidden=256, vocab=4096),
        Preset("flash", hidden=4096),
        Preset("pro", hidden=7168),
    )
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None


def check_tp(tp: int) -> int:
    if isinstance(tp, bool) or tp not in TP_SIZES:
        raise UsageError(f"tp must be one of {TP_SIZES}, got {tp}")
    return tp


def tp_vocab_shard(preset: Preset, tp: int) -> int:
    """Columns each rank holds when the vocabulary is split TP ways."""
    check_tp(tp)
    if preset.vocab % tp:
        raise UsageError(f"vocab {preset.vocab} of preset {preset.name!r} does not split {tp} ways")
    return preset.vocab // tp


def check_owners(owners: int) -> int:
    if isinstance(owners, bool) or owners not in OWNER_COUNTS:
        raise UsageError(f"owners must be one of {OWNER_COUNTS}, got {owners!r}")
    return owners


def padded_tokens(tokens: int) -> int:
    """Token rows rounded up to the token tile."""
    return ceil_to(tokens, TOKEN_TILE)


@dataclasses.dataclass(frozen=True)
class Shapes:
    """The concrete sizes of one run: batch x seq tokens, hidden size, vocab shard; and for the TP-sharded LM
    head, the token owners (EP ranks; token t belongs to owner t // (T / owners)) and the TP degree."""

    preset: Preset
    batch: int
    seq: int
    vocab_shard: int
    owners: int = DEFAULT_OWNERS
    tp: int = DEFAULT_TP

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def hidden(self) -> int:
        return self.preset.hidden

    @property
    def eps(self) -> float:
        return self.preset.eps

    @property
    def vocab(self) -> int:
        """The LM head's full vocabulary: one copy of each of the TP shards."""
        return self.tp * self.vocab_shard

    @property
    def ranks(self) -> int:
        """Ranks holding the stacked LM-head weight (rank r holds shard r % TP): the owners, or more when TP
        exceeds them, so every shard is held at least once."""
        return max(self.owners, self.tp)

    def as_dict(self) -> dict[str, int]:
        return {"batch": self.batch, "seq": self.seq, "tokens": self.tokens, "hidden": self.hidden,
                "vocab_shard": self.vocab_shard, "tokens_padded": padded_tokens(self.tokens),
                "owners": self.owners, "tp": self.tp}


def make_shapes(preset: str | Preset, tokens: int | None = None, vocab_shard: int | None = None,
                owners: int | None = None, tp: int | None = None) -> Shapes:
    """Resolve a preset plus optional overrides into checked shapes.

    ``tokens`` replaces the preset's B*S: it keeps S=2 when T is even (B=T/2) and uses S=1 otherwise, so
    the logits contract's row b*S+s stays meaningful for every T.
    """
    p = preset if isinstance(preset, Preset) else get_preset(preset)
    if p.hidden % K_CHUNK:
        raise UsageError(f"hidden size {p.hidden} is not a multiple of the K chunk {K_CHUNK}")
    batch, seq = p.batch, p.seq
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= MAX_TOKENS:
            raise UsageError(f"tokens must be an integer in [1, {MAX_TOKENS}], got {tokens!r}")
        seq = p.seq if tokens % p.seq == 0 else 1
        batch = tokens // seq
    v = DEFAULT_VOCAB_SHARD if vocab_shard is None else vocab_shard
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= p.vocab:
        raise UsageError(f"vocab shard must be an integer in [1, {p.vocab}], got {v!r}")
    o = DEFAULT_OWNERS if owners is None else check_owners(owners)
    t = DEFAULT_TP if tp is None else check_tp(tp)
    return Shapes(p, batch, seq, v, o, t)
