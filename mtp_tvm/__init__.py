"""mtp_tvm: the DeepSeek-V4 MTP decode tail (W8A8 projection -> shared-head norm -> LM-head logits) compiled
with Apache TVM, dumped pass by pass, and golden-checked against torch.

API: ``check(...)`` -> ``CheckResult``; ``compile(...)`` -> ``CompiledCase`` with ``input_specs``,
``output_specs`` and ``run(inputs) -> outputs``; ``build(out, ...)`` writes a target binary folder;
``load(dir)`` -> ``Artifact`` with the same ``run``; ``check_artifact(dir)`` golden-checks one.

Attributes are imported on first use, so ``import mtp_tvm`` (and tuning workers that import one submodule)
do not pay for TVM and torch until they need them.
"""

import importlib

from .errors import BuildError, MtpError, UsageError

_LAZY = {"check": "check", "CheckResult": "check", "compile": "compiler", "CompiledCase": "compiler",
         "build": "artifact", "load": "artifact", "Artifact": "artifact", "check_artifact": "artifact"}

__all__ = ["MtpError", "UsageError", "BuildError", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
