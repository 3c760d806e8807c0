"""User passes in the pipeline: ``extra_passes`` of ``compile()``/``check()``, or ``--pass-plugin FILE``.

A plugin is a Python file defining ``passes(target) -> {phase: [tvm.transform.Pass, ...]}`` (LLVM's
``-load-pass-plugin``). Its passes run first in their phase, one of the optimizing phases (``legalize``,
``fuse``, ``schedule``); they are optional for ``--bisect-limit``, so a bisect can name one of them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Callable

import tvm
from tvm.target import Target

from ..passes.pipeline import OPTIMIZING_PHASES
from ..support.errors import UsageError

ExtraPasses = Mapping[str, list] | Callable[[Target], Mapping[str, list]]


@dataclasses.dataclass(frozen=True)
class PassPlugin:
    """A loaded plugin file; called with the target like any ``extra_passes`` callable."""

    path: Path
    make: Callable[[Target], Mapping[str, list]]

    def __call__(self, target: Target) -> Mapping[str, list]:
        return self.make(target)


def load_pass_plugin(path: str | Path) -> PassPlugin:
    path = Path(path).resolve()
    if not path.is_file():
        raise UsageError(f"pass plugin {path} does not exist")
    spec = importlib.util.spec_from_file_location(f"mtp_pass_plugin_{path.stem}", path)
    if spec is None or path.suffix != ".py":
        raise UsageError(f"pass plugin {path} is not a Python file (.py)")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's file: report its error in one line
        raise UsageError(f"pass plugin {path} failed to load: {type(e).__name__}: {e}") from None
    if not callable(getattr(module, "passes", None)):
        raise UsageError(f"pass plugin {path} defines no passes(target) function")
    return PassPlugin(path, module.passes)


def resolve_extra_passes(extra: ExtraPasses | None, target: Target) -> dict[str, list]:
    """Validated ``{phase: [Pass, ...]}`` (a callable is called with the target first)."""
    if extra is None:
        return {}
    if not isinstance(extra, Mapping):
        extra = extra(target)
    if not isinstance(extra, Mapping):
        raise UsageError("extra passes must map phase names to lists of passes")
    out = {}
    for phase, passes in extra.items():
        if phase not in OPTIMIZING_PHASES:
            raise UsageError(f"extra passes for phase {phase!r}: only {', '.join(OPTIMIZING_PHASES)} take them")
        passes = list(passes)
        bad = [p for p in passes if not isinstance(p, tvm.transform.Pass)]
        if bad:
            raise UsageError(f"extra passes for phase {phase!r} must be tvm.transform.Pass, got {bad[0]!r}")
        out[phase] = passes
    return out


def extra_pass_names(extra: dict[str, list]) -> list[str]:
    return [p.info.name for passes in extra.values() for p in passes]
