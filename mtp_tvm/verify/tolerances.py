"""The tolerances a golden check judges with, as typed values checked when made: a bad one is a one-line
``UsageError`` before any build, not a TypeError deep inside a comparator. The defaults are the project's
(spec §4.1, §3.3). A case's are ``RatioTolerance`` (every output) and ``LogitsTolerance`` (the LM head); a
module file's, ``ModuleTolerance``. ``Tolerance`` is what a user asked of every comparison (the CLI's
``--atol``/``--rtol``/``--max-error-ratio``/``--exact``, declared here once), over whichever of those a verb
judges with; it and a dict of some fields are read in one place, ``of``. No TVM, torch or numpy here."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import ClassVar, Self

from ..support.errors import UsageError
from ..support.flags import as_argv, option


def _require_numbers(tolerance) -> None:
    """Every field set is a real number (a string compared with one is a TypeError deep inside the check)."""
    for field in dataclasses.fields(tolerance):
        value = getattr(tolerance, field.name)
        if field.name == "exact":
            if not isinstance(value, bool):
                raise UsageError(f"exact must be True or False, got {value!r}")
        elif value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise UsageError(f"{field.name} must be a number, got {value!r}")


class _FromMapping:
    """``of``: the one reading of a tolerance given as a dict (the Python API's older form, ``repro.json``)."""

    WHAT: ClassVar[str]

    @classmethod
    def of(cls, value: Self | Mapping | None) -> Self:
        """``value`` as this class: None -> the defaults; an instance as it is; a ``Tolerance`` or a dict of some
        of its fields over the defaults. Anything else, or an unknown key, is a ``UsageError`` naming it."""
        if value is None:
            return cls()
        if type(value) is cls:
            return value
        if isinstance(value, Tolerance):
            return cls(**value.given())
        names = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(value, Mapping):
            raise UsageError(f"{cls.WHAT} must be a Tolerance, a {cls.__name__} or a dict with keys among "
                             f"{', '.join(names)}, "
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
    exact: bool = False  # bitwise equality instead (``comparators.bitwise_equal``): the others unused

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
    """A module file's, as ``torch.testing.assert_close`` judges: ``atol``/``rtol`` for every output (None:
    ``assert_close``'s default for the output's dtype), no outlier unless ``max_error_ratio`` allows some;
    ``exact``: bitwise equality."""

    WHAT: ClassVar[str] = "module tolerance"

    atol: float | None = None
    rtol: float | None = None
    max_error_ratio: float = 0.0
    exact: bool = False

    def __post_init__(self):
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, numbers.Real) and not isinstance(value, bool)
                                          and math.isfinite(value) and value >= 0):
                raise UsageError(f"{name} must be a finite number >= 0, got {value!r}")
        self.for_dtype("float32")  # the ratio and exact checked as RatioTolerance checks them

    def for_dtype(self, dtype: str) -> RatioTolerance:
        """The ``ratio_allclose`` tolerance of an output of ``dtype``. Integers and booleans (indices, masks) are
        always exact: ``atol``/``rtol``/``max_error_ratio`` are a float's rounding, not theirs."""
        if dtype not in ASSERT_CLOSE_DEFAULTS:
            return RatioTolerance(0.0, 0.0, max_error_ratio=0.0, exact=self.exact)
        atol, rtol = ASSERT_CLOSE_DEFAULTS[dtype]
        return RatioTolerance(atol if self.atol is None else float(self.atol),
                              rtol if self.rtol is None else float(self.rtol), self.max_error_ratio, self.exact)


_EXACT_HELP = ("bitwise equality instead of a tolerance: every element's bits (FP32; BF16/FP16 widened exactly, so "
               "-0.0 differs from 0.0) against the reference the command compares with: a case's torch golden "
               "(check, bisect), each kernel call against the --against build's (localize); a module file's torch "
               "eager run or, for a TVMScript module, its reference build (check, bisect, minimize), each op against "
               "torch's graph node (localize --module)")


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """What a user asked of every comparison of a verb (check, localize, bisect, minimize): each field given
    replaces that field of the tolerance the verb judges with (a case's ``RatioTolerance`` of every output and
    ``LogitsTolerance`` of the LM head's logits; a module file's ``ModuleTolerance``), the rest keep their
    defaults. The one ``tolerance`` keyword of every verb takes it; the CLI's flags are its fields."""

    atol: float | None = option(None, help="every output's absolute tolerance (a case: ratio_allclose's, the "
                                "LM-head logits' too; a module file: assert_close's, each op's for localize)",
                                type=float, metavar="A", shown="0.01; a module file: its dtype's in assert_close")
    rtol: float | None = option(None, help="every output's relative tolerance (as --atol)", type=float, metavar="R",
                                shown="0.01; a module file: its dtype's in assert_close")
    max_error_ratio: float | None = option(None, help="every output's outlier budget: the fraction of elements "
                                           "allowed beyond atol + rtol*|expected|", type=float, metavar="F",
                                           shown="0.02, LM-head logits 0.01; a module file 0")
    exact: bool = option(False, help=_EXACT_HELP)

    def __post_init__(self):
        if not isinstance(self.exact, bool):
            raise UsageError(f"exact must be True or False, got {self.exact!r}")
        numbers_given = [name for name, value in self.given().items() if name != "exact"]
        if self.exact and numbers_given:
            raise UsageError(f"exact compares bits, so {', '.join(numbers_given)} cannot apply; drop "
                             + ("it" if len(numbers_given) == 1 else "them"))
        RatioTolerance.of(self)  # each number checked as the comparators will read it

    @classmethod
    def restating(cls, tolerance: RatioTolerance | ModuleTolerance) -> Tolerance:
        """The ``Tolerance`` whose fields restate what ``tolerance`` sets apart from its defaults (a reproducer's
        command line)."""
        given = {name: value for name, value in tolerance.overrides().items() if name in cls.__dataclass_fields__}
        return cls(**({"exact": True} if given.get("exact") else given))

    def argv(self) -> list[str]:
        """The flags that restate it."""
        return as_argv(self)

    def given(self) -> dict:
        """The fields the user set (None and False: not set)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) is not None and getattr(self, f.name) is not False}



def parse_logit_perturbation(text: str) -> tuple[int, int, int, float]:
    """``--perturb-logit``'s word ``"OWNER,ROW,COL[,DELTA]"`` (DELTA default 1.0) -> ``check(perturb_logit=...)``:
    a deliberate error in one device logit, to see the logits comparator fail."""
    parts = [p.strip() for p in text.split(",")]
    try:
        if len(parts) not in (3, 4):
            raise ValueError
        return int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3]) if len(parts) == 4 else 1.0
    except ValueError:
        raise UsageError(f"perturbation must be OWNER,ROW,COL[,DELTA] (integers, DELTA a number), got {text!r}"
                         ) from None
