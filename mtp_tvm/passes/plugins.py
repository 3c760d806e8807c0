"""User passes in the pipeline: ``extra_passes`` of ``compile()``/``check()``, or ``--extra-passes FILE``.

A plugin is a Python file defining ``passes(target) -> {phase: [tvm.transform.Pass, ...]}`` (LLVM's
``-load-pass-plugin``). Its passes run first in their phase, one of the optimizing phases (``legalize``,
``fuse``, ``schedule``); they are optional for ``--bisect-limit``, so a bisect can name one of them.

A plugin is the user's code and is not trusted to behave: an exception, a ``sys.exit`` or a wrong return, at
import or in ``passes()``, is a one-line ``UsageError`` naming the plugin, so it can never end a command as a
silent success (a ``sys.exit`` inside one of its passes: ``compiler.driver``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

import tvm
from tvm.target import Target

from ..passes.pipeline import OPTIMIZING_PHASES
from ..support.errors import UsageError
from ..support.user_code import load_user_file, run_user_code

ExtraPasses = Mapping[str, list] | Callable[[Target], Mapping[str, list]]


@dataclasses.dataclass(frozen=True)
class PassPlugin:
    """A loaded plugin file; called with the target like any ``extra_passes`` callable."""

    path: Path
    make: Callable[[Target], Mapping[str, list]]

    def __call__(self, target: Target) -> Mapping[str, list]:
        return run_user_code(f"pass plugin {self.path}: passes(target)", lambda: self.make(target))


def load_pass_plugin(path: str | Path) -> PassPlugin:
    path = Path(path).resolve()
    module = load_user_file(path, "pass plugin")
    if not callable(getattr(module, "passes", None)):
        raise UsageError(f"pass plugin {path} defines no passes(target) function")
    return PassPlugin(path, module.passes)


def resolve_extra_passes(extra: ExtraPasses | None, target: Target) -> dict[str, list]:
    """Validated ``{phase: [Pass, ...]}`` (a callable is called with the target first)."""
    if extra is None:
        return {}
    who = f"pass plugin {extra.path}: passes(target)" if isinstance(extra, PassPlugin) else "extra passes"
    if not isinstance(extra, Mapping):
        if not callable(extra):
            raise UsageError(f"extra passes must map phase names to lists of passes, or be a function of the "
                             f"target that does, got {type(extra).__name__}")
        extra = extra(target) if isinstance(extra, PassPlugin) else run_user_code("extra_passes(target)",
                                                                                  lambda: extra(target))
    if not isinstance(extra, Mapping):
        raise UsageError(f"{who} must map phase names to lists of passes, got {type(extra).__name__}")
    out = {}
    for phase, passes in extra.items():
        if phase not in OPTIMIZING_PHASES:
            raise UsageError(f"{who} for phase {phase!r}: only {', '.join(OPTIMIZING_PHASES)} take them")
        if isinstance(passes, (str, bytes, tvm.transform.Pass)) or not isinstance(passes, (list, tuple)):
            raise UsageError(f"{who} for phase {phase!r} must be a list of passes, got {type(passes).__name__}")
        bad = [p for p in passes if not isinstance(p, tvm.transform.Pass)]
        if bad:
            raise UsageError(f"{who} for phase {phase!r} must be tvm.transform.Pass, got {bad[0]!r}")
        out[phase] = list(passes)
    return out


def extra_pass_names(extra: dict[str, list]) -> list[str]:
    return [p.info.name for passes in extra.values() for p in passes]
