"""Ahead-of-time CUDA device code: nvcc turns the generated CUDA C into one fatbin holding SASS for every
requested arch, and ``ptxas -v`` reports each kernel's registers, shared memory and spills.

TVM 0.27 embeds CUDA *source* in an exported library and compiles it when the library is loaded, so
the loading machine would need NVRTC or nvcc. A fatbin of SASS needs only the driver. No fast math:
the same numerics as TVM's default NVRTC path, which the goldens were checked against.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

from ..support.errors import BuildError

KERNEL_SOURCE = "kernels.cu"
FATBIN = "kernels.fatbin"
NVCC_FLAGS = (
    "--fatbin", "-O3", "-w",
    "-compress-mode=none",  # keep every cubin a plain ELF inside the fatbin (readable without cuobjdump)
    "--expt-relaxed-constexpr",
    # TVM's own nvcc flags (tvm.support.nvcc): let the generated code use the half/bf16 operators
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "--ptxas-options=-v",
)


@dataclasses.dataclass(frozen=True)
class KernelResources:
    """What ``ptxas -v`` says about one kernel on one arch (static shared memory only: dynamic shared memory
    is a launch parameter)."""

    registers: int
    shared_memory_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_frame_bytes: int
    barriers: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def blocks_per_sm(self, threads: int) -> int:
        """Resident blocks of ``threads`` threads one SM holds by these registers and this shared memory, on
        sm_80/sm_90 (64K registers allocated per warp in units of 256, 227 KB of shared memory a block, 32
        blocks, 2048 threads): the occupancy a memory-bound kernel needs to keep enough loads in flight."""
        warps = -(-threads // 32)
        per_warp = -(-max(self.registers, 1) * 32 // 256) * 256
        limits = [65536 // (per_warp * warps), 32, 2048 // threads]
        if self.shared_memory_bytes:
            limits.append(232448 // self.shared_memory_bytes)
        return min(limits)


@dataclasses.dataclass(frozen=True)
class PtxMix:
    """The instructions of one kernel's PTX that say how it streams memory: global loads (all, 128-bit ones,
    and scalar FP32 ones: an epilogue's scales), barriers, warp shuffles, ``dp4a``."""

    global_loads: int
    global_loads_128: int
    global_loads_f32: int
    barriers: int
    shuffles: int
    dp4a: int


_PTX_ENTRY = re.compile(r"^\.(?:visible\s+)?\.entry\s+(\w+)\(.*?^\}", re.S | re.M)


def ptx_mix(ptx: str) -> dict[str, PtxMix]:
    """Per kernel (``.entry``) of a PTX file, its ``PtxMix``."""
    def count(pattern: str, body: str) -> int:
        return len(re.findall(pattern, body))

    return {m.group(1): PtxMix(count(r"\bld\.global\b", m.group(0)),
                               count(r"\bld\.global(?:\.\w+)*\.v4\.(?:u32|b32|f32|s32)\b", m.group(0)),
                               count(r"\bld\.global(?:\.nc)?\.f32\b", m.group(0)),
                               count(r"\b(?:bar|barrier)\.(?:sync|cta)", m.group(0)),
                               count(r"\bshfl\.", m.group(0)), count(r"\bdp4a\.", m.group(0)))
            for m in _PTX_ENTRY.finditer(ptx)}


@dataclasses.dataclass(frozen=True)
class DeviceBinary:
    """A fatbin for ``archs``, the PTX nvcc made on the way, and per kernel per arch resources."""

    fatbin: bytes
    archs: tuple[str, ...]
    ptx: dict[str, str]
    kernels: dict[str, dict[str, KernelResources]]
    command: tuple[str, ...]
    nvcc_version: str


def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release [\d.]+, V([\d.]+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1]


def _gencode(arch: str) -> list[str]:
    return ["-gencode", f"arch=compute_{arch.removeprefix('sm_')},code={arch}"]


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_info(text: str) -> dict[str, dict[str, KernelResources]]:
    """``ptxas -v`` output -> {kernel: {arch: KernelResources}}. Lines follow an entry's ``Compiling entry
    function`` line until the next one; ``smem`` is only printed when a kernel has shared memory."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    current = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = found.setdefault((m.group(1), m.group(2)), {"shared_memory_bytes": 0})
            continue
        if current is None:
            continue
        if m := _FRAME.search(line):
            current.update(stack_frame_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)),
                           spill_load_bytes=int(m.group(3)))
        if m := _USED.search(line):
            current["registers"] = int(m.group(1))
            current["barriers"] = int(b.group(1)) if (b := _BARRIERS.search(line)) else 0
            if s := _SMEM.search(line):
                current["shared_memory_bytes"] = int(s.group(1))
    kernels: dict[str, dict[str, KernelResources]] = {}
    for (kernel, arch), fields in sorted(found.items()):
        try:
            kernels.setdefault(kernel, {})[arch] = KernelResources(**fields)
        except TypeError:
            raise BuildError(f"ptxas -v printed no complete resource report for {kernel} on {arch}") from None
    return kernels


def compile_fatbin(source: str, archs: tuple[str, ...], kernel_names: list[str], workdir: Path) -> DeviceBinary:
    """Compile ``source`` for every arch in ``archs`` into one fatbin; every kernel in ``kernel_names`` must
    have a ptxas report for every arch (the check that nothing was silently left out)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise BuildError("nvcc not found on PATH: CUDA builds compile their device code ahead of time with nvcc")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / KERNEL_SOURCE).write_text(source)
    (workdir / "nvcc-keep").mkdir(exist_ok=True)
    command = ("nvcc", *NVCC_FLAGS, *(g for arch in archs for g in _gencode(arch)), "-o", FATBIN, KERNEL_SOURCE)
    proc = subprocess.run([nvcc, *command[1:], "--keep", "--keep-dir=nvcc-keep"], cwd=workdir,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [ln for ln in (proc.stderr + proc.stdout).splitlines() if "error" in ln] or ["(no error line)"]
        raise BuildError(f"nvcc failed for {', '.join(archs)}: {errors[0].strip()}")
    kernels = parse_ptxas_info(proc.stderr + proc.stdout)
    missing = [f"{k} on {a}" for k in kernel_names for a in archs if a not in kernels.get(k, {})]
    if missing:
        raise BuildError(f"ptxas reported no resources for {', '.join(missing)}")
    stem = Path(KERNEL_SOURCE).stem  # nvcc --keep names the PTX kernels.ptx, or kernels.compute_XX.ptx per arch
    ptx = {arch: (workdir / "nvcc-keep" / (f"{stem}.ptx" if len(archs) == 1 else
                                           f"{stem}.compute_{arch.removeprefix('sm_')}.ptx")).read_text()
           for arch in archs}
    return DeviceBinary((workdir / FATBIN).read_bytes(), archs, ptx, kernels, command, nvcc_version(nvcc))
