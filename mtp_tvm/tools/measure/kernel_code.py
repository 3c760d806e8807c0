"""Per-kernel figures of a run's generated code, for comparing two builds: instructions per kernel in the
assembly (``host.s``), with the families that say which code path a kernel took (FMA, ``vdpbf16ps``,
``vpmaddwd``, ``vpdpwssd``), and lines per kernel of CUDA C (``device_source.cu``).

In ``host.s`` a kernel is an exported function symbol (``__tvm_ffi_<kernel>``, the prefix dropped). The code
TVM splits out of it, a parallel loop body (``.L__tvm_parallel_lambda.N``) or a ``<kernel>_compute_`` helper,
is counted with the one kernel that reaches it; a helper several kernels call (``__tvm_set_raised_N``) is
listed under its own name. An instruction is a line that is not a label, directive or comment.
"""

from __future__ import annotations

import dataclasses
import re

_FAMILIES = {
    "fma": re.compile(r"^v?f(n)?m(add|sub)|^fmla|^fmls"),
    "vdpbf16ps": re.compile(r"^vdpbf16ps"),
    "vpmaddwd": re.compile(r"^vpmaddwd"),
    "vpdpwssd": re.compile(r"^vpdpwssds?"),
    "tdpbf16ps": re.compile(r"^tdpbf16ps"),
    "tdpbssd": re.compile(r"^tdpbssd"),
}
_EXPORT_PREFIX = "__tvm_ffi_"
_SYMBOL = r"[A-Za-z_.$][\w.$]*"
_TYPE = re.compile(rf"^\s*\.type\s+({_SYMBOL}),\s*[@%]function")
_GLOBAL = re.compile(rf"^\s*\.(?:globl|global)\s+({_SYMBOL})")
_LABEL = re.compile(rf"^({_SYMBOL}):")
_REF = re.compile(_SYMBOL)
_KERNEL_CU = re.compile(r'__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\([^;]*\{\s*$')


@dataclasses.dataclass(frozen=True)
class KernelCode:
    """One kernel's size in a generated file: instructions (assembly) or lines (CUDA C), and instruction
    counts per family (assembly only)."""

    name: str
    size: int
    families: dict[str, int] = dataclasses.field(default_factory=dict)


def assembly_kernels(text: str) -> dict[str, KernelCode]:
    """Kernel name -> its instructions in an assembly text (see the module docstring)."""
    lines = text.splitlines()
    functions = {m.group(1) for ln in lines if (m := _TYPE.match(ln))}
    exported = {m.group(1) for ln in lines if (m := _GLOBAL.match(ln))} & functions
    bodies: dict[str, list[str]] = {}
    current = None
    for ln in lines:
        m = _LABEL.match(ln)
        if m and m.group(1) in functions:
            current = bodies.setdefault(m.group(1), [])
        elif ln.lstrip().startswith(".size") and current is not None:
            current = None
        elif current is not None and ln[:1].isspace():
            code = ln.split("#", 1)[0].strip()
            if code and not code.startswith("."):
                current.append(code)
    calls = {f: {r for code in body for r in _REF.findall(code) if r in functions and r != f}
             for f, body in bodies.items()}
    owners: dict[str, set[str]] = {f: set() for f in bodies}
    for root in exported & bodies.keys():
        seen, todo = set(), [root]
        while todo:
            f = todo.pop()
            for g in calls.get(f, ()):
                if g not in seen and g not in exported:
                    seen.add(g)
                    owners[g].add(root)
                    todo.append(g)
    groups: dict[str, list[str]] = {}
    for f in bodies:
        owner = f if f in exported or len(owners[f]) != 1 else next(iter(owners[f]))
        groups.setdefault(owner, []).append(f)
    out = {}
    for owner, members in groups.items():
        codes = [c for f in members for c in bodies[f]]
        mnemonics = [c.split(None, 1)[0] for c in codes]
        fam = {k: n for k, rx in _FAMILIES.items() if (n := sum(1 for mn in mnemonics if rx.match(mn)))}
        name = owner[len(_EXPORT_PREFIX):] if owner.startswith(_EXPORT_PREFIX) else owner
        out[name] = KernelCode(name, len(codes), fam)
    return dict(sorted(out.items()))


def cuda_kernels(text: str) -> dict[str, KernelCode]:
    """Kernel name -> its lines (definition to closing brace) in CUDA C."""
    lines = text.splitlines()
    out = {}
    for i, ln in enumerate(lines):
        m = _KERNEL_CU.search(ln)
        if m:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("}")), len(lines) - 1)
            out[m.group(1)] = KernelCode(m.group(1), end - i + 1)
    return dict(sorted(out.items()))


def kernels(name: str, text: str) -> dict[str, KernelCode] | None:
    """Per-kernel figures of a generated file by its name (None: a file without kernels we count, ``host.ll``)."""
    if name.endswith(".s"):
        return assembly_kernels(text)
    if name.endswith(".cu"):
        return cuda_kernels(text)
    return None
