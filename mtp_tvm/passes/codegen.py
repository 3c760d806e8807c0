"""The generated code of a build, by name: the host module's LLVM IR and its assembly, and a GPU build's device
source. Shared by the dumps (``host.ll``/``host.s``/``device_source.cu``) and the artifacts (``source/``). And
the kernel launches one call of a GPU build makes (``kernel_launches``).
"""

from __future__ import annotations

import collections
import dataclasses
import re
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


@dataclasses.dataclass(frozen=True)
class Launches:
    """The kernel launches of one call of ``main`` on a GPU: ``direct`` launched one by one, ``graphs`` CUDA graph
    replays (``BuildSpec.cuda_graph``) holding ``in_graphs`` kernels; ``per_function`` the kernels each PrimFunc
    launches (a schedule may split one PrimFunc into several)."""

    direct: int
    graphs: int
    in_graphs: int
    per_function: dict[str, int]

    @property
    def kernels(self) -> int:
        return self.direct + self.in_graphs

    def describe(self) -> str:
        graphs = f", {self.graphs} CUDA graph(s) holding {self.in_graphs}" if self.graphs else ""
        return f"{self.kernels} kernels per call: {self.direct} launched directly{graphs}"


_KERNEL = re.compile(r'__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(')
_CALL = re.compile(r"call\s+(\S+)\s+in:")
_GRAPH_FUNCTION = re.compile(r"^@(main_cuda_graph_capture\d*):", re.M)


def kernel_launches(ex: tvm.runtime.Executable, source: str, branches: dict[str, int] | None = None) -> Launches:
    """What ``main`` launches per call, read from the VM's code (``as_text``) and the device source: each call of
    a PrimFunc launches its kernels (``<func>_kernel``, ``<func>_kernel_1``, ...), inside a captured graph or not;
    a PrimFunc of ``branches[func]`` alternative kernel sets (one per token-count branch: a GPU GEMV's decode
    sizes) launches one set. No control flow in ``main``, so every call runs once."""
    found = collections.Counter(re.sub(r"_kernel(_\d+)?$", "", k) for k in set(_KERNEL.findall(source)))
    per_function = {f: n // (branches or {}).get(f, 1) for f, n in found.items()}
    text = ex.as_text()

    def launched(function: str) -> int:
        body = text.split(f"@{function}:", 1)[1].split("\n@", 1)[0]
        return sum(per_function[c] for c in _CALL.findall(body) if c in per_function)

    graphs = _GRAPH_FUNCTION.findall(text)
    return Launches(launched("main"), len(graphs), sum(launched(g) for g in graphs), dict(per_function))
