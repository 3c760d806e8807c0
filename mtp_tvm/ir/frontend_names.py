"""The frontends' names, importable without TVM (``ir/frontends.py`` maps each to its class), so a mistyped
``--frontend`` is refused before anything loads TVM."""

from __future__ import annotations

from ..support.errors import UsageError

FRONTEND_NAMES = ("relax", "tir", "torch")


def check_frontend(name: str) -> str:
    if name not in FRONTEND_NAMES:
        raise UsageError(f"unknown frontend {name!r}; choose one of {', '.join(FRONTEND_NAMES)}")
    return name
