"""The tolerances a golden check judges with, as typed values checked when made: a bad one is a one-line
``UsageError`` before any build, not a TypeError deep inside a comparator. The defaults are the project's
(spec §4.1, §3.3). A case's are ``RatioTolerance`` (every output) and ``LogitsTolerance`` (the LM head); a
module file's, ``ModuleTolerance``. A dict of some fields is read in one place, ``of``. No TVM, torch or numpy
here: the CLI makes these from its flags."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import ClassVar, Self

from ..support.errors import UsageError


def _require_numbers(tolerance) -> None:
    """Every field set is a real number (a string compared with one is a TypeError deep inside the check)."""
    for field in dataclasses.fields(tolerance):
        value = getattr(tolerance, field.name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise UsageError(f"{field.name} must be a number, got {value!r}")


class _FromMapping:
    """``of``: the one reading of a tolerance given as a dict (the Python API's older form, ``repro.json``)."""

    WHAT: ClassVar[str]

    @classmethod
    def of(cls, value: Self | Mapping | None) -> Self:
        """``value`` as this class: None -> the defaults; an instance as it is; a dict of some of its fields
        over the defaults. Anything else, or an unknown key, is a ``UsageError`` naming it."""
        if value is None:
            return cls()
        if type(value) is cls:
            return value
        names = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(value, Mapping):
            raise UsageError(f"{cls.WHAT} must be a {cls.__name__} or a dict with keys among {', '.join(names)}, "
                             f"got {type(value).__name__} {value!r}")
        unknown = sorted(map(str, set(value) - set(names)))
        if unknown:
            raise UsageError(f"unknown {cls.WHAT} {unknown}; choose from {', '.join(names)}")
        return cls(**value)

    @classmethod
    def require(cls, value, where: str) -> None:
        """An options dataclass's field holds exactly this class (the dict was read where the user gave it)."""
        if type(value) is not cls:
            raise UsageError(f"{where} must be a {cls.__name__}, got {type(value).__name__} {value!r}")

    def overrides(self) -> dict:
        """The fields that differ from the defaults (what a user set: the reproducer's command line)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}


@dataclasses.dataclass(frozen=True)
class RatioTolerance(_FromMapping):
    """``ratio_allclose``'s (spec §4.1): a point is an outlier iff ``|a-e| > atol + rtol*|e|``; at most
    ``round(max_error_ratio * numel)`` outliers pass."""

    WHAT: ClassVar[str] = "tolerance"

    atol: float = 1e-2
    rtol: float = 1e-2
    max_error_ratio: float = 0.02

    def __post_init__(self):
        _require_numbers(self)
        if not 0.0 <= self.max_error_ratio <= 1.0:  # NaN fails this too
            raise UsageError(f"max_error_ratio must be in [0, 1], got {self.max_error_ratio}")
        if not all(math.isfinite(t) and t >= 0 for t in (self.atol, self.rtol)):  # NaN would pass every point
            raise UsageError(f"atol and rtol must be finite and >= 0, got atol={self.atol} rtol={self.rtol}")


@dataclasses.dataclass(frozen=True)
class LogitsTolerance(RatioTolerance):
    """The LM-head logits comparator's (spec §3.3): the logits within ``ratio_allclose`` of the reference from
    the device's hidden state (a 1 % outlier budget), then every end-to-end difference from the CPU golden at
    most ``max_e2e_abs_diff``."""

    WHAT: ClassVar[str] = "logits tolerance"

    max_error_ratio: float = 0.01
    max_e2e_abs_diff: float = 0.5

    def __post_init__(self):
        _require_numbers(self)
        if not (math.isfinite(self.max_e2e_abs_diff) and self.max_e2e_abs_diff > 0):
            raise UsageError(f"max_e2e_abs_diff must be finite and > 0, got {self.max_e2e_abs_diff}")
        super().__post_init__()


# torch.testing.assert_close's defaults (atol, rtol) per dtype; integers and booleans must be equal
ASSERT_CLOSE_DEFAULTS = {"float16": (1e-5, 1e-3), "bfloat16": (1e-5, 1.6e-2), "float32": (1e-5, 1.3e-6),
                         "float64": (1e-7, 1e-7)}


@dataclasses.dataclass(frozen=True)
class ModuleTolerance(_FromMapping):
    """A module file's, as ``torch.testing.assert_close`` judges (no outlier budget): ``atol``/``rtol`` for every
    output; None: ``assert_close``'s default for the output's dtype."""

    WHAT: ClassVar[str] = "module tolerance"

    atol: float | None = None
    rtol: float | None = None

    def __post_init__(self):
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, numbers.Real) and not isinstance(value, bool)
                                          and math.isfinite(value) and value >= 0):
                raise UsageError(f"{name} must be a finite number >= 0, got {value!r}")

    def for_dtype(self, dtype: str) -> RatioTolerance:
        """The ``ratio_allclose`` tolerance of an output of ``dtype``: no element may be off. Integers and
        booleans (indices, masks) are always exact: ``atol``/``rtol`` are a float's rounding, not theirs."""
        if dtype not in ASSERT_CLOSE_DEFAULTS:
            return RatioTolerance(0.0, 0.0, max_error_ratio=0.0)
        atol, rtol = ASSERT_CLOSE_DEFAULTS[dtype]
        return RatioTolerance(atol if self.atol is None else float(self.atol),
                              rtol if self.rtol is None else float(self.rtol), max_error_ratio=0.0)
