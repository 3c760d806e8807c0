"""Targets: short names to full TVM targets with the host CPU filled in, and what a CPU target offers the
schedules (``CpuIsa``: vector width, register count, dot-product instructions), read from the target's
``mcpu``/``mattr`` through LLVM, never from the machine that happens to build it.

A bare ``{"kind": "llvm"}`` compiles for generic x86-64 (no AVX2/FMA; about 2x slower), so ``llvm`` always
gets ``mcpu`` read from LLVM's view of this host, and ``mattr`` for the dot-product instructions the host reports
that this ``mcpu`` lacks (``host_dot_features``).
"""

from __future__ import annotations

import dataclasses
import json
import re

import tvm
import tvm_ffi
from tvm.target import Target

from ..support.errors import UsageError, did_you_mean, last_line
from ..support.load_average import usable_cores
from ..support.native_log import native_stderr

CUDA_ARCHS = ("sm_80", "sm_90")


def host_cpu() -> str:
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return cpu if cpu and tvm.target.codegen.llvm_is_valid_cpu(cpu, host_triple()) else "generic"


# /proc/cpuinfo flag -> the LLVM feature of a dot-product instruction the CPU schedules use
HOST_DOT_FLAGS = {"avx512_bf16": "avx512bf16", "avx512_vnni": "avx512vnni", "avx_vnni": "avxvnni",
                  "amx_tile": "amx-tile", "amx_bf16": "amx-bf16", "amx_int8": "amx-int8"}


def host_dot_features(cpu: str, cpuinfo: str | None = None) -> list[str]:
    """``+feature`` for each dot-product instruction this host reports (``/proc/cpuinfo``'s flags) that LLVM's
    ``cpu`` lacks: a VM may show a CPU model that LLVM maps to an older part (a Sapphire Rapids guest seen as
    ``rocketlake``, without AVX512-BF16), and the logits would then take the FMA path on a ``vdpbf16ps`` machine.
    Empty off Linux or x86."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return []
    flags = next((set(line.split(":", 1)[1].split()) for line in cpuinfo.splitlines()
                  if line.startswith("flags") and ":" in line), set())
    triple = host_triple()
    if cpu_arch(triple) != "x86_64":
        return []
    named = Target({"kind": "llvm", "mcpu": cpu, "mtriple": triple})
    return [f"+{feature}" for flag, feature in HOST_DOT_FLAGS.items()
            if flag in flags and not tvm.target.codegen.llvm_cpu_has_features(feature, named)]


def host_target() -> dict:
    """``llvm`` on this host: its CPU as LLVM names it, the dot-product features that name misses, its cores."""
    cpu = host_cpu()
    extra = host_dot_features(cpu) if cpu != "generic" else []
    return {"kind": "llvm", "mcpu": cpu, **({"mattr": extra} if extra else {}), "num-cores": usable_cores()}


def host_triple() -> str:
    return tvm.target.codegen.llvm_get_system_triple()


def target_triple(target: dict) -> str:
    """The LLVM triple a target (as JSON, ``target_json``) compiles for: its ``mtriple``, or this host's."""
    return str(target.get("mtriple") or host_triple())


def cpu_arch(triple: str) -> str:
    return triple.split("-", 1)[0]


def resolve_target(target: str | dict | Target, arch: str = "sm_90") -> Target:
    """``llvm``, ``cuda`` or a target JSON object (string or dict) -> ``Target``."""
    if isinstance(target, Target):
        return target
    if isinstance(target, str) and target.strip().startswith("{"):
        try:
            target = json.loads(target)
        except json.JSONDecodeError as e:
            raise UsageError(f"malformed target JSON: {e.msg} at char {e.pos}") from None
    if target == "llvm":
        target = host_target()
    elif target == "cuda":
        if arch not in CUDA_ARCHS:
            raise UsageError(f"unsupported CUDA arch {arch!r}; choose one of {', '.join(CUDA_ARCHS)}")
        # the static shared memory a block may use on every supported arch (dlight sizes its tiles by it)
        target = {"kind": "cuda", "arch": arch, "max_shared_memory_per_block": 49152}
    if not isinstance(target, dict):
        classic = classic_as_json(target) if isinstance(target, str) else None
        raise UsageError(f"unknown target {target!r}; use llvm, cuda or a target JSON object"
                         + (f", here '{json.dumps(classic)}'" if classic else ""))
    with native_stderr():  # LLVM prints its own complaint about an mcpu: ours says it in one line
        try:
            target = Target(target)
        except Exception as e:  # TVM raises ValueError/TVMError with multi-line text
            raise UsageError(f"invalid target {json.dumps(target)}: {last_line(e)}") from None
        _check_mcpu(target)
    return target


def classic_as_json(text: str) -> dict | None:
    """TVM's old target string (``llvm -mcpu=haswell -mattr=+avx2,+fma``) as the JSON object it now takes, to
    show in the refusal; None when ``text`` is not of that form."""
    kind, *flags = text.split()
    if not flags or kind not in ("llvm", "cuda", "c") or not all(re.fullmatch(r"-[\w-]+(=\S+)?", f) for f in flags):
        return None
    out: dict = {"kind": kind}
    for flag in flags:
        key, _, value = flag[1:].partition("=")
        out[key] = (value.split(",") if "," in value else int(value) if value.isdigit() else value) if value else True
    return out


def _check_mcpu(target: Target) -> None:
    """An ``mcpu`` LLVM does not know only gets a warning from LLVM and then generic code: refuse it."""
    mcpu = str(target.attrs.get("mcpu", "")) if target.kind.name == "llvm" else ""
    triple = target_triple(target_json(target))
    if mcpu and not tvm.target.codegen.llvm_is_valid_cpu(mcpu, triple):
        known = [str(c) for c in tvm.target.codegen.llvm_get_cpu_archlist(target)]
        raise UsageError(f"unknown mcpu {mcpu!r} for {triple}" + did_you_mean(mcpu, known, n=6, cutoff=0.4)
                         + f" ({len(known)} CPUs known to LLVM, e.g. haswell, znver3, znver4, sapphirerapids)")


def is_gpu(target: Target) -> bool:
    """Whether kernels for ``target`` need GPU thread bindings (CUDA)."""
    return target.kind.name == "cuda"


@dataclasses.dataclass(frozen=True)
class CpuIsa:
    """What a CPU target offers a GEMM schedule. ``vector_bits`` and ``vector_registers`` bound the register
    tile; ``bf16_dot`` is AVX512-BF16 (``vdpbf16ps``); ``int8_dot`` names the integer dot product family:
    ``vnni`` (AVX512-VNNI or AVX-VNNI), ``pmaddwd`` (AVX2/AVX-512BW ``vpmaddwd``), or None; ``bf16_tile`` and
    ``int8_tile`` are AMX-BF16 and AMX-INT8 (``tdpbf16ps``, ``tdpbssd`` on tile registers); ``zen``: the
    generation of the AMD Zen core the target's ``mcpu`` names (``znver5``: 5), 0 for any other CPU: Zen's
    prefetchers want less software prefetch than an Intel core's, and less on Zen 4 than on Zen 5
    (``schedule.bf16_dot.weight_prefetch``)."""

    name: str
    vector_bits: int
    vector_registers: int
    fma: bool
    bf16_dot: bool
    int8_dot: str | None
    bf16_tile: bool = False
    int8_tile: bool = False
    zen: int = 0

    @property
    def fp32_lanes(self) -> int:
        return self.vector_bits // 32


def zen_generation(mcpu: str) -> int:
    """``znver4`` -> 4; 0 for a CPU name that is not a Zen core's."""
    generation = mcpu.removeprefix("znver")
    return int(generation) if generation != mcpu and generation.isdigit() else 0


def cpu_isa(target: Target) -> CpuIsa:
    """The ISA profile of an ``llvm`` target, from the features LLVM derives for its ``mcpu``/``mattr``."""
    def has(feature: str) -> bool:
        return bool(tvm.target.codegen.target_has_features(feature, target))

    plain = target_json(target)
    if cpu_arch(target_triple(plain)) == "aarch64":
        return CpuIsa("neon", 128, 32, True, False, None)  # no NEON dot-product kernels here: FMA paths
    zen = zen_generation(str(plain.get("mcpu", "")))
    if has("avx512f"):
        vnni = has("avx512vnni")
        tiles = has("amx-tile")
        return CpuIsa("avx512", 512, 32, True, has("avx512bf16"), "vnni" if vnni else "pmaddwd" if has("avx512bw")
                      else None, tiles and has("amx-bf16"), tiles and has("amx-int8"), zen=zen)
    if has("avx2"):
        return CpuIsa("avx2", 256, 16, has("fma"), False, "vnni" if has("avxvnni") else "pmaddwd", zen=zen)
    return CpuIsa("sse", 128, 16, False, False, None)


def target_name(target: Target) -> str:
    return target.kind.name


def target_json(target: Target) -> dict:
    """The target as plain JSON (what manifests and reports store)."""
    def plain(v):
        if isinstance(v, (int, float, str, bool)):
            return v
        return [plain(x) for x in v] if isinstance(v, (list, tuple, tvm_ffi.Array)) else str(v)

    return {k: plain(v) for k, v in target.export().items()
            if k not in ("host", "keys", "features")} | {"kind": target.kind.name}


def device_for(target: Target):
    """The runtime device for a target, or a clear error when it is not present."""
    dev = tvm.cuda(0) if is_gpu(target) else tvm.cpu(0)
    if not dev.exist:
        raise UsageError(f"no {target.kind.name} device on this machine: cannot run (build with `mtp-tvm build` "
                         "and run it where the device is)")
    return dev


def runs_here(target: Target) -> bool:
    """Whether a build for ``target`` runs in this process: a CPU target for this host's architecture (an
    ``mtriple`` for another is a cross build)."""
    return target.kind.name == "llvm" and cpu_arch(target_triple(target_json(target))) == cpu_arch(host_triple())


def require_runs_here(target) -> None:
    """A check runs what it builds: a target this machine can build but not run (another CPU, C source) is
    refused before the build, pointing to ``build``."""
    if is_gpu(target):
        device_for(target)  # no GPU: its own message
    elif not runs_here(target):
        what = target.kind.name + (f" for {target_triple(target_json(target))}" if target.kind.name == "llvm" else "")
        raise UsageError(f"target {what} builds here but cannot run on this machine "
                         f"({host_triple()}); build it with `mtp-tvm build --target ... --out DIR` and run or check "
                         "the artifact where it runs")
