"""mtp_tvm: the DeepSeek-V4 MTP decode tail (W8A8 projection -> shared-head norm -> LM-head logits) compiled
with Apache TVM, dumped pass by pass, and golden-checked against torch.

API: ``check(...)`` -> ``CheckResult``; ``compile(...)`` -> ``CompiledCase`` with ``input_specs``,
``output_specs`` and ``run(inputs) -> outputs``; ``build(out, ...)`` writes a target binary folder;
``load(dir)`` -> ``Artifact`` with the same ``run``; ``check_artifact(dir)`` golden-checks one.
"""

from .artifact import Artifact, build, check_artifact, load
from .check import CheckResult, check
from .compiler import CompiledCase, compile
from .errors import BuildError, MtpError, UsageError

__all__ = ["check", "CheckResult", "compile", "CompiledCase", "MtpError", "UsageError", "BuildError",
           "build", "load", "Artifact", "check_artifact"]
