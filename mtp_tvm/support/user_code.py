"""Calling the user's code (a pass plugin, a module file): it is not trusted to behave, so an exception or a
``sys.exit`` becomes one line naming who failed (``UsageError``), never a silent success or a deep traceback."""

from __future__ import annotations

import hashlib
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
    missing, not ``.py``, or fails while it loads."""
    require_python_file(path, who)
    return run_user_code(f"{who} {path} (loading it)", lambda: import_user_file(path, who))


def require_python_file(path: Path, who: str) -> None:
    """Refuse, naming what it is, a ``path`` that is no Python file: missing, a folder, a FIFO, not ``.py``."""
    if not path.exists():
        raise UsageError(f"{who} {path} does not exist")
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "a FIFO" if path.is_fifo() else "not a regular file"
        raise UsageError(f"{who} {path} is {kind}, not a Python file")
    if path.suffix != ".py":
        raise UsageError(f"{who} {path} is not a Python file (.py)")


def import_user_file(path: Path, who: str) -> ModuleType:
    """Import ``path`` with no guard (``support.user_process`` runs it in a child that reports any way out). It
    stays in ``sys.modules`` under a name of its own path (two files of one stem never replace each other; a
    reload of the same file replaces its entry): TVMScript's parser looks a class up there by its ``__module__``
    whenever it parses one, and a ``module()`` may define its ``@I.ir_module`` when it is called, not only while
    the file loads."""
    path = Path(path).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    spec = importlib.util.spec_from_file_location(f"mtp_{who.replace(' ', '_')}_{path.stem}_{digest}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise
    return module
