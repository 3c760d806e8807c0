"""The cases: each is a chain of named stages, and everything else (inputs, outputs, golden, Relax module)
is derived from that chain, so a new case is one line and a new stage is one ``Stage`` entry.

Stages, in the order the MTP decode tail runs them:

- ``projection``: ``e_proj(enorm(hidden)) + h_proj(hnorm(prev))`` in W8A8 (spec §1), out ``hidden_states_out``;
- ``norm``: the shared-head RMSNorm (spec §2.2), out ``normed_hidden``;
- ``logits``: local logits against one vocab shard (spec §2.1), out ``candidate_logits``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

from . import golden
from .config import Shapes
from .errors import UsageError


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One named tensor of a case. ``shape`` names the token dim ``"T"`` so it can be shown symbolically."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str

    def concrete(self, tokens: int) -> tuple[int, ...]:
        return tuple(tokens if d == "T" else d for d in self.shape)

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


def _pair(name: str):
    """The int8 weight of a pair draws both tensors; its scale then reads the cached second half."""
    return (Param(f"{name}_w", _DD, "int8", lambda g, s: _int8_weight_pair(g, s)),
            Param(f"{name}_w_scale", _D, "float32", None))


@dataclasses.dataclass(frozen=True)
class Stage:
    """One kernel of the tail: its extra inputs (spec order), its output, and its torch golden."""

    name: str
    params: tuple[Param, ...]
    output: str
    output_dtype: str
    output_cols: Callable[[Shapes], int]
    golden: Callable[[torch.Tensor, dict[str, torch.Tensor], Shapes], torch.Tensor]


STAGES: dict[str, Stage] = {
    "projection": Stage(
        "projection",
        (Param("hidden_states", _TD, "bfloat16", _activation),
         Param("prev_hidden_states", _TD, "bfloat16", _activation),
         Param("enorm_w", _D, "float32", _ones), Param("hnorm_w", _D, "float32", _ones),
         *_pair("e_proj"), Param("e_proj_smooth", _D, "float32", _ones),
         *_pair("h_proj"), Param("h_proj_smooth", _D, "float32", _ones)),
        "hidden_states_out", "bfloat16", lambda s: s.hidden,
        lambda _x, t, s: golden.mtp_projection(t, s.eps)),
    "norm": Stage(
        "norm", (Param("shared_head_norm_w", _D, "float32", _ones),),
        "normed_hidden", "bfloat16", lambda s: s.hidden,
        lambda x, t, s: golden.shared_head_norm(x, t["shared_head_norm_w"], s.eps)),
    "logits": Stage(
        "logits", (Param("lm_head_weight", lambda s: (s.vocab_shard, s.hidden), "bfloat16", _lm_head_weight),),
        "candidate_logits", "float32", lambda s: s.vocab_shard,
        lambda x, t, _s: golden.local_logits(x, t["lm_head_weight"])),
}

HIDDEN_INPUT = Param("hidden_states", _TD, "bfloat16", _activation)


@dataclasses.dataclass(frozen=True)
class Case:
    """A chain of stages compiled into one module; each stage's output is also a module output."""

    name: str
    stages: tuple[str, ...]
    description: str

    @property
    def chain(self) -> tuple[Stage, ...]:
        return tuple(STAGES[n] for n in self.stages)

    def params(self) -> tuple[Param, ...]:
        """Inputs in spec order: the hidden activation (unless the projection makes it), then stage weights."""
        first = () if self.stages[0] == "projection" else (HIDDEN_INPUT,)
        return first + tuple(p for st in self.chain for p in st.params)

    def input_specs(self, s: Shapes) -> dict[str, TensorSpec]:
        return {p.name: TensorSpec(p.name, p.shape(s), p.dtype) for p in self.params()}

    def output_specs(self, s: Shapes) -> dict[str, TensorSpec]:
        return {st.output: TensorSpec(st.output, ("T", st.output_cols(s)), st.output_dtype) for st in self.chain}

    def make_inputs(self, s: Shapes, seed: int) -> dict[str, torch.Tensor]:
        """Seeded inputs, drawn in spec order so one seed always gives bitwise-identical tensors."""
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
        """Every stage's golden output, each stage fed the previous stage's golden (the CPU reference chain)."""
        x = inputs.get("hidden_states")
        out = {}
        for st in self.chain:
            x = st.golden(x, inputs, s)
            out[st.output] = x
        return out


CASES: dict[str, Case] = {c.name: c for c in (
    Case("projection", ("projection",), "W8A8 MTP projection (spec §1)"),
    Case("norm", ("norm",), "shared-head RMSNorm (spec §2.2)"),
    Case("logits", ("logits",), "local logits against a vocab shard (spec §2.1)"),
    Case("shared-head-logits", ("norm", "logits"), "shared-head norm -> local logits (spec §2.3)"),
    Case("tail", ("projection", "logits"), "projection -> local logits (spec §2.4)"),
    Case("tail-norm", ("projection", "norm", "logits"), "projection -> shared-head norm -> local logits"),
)}


def get_case(name: str) -> Case:
    try:
        return CASES[name]
    except KeyError:
        raise UsageError(f"unknown case {name!r}; choose one of {', '.join(CASES)}") from None
