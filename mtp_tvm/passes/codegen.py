"""The generated code of a build, by name: the host module's LLVM IR and its assembly, and a GPU build's device
source. Shared by the dumps (``host.ll``/``host.s``/``device_source.cu``) and the artifacts (``source/``).
"""

from __future__ import annotations

from pathlib import Path

import tvm


def generated_code(executable, device_source: str | None = None) -> dict[str, str]:
    """The final code of a build, file name -> text, named as in an artifact's ``source/``: the LLVM IR of the
    host module (on a CPU target it holds the kernels; ``finish`` adds its assembly) and a GPU build's device
    source."""
    files: dict[str, str] = {}
    for i, mod in enumerate(m for m in executable.mod.imports if m.kind == "llvm"):
        files[f"host{f'_{i}' if i else ''}.ll"] = mod.inspect_source("ll")
    if device_source is not None:
        files["device_source.cu"] = device_source
    return files


def write_assembly(ll_file: Path) -> Path:
    """Write the assembly of an LLVM IR file next to it (``host.ll`` -> ``host.s``). The IR is parsed into a
    fresh module in its own LLVM context, so this may run on a thread while the build's own module is JIT
    compiled; the text equals ``inspect_source("asm")`` of the built module (same IR, same target metadata)."""
    out = ll_file.with_suffix(".s")
    out.write_text(tvm.runtime.load_module(str(ll_file)).inspect_source("asm"))
    return out


def device_source(ex: tvm.runtime.Executable) -> str:
    """The generated device code (CUDA C) of a Relax build: the host module's imported device module(s)."""
    return "\n".join(m.inspect_source() for host in ex.mod.imports for m in host.imports)
