"""mtp_tvm: the DeepSeek-V4 MTP decode tail (W8A8 projection -> shared-head norm -> LM-head logits) compiled
with Apache TVM, dumped pass by pass, and golden-checked against torch.

API: ``check(...)`` -> ``CheckResult``; ``compile(...)`` -> ``CompiledCase`` with ``input_specs``,
``output_specs``, ``make_inputs(tokens, seed)``, ``run(inputs) -> outputs`` and ``bind(weights) -> BoundCase``
(weights packed once, ``run(activations)`` in a loop); ``build(out, ...)`` writes a target binary folder;
``load(dir)`` -> ``Artifact`` with the same ``make_inputs``, ``run`` and ``bind``; ``check_artifact(dir)``
golden-checks one; ``localize(..., against=...)`` -> ``LocalizeResult``: the first kernel call that differs from
a reference build; ``bisect_passes(...)`` -> ``BisectResult``: the first pass after which the golden check
fails; ``bench(...)``: TVM against its peers, each in its own process. The same verbs take the user's own model
file (a torch module or a TVMScript IRModule, ``ir/module_file.py``) in place of a case: ``compile(path)`` ->
``CompiledModule``, ``check(path)``, ``build(out, path)``, ``bisect_passes(path)``, ``bench(path)`` (a
``ModuleSpec`` or ``module=`` as well); ``localize(path)``: its first op that differs from eager torch (or,
``against=``, from another build); ``minimize_module(path)``: the smallest piece of its graph that still fails, as a
module file. ``BuildSpec``, ``ModuleSpec`` and ``DebugOptions`` are what the verbs take as dataclasses.
``load_weights(path, case=..., tp=..., rank=...)``: a DeepSeek checkpoint's weights for ``bind``
(``tools/convert/convert.py``); ``read_inputs(path)`` / ``write_inputs(path, arrays)``: the ``.npz`` files of
``mtp-tvm inputs``/``run``, BF16 included.

The names are imported on first use (PEP 562), so ``import mtp_tvm`` and the commands that only read files do
not import TVM or torch.
"""

import importlib

from .support.errors import BuildError, MtpError, UsageError

_LAZY = {  # public name -> the module that defines it
    "build": "artifact.export", "load": "artifact.load", "Artifact": "artifact.load",
    "check_artifact": "artifact.load", "compile": "compiler.driver", "CompiledCase": "compiler.driver",
    "BoundCase": "compiler.runtime", "check": "tools.check.check", "CheckResult": "verify.results",
    "bisect_passes": "tools.bisect.bisection", "BisectResult": "tools.bisect.bisection", "bench": "tools.bench.bench",
    "localize": "tools.check.localize", "LocalizeResult": "tools.check.localize",
    "CompiledModule": "compiler.module_build", "BuildSpec": "compiler.options", "ModuleSpec": "compiler.options",
    "DebugOptions": "compiler.options",
    "minimize_module": "tools.minimize.minimize", "load_weights": "tools.convert.convert",
    "read_inputs": "compiler.tensors", "write_inputs": "compiler.tensors",
}

__all__ = ["check", "CheckResult", "compile", "CompiledCase", "MtpError", "UsageError", "BuildError",
           "build", "load", "Artifact", "check_artifact", "BoundCase", "localize", "LocalizeResult",
           "CompiledModule", "BuildSpec", "ModuleSpec", "DebugOptions", "minimize_module",
           "load_weights", "read_inputs", "write_inputs", "bisect_passes", "BisectResult", "bench"]


_RENAMED = {"localize_module": "localize"}  # old public name -> the one that does its job now (one release)


def __getattr__(name: str):
    if name in _RENAMED:
        import warnings

        warnings.warn(f"mtp_tvm.{name} is deprecated: {_RENAMED[name]}() takes a module file (its path, a ModuleSpec "
                      "or module=) as well as a case", DeprecationWarning, stacklevel=2)
        return __getattr__(_RENAMED[name])
    if name not in _LAZY:
        raise AttributeError(f"module 'mtp_tvm' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value  # the next access is a plain global
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
