"""Calling the user's code (a pass plugin, a module file): it is not trusted to behave, so an exception or a
``sys.exit`` becomes one line naming who failed (``UsageError``), never a silent success or a deep traceback."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

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


def load_user_file(path: Path, who: str) -> ModuleType:
    """The Python file ``path`` (a ``who``: "pass plugin", "module file") imported, refused in one line when it is
    missing, not ``.py``, or fails while it loads. It is in ``sys.modules`` while it loads, so TVMScript's parser
    finds the source of what it defines."""
    if not path.is_file():
        raise UsageError(f"{who} {path} does not exist")
    spec = importlib.util.spec_from_file_location(f"mtp_{who.replace(' ', '_')}_{path.stem}", path)
    if spec is None or path.suffix != ".py":
        raise UsageError(f"{who} {path} is not a Python file (.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        run_user_code(f"{who} {path} (loading it)", lambda: spec.loader.exec_module(module))
    finally:
        sys.modules.pop(spec.name, None)
    return module
