"""Environment variables the project reads, validated where they are read: a bad value is one line naming the
variable, the values it takes and the value it has, never a silent default, a false warning or a hang."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..support.errors import UsageError

_WHOLE_NUMBER = re.compile(r"[0-9]+")


def env_int(name: str, low: int, high: int, default: int, why: str = "") -> int:
    """``$name`` as an integer in ``[low, high]`` (``default`` when unset); set but empty, not a whole number
    (``abc``, ``-1``, ``1.5``) or out of range is an error. ``why`` says what the range means."""
    return _env_in_range(name, lambda text: int(text) if _WHOLE_NUMBER.fullmatch(text.strip()) else None,
                         "an integer", low, high, default, why)


def env_float(name: str, low: float, high: float, default: float, why: str = "") -> float:
    """``$name`` as a number in ``[low, high]`` (``default`` when unset); set but not a number in range (``nan``
    is not) is an error. ``why`` says what the range means."""
    return _env_in_range(name, _float_or_none, "a number", low, high, default, why)


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _env_in_range(name: str, parse, what: str, low, high, default, why: str):
    """``$name`` parsed (``parse``: the value, or None where the text is not one) and checked against
    ``[low, high]``; ``default`` when unset."""
    text = os.environ.get(name)
    if text is None:
        return default
    value = parse(text)
    if value is None or not low <= value <= high:
        bound = "{:g}".format if isinstance(low, float) else str  # 1000000 stays 1000000, 60.0 reads 60
        raise UsageError(f"{name} must be {what} in [{bound(low)}, {bound(high)}]{why}, got {text!r}")
    return value


def env_path(name: str) -> Path | None:
    """``$name`` as a folder path, None when unset; set but empty is an error (it would mean the current folder)."""
    text = os.environ.get(name)
    if text is None:
        return None
    if not text.strip():
        raise UsageError(f"{name} is set but empty; unset it or name a folder")
    return Path(text)
