"""mtp_tvm: the DeepSeek-V4 MTP decode tail (W8A8 projection -> shared-head norm -> LM-head logits) compiled
with Apache TVM, dumped pass by pass, and golden-checked against torch.

API: ``check(...)`` -> ``CheckResult``; ``compile(...)`` -> ``CompiledCase`` with ``input_specs``,
``output_specs``, ``run(inputs) -> outputs`` and ``bind(weights) -> BoundCase`` (weights packed once,
``run(activations)`` in a loop); ``build(out, ...)`` writes a target binary folder; ``load(dir)`` ->
``Artifact`` with the same ``run`` and ``bind``; ``check_artifact(dir)`` golden-checks one;
``localize(..., against=...)`` -> ``LocalizeResult``: the first kernel call that differs from a reference build.
"""

from .artifact.export import build
from .artifact.load import Artifact, check_artifact, load
from .compiler.driver import CompiledCase, compile
from .compiler.runtime import BoundCase
from .support.errors import BuildError, MtpError, UsageError
from .tools.check import check
from .tools.localize import LocalizeResult, localize
from .verify.results import CheckResult

__all__ = ["check", "CheckResult", "compile", "CompiledCase", "MtpError", "UsageError", "BuildError",
           "build", "load", "Artifact", "check_artifact", "BoundCase", "localize",
           "LocalizeResult"]
