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
    text = os.environ.get(name)
    if text is None:
        return default
    value = int(text) if _WHOLE_NUMBER.fullmatch(text.strip()) else None
    if value is None or not low <= value <= high:
        raise UsageError(f"{name} must be an integer in [{low}, {high}]{why}, got {text!r}")
    return value


def env_float(name: str, low: float, high: float, default: float, why: str = "") -> float:
    """``$name`` as a number in ``[low, high]`` (``default`` when unset); set but not a finite number in range is an
    error. ``why`` says what the range means."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise UsageError(f"{name} must be a number in [{low:g}, {high:g}]{why}, got {text!r}")
    return value


def env_path(name: str) -> Path | None:
    """``$name`` as a folder path, None when unset; set but empty is an error (it would mean the current folder)."""
    text = os.environ.get(name)
    if text is None:
        return None
    if not text.strip():
        raise UsageError(f"{name} is set but empty; unset it or name a folder")
    return Path(text)
