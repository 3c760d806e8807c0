"""Target resolution: short names to full TVM targets, with the host CPU filled in.

A bare ``{"kind": "llvm"}`` compiles for generic x86-64 (no AVX2/FMA; about 2x slower, cookbook §"basics"),
so ``llvm`` always gets ``mcpu`` read from LLVM's view of this host.
"""

from __future__ import annotations

import json
import os

import tvm
from tvm.target import Target

from ..support.errors import UsageError, last_line

CUDA_ARCHS = ("sm_80", "sm_90")


def host_cpu() -> str:
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return cpu if cpu and tvm.target.codegen.llvm_is_valid_cpu(cpu, host_triple()) else "generic"


def host_triple() -> str:
    return tvm.target.codegen.llvm_get_system_triple()


def target_triple(target: dict) -> str:
    """The LLVM triple a target (as JSON, ``target_json``) compiles for: its ``mtriple``, or this host's."""
    return str(target.get("mtriple") or host_triple())


def cpu_arch(triple: str) -> str:
    return triple.split("-", 1)[0]


def resolve_target(spec: str | dict | Target, arch: str = "sm_90") -> Target:
    """``llvm``, ``cuda`` or a target JSON object (string or dict) -> ``Target``."""
    if isinstance(spec, Target):
        return spec
    if isinstance(spec, str) and spec.strip().startswith("{"):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise UsageError(f"malformed target JSON: {e.msg} at char {e.pos}") from None
    if spec == "llvm":
        spec = {"kind": "llvm", "mcpu": host_cpu(), "num-cores": os.cpu_count() or 1}
    elif spec == "cuda":
        if arch not in CUDA_ARCHS:
            raise UsageError(f"unsupported CUDA arch {arch!r}; choose one of {', '.join(CUDA_ARCHS)}")
        spec = {"kind": "cuda", "arch": arch}
    if not isinstance(spec, dict):
        raise UsageError(f"unknown target {spec!r}; use llvm, cuda or a target JSON object")
    try:
        return Target(spec)
    except Exception as e:  # TVM raises ValueError/TVMError with multi-line text
        raise UsageError(f"invalid target {json.dumps(spec)}: {last_line(e)}") from None


def target_name(target: Target) -> str:
    return target.kind.name


def target_json(target: Target) -> dict:
    """The target as plain JSON (what manifests and reports store)."""
    return {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in target.export().items()
            if k not in ("host", "keys", "features")} | {"kind": target.kind.name}


def device_for(target: Target):
    """The runtime device for a target, or a clear error when it is not present."""
    dev = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    if not dev.exist:
        raise UsageError(f"no {target.kind.name} device on this machine: cannot run (build with `mtp-tvm build` "
                         "and run it where the device is)")
    return dev


def runs_here(target: Target) -> bool:
    """Whether a build for ``target`` runs in this process: a CPU target for this host's architecture (an
    ``mtriple`` for another is a cross build)."""
    return target.kind.name == "llvm" and cpu_arch(target_triple(target_json(target))) == cpu_arch(host_triple())
