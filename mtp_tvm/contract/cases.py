"""The cases: each is a chain of named stages, and everything else (inputs, outputs, golden, Relax module,
comparators, bench FLOPs) is derived from that chain, so a new case is one line and a new stage is one ``Stage``
entry: no code elsewhere switches on stage or output names. (What bench races a stage against is not part of
the contract: ``tools/bench/stage_peers.py``.)

Stages, in the order the MTP decode tail runs them:

- ``projection``: ``e_proj(enorm(hidden)) + h_proj(hnorm(prev))`` in W8A8 (spec §1), out ``hidden_states_out``;
- ``norm``: the shared-head RMSNorm (spec §2.2), out ``normed_hidden``;
- ``logits``: local logits against one vocab shard (spec §2.1), out ``candidate_logits``;
- ``lm_head``: the full-vocabulary LM head over TP shards (spec §3): selected rows of each owner's hidden state
  against one copy of every shard, out ``logits [owners, 8, VOCAB]`` and ``sampled_ids [owners, 8]``.

Symbolic dims: ``"T"`` is the token count; ``"R"`` the rows per owner, ``T / owners`` (token ``t`` belongs to
owner ``t // R``), so a chain's token-major ``[T, D]`` hidden is the LM head's ``[owners, R, D]``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable

from ..contract import golden
from ..contract.presets import MAX_LOGIT_ROWS, Shapes
from ..support.errors import UsageError
from ..support.lazy import lazy_module
from ..support.timing import phase

torch = lazy_module("torch")  # inputs and goldens need it; names, shapes and dtypes do not

TOKENS, ROWS = "T", "R"


LOGITS = "candidate_logits"  # the local logits (spec §2)
LM_HEAD_LOGITS, SAMPLED_IDS = "logits", "sampled_ids"  # the TP-sharded LM head's outputs (spec §3)


@dataclasses.dataclass(frozen=True)
class TensorDecl:
    """One named tensor's declaration (a case's, a module file's, an artifact's): name, shape, dtype. ``shape``
    names the token dim ``"T"`` (and rows per owner ``"R"``) so it can be shown symbolically."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str

    def concrete(self, tokens: int, owners: int = 1) -> tuple[int, ...]:
        sizes = {TOKENS: tokens, ROWS: tokens // owners}
        return tuple(sizes.get(d, d) for d in self.shape)

    def as_dict(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype}


# ---- seeded input generation (spec §1.7 "Weight generation", §2.3 "Specs") -------------------------------
# Each generator draws from the one torch.Generator in spec order; a weight and its scale come from one draw.

def _activation(gen: torch.Generator, s: Shapes) -> torch.Tensor:
    return torch.randn(s.tokens, s.hidden, generator=gen).to(torch.bfloat16)


def _ones(_gen: torch.Generator, s: Shapes) -> torch.Tensor:
    return torch.ones(s.hidden, dtype=torch.float32)


def _int8_weight_pair(gen: torch.Generator, s: Shapes) -> tuple[torch.Tensor, torch.Tensor]:
    w = (torch.rand(s.hidden, s.hidden, generator=gen) / math.sqrt(s.hidden)).to(torch.bfloat16)
    return golden.quantize_weight_per_out(w)


def _lm_head_weight(gen: torch.Generator, s: Shapes) -> torch.Tensor:
    return (torch.randn(s.vocab_shard, s.hidden, generator=gen) / math.sqrt(s.hidden)).to(torch.bfloat16)


def _owner_hidden(gen: torch.Generator, s: Shapes) -> torch.Tensor:
    return torch.randn(s.owners, s.tokens // s.owners, s.hidden, generator=gen).to(torch.bfloat16)


def _stacked_lm_head_weight(gen: torch.Generator, s: Shapes) -> torch.Tensor:
    """TP shards drawn in shard order (randn/sqrt(D)), then stacked so rank r holds shard r % TP (spec §3.1)."""
    shards = [_lm_head_weight(gen, s) for _ in range(s.tp)]
    return torch.stack([shards[r % s.tp] for r in range(s.ranks)])


def _logit_row_indices(_gen: torch.Generator, s: Shapes) -> torch.Tensor:
    """Each owner's first min(rows, 8) rows in order, the rest -1 (spec §3.1); not drawn, so seed-free."""
    k = min(s.tokens // s.owners, MAX_LOGIT_ROWS)
    idx = torch.full((s.owners, MAX_LOGIT_ROWS), -1, dtype=torch.int32)
    idx[:, :k] = torch.arange(k, dtype=torch.int32)
    return idx


@dataclasses.dataclass(frozen=True)
class Param:
    """A weight (or activation) input of a stage and how the reference draws it."""

    name: str
    shape: Callable[[Shapes], tuple[int | str, ...]]
    dtype: str
    draw: Callable[[torch.Generator, Shapes], torch.Tensor] | None  # None: produced by the previous pair draw


_D = lambda s: (s.hidden,)  # noqa: E731
_DD = lambda s: (s.hidden, s.hidden)  # noqa: E731
_TD = lambda s: ("T", s.hidden)  # noqa: E731
_ORD = lambda s: (s.owners, ROWS, s.hidden)  # noqa: E731


def _pair(name: str):
    """The int8 weight of a pair draws both tensors; its scale then reads the cached second half."""
    return (Param(f"{name}_w", _DD, "int8", _int8_weight_pair),
            Param(f"{name}_w_scale", _D, "float32", None))


class Comparator(enum.StrEnum):
    """The comparators an output must pass (``verify.golden_check.OUTPUT_CHECKS`` has one for each):
    ``RATIO_ALLCLOSE`` (against the golden, spec §4.1), ``LOGITS_CONTRACT`` (shape, row order, argmax range,
    spec §2.3), ``DEVICE_HIDDEN_LOGITS`` (the LM-head comparator, its reference projected from the hidden state
    the stage read on the device, spec §3.3), ``SAMPLED_IDS_ARGMAX`` (ids against the argmax of the stage's first
    output). A string value: the name a report shows."""

    RATIO_ALLCLOSE = "ratio_allclose"
    LOGITS_CONTRACT = "logits_contract"
    DEVICE_HIDDEN_LOGITS = "device_hidden_logits"
    SAMPLED_IDS_ARGMAX = "sampled_ids_argmax"


@dataclasses.dataclass(frozen=True)
class Output:
    """One output of a stage. Token-major outputs (first dim ``"T"``) are computed on padded rows and cut back;
    ``checks``: its comparators, in order."""

    name: str
    shape: Callable[[Shapes], tuple[int | str, ...]]
    dtype: str
    checks: tuple[Comparator, ...] = (Comparator.RATIO_ALLCLOSE,)


def _token_major(name: str, dtype: str, cols: Callable[[Shapes], int],
                 checks: tuple[Comparator, ...] = (Comparator.RATIO_ALLCLOSE,)) -> tuple[Output]:
    return (Output(name, lambda s: (TOKENS, cols(s)), dtype, checks),)


# ---- how ir/model.py calls a stage's frontend method -----------------------------------------------------

class ArgKind(enum.Enum):
    """What a frontend call argument is (``FrontendCall``); the last three name something (``Arg.name``)."""

    X = "x"                      # the activation the stage reads
    PADDED_ROWS = "padded_rows"  # the token count padded to the tile (symbolic)
    SHAPES = "shapes"            # the ``Shapes``
    INPUTS = "inputs"            # every case input, by name
    INPUT = "input"              # one case input
    PADDED = "padded"            # a token-major case input padded to ``padded_rows``
    SHAPE = "shape"              # ``Shapes.<name>``


NAMED_ARGS = {ArgKind.INPUT, ArgKind.PADDED, ArgKind.SHAPE}


@dataclasses.dataclass(frozen=True)
class Arg:
    """One argument of a frontend call: its kind, and the name the named kinds need."""

    kind: ArgKind
    name: str | None = None

    def __post_init__(self):
        if not isinstance(self.kind, ArgKind) or (self.kind in NAMED_ARGS) is not isinstance(self.name, str) \
                or (self.name is not None and not self.name):
            raise ValueError(f"bad frontend argument {self}: {', '.join(k.value for k in NAMED_ARGS)} take a name, "
                             "the others none")


X, PADDED_ROWS, SHAPES, INPUTS = (Arg(k) for k in (ArgKind.X, ArgKind.PADDED_ROWS, ArgKind.SHAPES, ArgKind.INPUTS))


def input_arg(name: str) -> Arg:
    return Arg(ArgKind.INPUT, name)


def padded_arg(name: str) -> Arg:
    return Arg(ArgKind.PADDED, name)


def shape_arg(attr: str) -> Arg:
    return Arg(ArgKind.SHAPE, attr)


@dataclasses.dataclass(frozen=True)
class FrontendCall:
    """The frontend method (``ir/frontends.py``) that builds a stage, and its arguments (``Arg``).

    ``padded``: the stage runs on padded rows, ``x`` is ``[padded_rows, D]`` and the method returns one
    tensor, cut back to ``T`` rows as the stage's one output. Otherwise ``x`` is token-major ``[T, D]``, the
    method returns every output as it is, and the stage ends its case's chain.
    """

    method: str
    args: tuple[Arg, ...]
    padded: bool = True



HIDDEN_INPUT = Param("hidden_states", _TD, "bfloat16", _activation)


def _check_lm_head_shapes(s: Shapes, tokens: int) -> None:
    if s.vocab > s.preset.vocab:
        raise UsageError(f"LM-head vocabulary tp x vocab shard = {s.tp} x {s.vocab_shard} = {s.vocab} exceeds "
                         f"preset {s.preset.name!r}'s {s.preset.vocab}")
    if tokens % s.owners:
        raise UsageError(f"the LM head splits the tokens among {s.owners} owners: T={tokens} is not a multiple")


def _lm_head_golden(x: torch.Tensor, t: dict[str, torch.Tensor], s: Shapes) -> tuple[torch.Tensor, torch.Tensor]:
    logits = golden.compute_lm_head_logits(x.reshape(s.owners, -1, s.hidden), t["lm_head_weight"],
                                           t["logit_row_indices"], s.tp)
    return logits, golden.sample_argmax(logits)


Gemm = tuple[int | str, int, int]  # (M, K, N); M "T": the token rows (padded or not, as the count asks)


@dataclasses.dataclass(frozen=True)
class Stage:
    """One kernel of the tail: its extra inputs (spec order), its outputs, its torch golden, and how the rest
    of the package builds and counts it.

    ``golden(x, inputs, shapes)`` returns one tensor per output; the first is what the next stage consumes.
    ``frontend``: the frontend method that emits the stage into the Relax module (``ir/model.py``).
    ``gemms(shapes)``: the ``(M, K, N)`` of every GEMM it runs (FLOPs and the roofline of ``bench``; a norm's
    few FLOPs per element are not counted).
    ``hidden_input`` is the activation the stage reads when it opens a case (None: its params hold it).
    ``check_shapes(shapes, tokens)`` raises ``UsageError`` for sizes the stage cannot serve.
    """

    name: str
    params: tuple[Param, ...]
    outputs: tuple[Output, ...]
    golden: Callable[[torch.Tensor, dict[str, torch.Tensor], Shapes], tuple[torch.Tensor, ...]]
    frontend: FrontendCall
    gemms: Callable[[Shapes], tuple[Gemm, ...]] = lambda _s: ()
    hidden_input: Param | None = HIDDEN_INPUT
    check_shapes: Callable[[Shapes, int], None] | None = None


STAGES: dict[str, Stage] = {
    "projection": Stage(
        "projection",
        (Param("hidden_states", _TD, "bfloat16", _activation),
         Param("prev_hidden_states", _TD, "bfloat16", _activation),
         Param("enorm_w", _D, "float32", _ones), Param("hnorm_w", _D, "float32", _ones),
         *_pair("e_proj"), Param("e_proj_smooth", _D, "float32", _ones),
         *_pair("h_proj"), Param("h_proj_smooth", _D, "float32", _ones)),
        _token_major("hidden_states_out", "bfloat16", lambda s: s.hidden),
        lambda _x, t, s: (golden.mtp_projection(t, s.eps),),
        FrontendCall("projection", (padded_arg("hidden_states"), padded_arg("prev_hidden_states"), INPUTS, PADDED_ROWS,
                                    shape_arg("hidden"), shape_arg("eps"))),
        gemms=lambda s: ((TOKENS, s.hidden, s.hidden),) * 2, hidden_input=None),
    "norm": Stage(
        "norm", (Param("shared_head_norm_w", _D, "float32", _ones),),
        _token_major("normed_hidden", "bfloat16", lambda s: s.hidden),
        lambda x, t, s: (golden.shared_head_norm(x, t["shared_head_norm_w"], s.eps),),
        FrontendCall("norm", (X, input_arg("shared_head_norm_w"), PADDED_ROWS, shape_arg("hidden"), shape_arg("eps")))),
    "logits": Stage(
        "logits", (Param("lm_head_weight", lambda s: (s.vocab_shard, s.hidden), "bfloat16", _lm_head_weight),),
        _token_major(LOGITS, "float32", lambda s: s.vocab_shard,
                     (Comparator.RATIO_ALLCLOSE, Comparator.LOGITS_CONTRACT)),
        lambda x, t, _s: (golden.local_logits(x, t["lm_head_weight"]),),
        FrontendCall("logits", (X, input_arg("lm_head_weight"), PADDED_ROWS, shape_arg("hidden"),
                                shape_arg("vocab_shard"))),
        gemms=lambda s: ((TOKENS, s.hidden, s.vocab_shard),)),
    "lm_head": Stage(  # token-major [T, D] in, static [owners, 8, ...] out: no padding
        "lm_head",
        (Param("lm_head_weight", lambda s: (s.ranks, s.vocab_shard, s.hidden), "bfloat16", _stacked_lm_head_weight),
         Param("logit_row_indices", lambda s: (s.owners, MAX_LOGIT_ROWS), "int32", _logit_row_indices)),
        (Output(LM_HEAD_LOGITS, lambda s: (s.owners, MAX_LOGIT_ROWS, s.vocab), "float32",
                (Comparator.DEVICE_HIDDEN_LOGITS,)),
         Output(SAMPLED_IDS, lambda s: (s.owners, MAX_LOGIT_ROWS), "int32", (Comparator.SAMPLED_IDS_ARGMAX,))),
        _lm_head_golden,
        FrontendCall("lm_head", (X, input_arg("lm_head_weight"), input_arg("logit_row_indices"), SHAPES), padded=False),
        gemms=lambda s: ((s.owners * MAX_LOGIT_ROWS, s.hidden, s.vocab),),
        hidden_input=Param("hidden_out", _ORD, "bfloat16", _owner_hidden), check_shapes=_check_lm_head_shapes),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """A chain of stages compiled into one module; each stage's output is also a module output."""

    name: str
    stages: tuple[str, ...]
    description: str

    def __post_init__(self):
        if any(not st.frontend.padded for st in self.chain[:-1]):
            raise ValueError(f"case {self.name!r}: a stage that is not token-padded must end the chain")

    @property
    def chain(self) -> tuple[Stage, ...]:
        return tuple(STAGES[n] for n in self.stages)

    def params(self) -> tuple[Param, ...]:
        """Inputs in spec order: the first stage's hidden activation (unless its params hold it), then weights."""
        first = self.chain[0].hidden_input
        return (() if first is None else (first,)) + tuple(p for st in self.chain for p in st.params)

    def input_specs(self, s: Shapes) -> dict[str, TensorDecl]:
        return {p.name: TensorDecl(p.name, p.shape(s), p.dtype) for p in self.params()}

    def output_specs(self, s: Shapes) -> dict[str, TensorDecl]:
        return {o.name: TensorDecl(o.name, o.shape(s), o.dtype) for st in self.chain for o in st.outputs}

    def check_shapes(self, s: Shapes, tokens: int | None = None) -> None:
        """Raise ``UsageError`` unless every stage can serve these sizes (``tokens`` defaults to the shapes')."""
        for st in self.chain:
            if st.check_shapes is not None:
                st.check_shapes(s, s.tokens if tokens is None else tokens)

    def stage_input(self, stage: str, inputs: dict, outputs: dict):
        """The activation ``stage`` consumed: the previous stage's first output, or the case's hidden input."""
        i = self.stages.index(stage)
        return outputs[self.chain[i - 1].outputs[0].name] if i else inputs[self.chain[0].hidden_input.name]

    def make_inputs(self, s: Shapes, seed: int) -> dict[str, torch.Tensor]:
        """Seeded inputs, drawn in spec order so one seed always gives bitwise-identical tensors."""
        validate_seed(seed)
        with phase("inputs"):
            gen = torch.Generator().manual_seed(seed)
            out: dict[str, torch.Tensor] = {}
            pending = None
            for p in self.params():
                if p.draw is None:
                    out[p.name], pending = pending, None
                    continue
                value = p.draw(gen, s)
                if isinstance(value, tuple):
                    value, pending = value
                out[p.name] = value
        return out

    def golden(self, inputs: dict[str, torch.Tensor], s: Shapes) -> dict[str, torch.Tensor]:
        """Every stage's golden outputs, each stage fed the previous stage's golden (the CPU reference chain)."""
        first = self.chain[0].hidden_input
        x = None if first is None else inputs[first.name]
        out = {}
        with phase("golden"):
            for st in self.chain:
                values = st.golden(x, inputs, s)
                out.update(zip((o.name for o in st.outputs), values))
                x = values[0]
        return out


CASES: dict[str, Case] = {c.name: c for c in (
    Case("projection", ("projection",), "W8A8 MTP projection (spec §1)"),
    Case("norm", ("norm",), "shared-head RMSNorm (spec §2.2)"),
    Case("logits", ("logits",), "local logits against a vocab shard (spec §2.1)"),
    Case("shared-head-logits", ("norm", "logits"), "shared-head norm -> local logits (spec §2.3)"),
    Case("tail", ("projection", "logits"), "projection -> local logits (spec §2.4)"),
    Case("tail-norm", ("projection", "norm", "logits"), "projection -> shared-head norm -> local logits"),
    Case("lm-head", ("lm_head",), "TP-sharded full-vocabulary LM head with greedy sampling (spec §3)"),
    Case("tail-lm-head", ("projection", "norm", "lm_head"),
         "projection -> shared-head norm (hidden_out) -> TP-sharded LM head (spec §3)"),
)}


def validate_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise UsageError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    return seed


def get_case(name: str) -> Case:
    try:
        return CASES[name]
    except KeyError:
        raise UsageError(f"unknown case {name!r}; choose one of {', '.join(CASES)}") from None


def leading_activations(specs: dict) -> int:
    """The count of leading activations (token-major ``T`` or per-owner ``R`` rows); ``main_transform_params``
    takes the inputs after them."""
    token_major = [TOKENS in spec.shape or ROWS in spec.shape for spec in specs.values()]
    n = token_major.count(True)
    assert token_major[:n] == [True] * n, "activations must precede weights in spec order"
    return n
