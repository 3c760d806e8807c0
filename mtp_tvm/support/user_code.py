"""Calling the user's code (a pass plugin, a module file): it is not trusted to behave, so an exception or a
``sys.exit`` becomes one line naming who failed (``UsageError``), never a silent success or a deep traceback."""

from __future__ import annotations

from collections.abc import Callable

from .errors import UsageError


def run_user_code(who: str, call: Callable):
    """``call()``, with any exception or ``SystemExit`` it raises as one line naming ``who`` (Ctrl-C stays
    an interrupt)."""
    try:
        return call()
    except SystemExit as e:
        raise UsageError(f"{who} called sys.exit({e.code!r}); user code must return, not exit") from None
    except Exception as e:  # the user's code: report its error in one line
        raise UsageError(f"{who} failed: {type(e).__name__}: {e}") from None
