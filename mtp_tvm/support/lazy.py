"""A module imported on its first attribute access, so commands that only read files (``mtp-tvm --help``,
``list``, ``dumps ...``) never pay torch's or TVM's seconds of import: ``torch = lazy_module("torch")`` at the
top of a module that needs torch only inside its functions."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..support.timing import phase


class LazyModule:
    """Stands for module ``name``; the first attribute read imports it (``importlib`` caches it after)."""

    def __init__(self, name: str):
        self._name, self._module = name, None

    def __getattr__(self, attr: str):
        return getattr(self._module or self.load(), attr)

    def load(self) -> ModuleType:
        with phase("import"):
            self._module = importlib.import_module(self._name)
        return self._module

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_module(name: str) -> LazyModule:
    return LazyModule(name)
