"""The ISA a peer races in: an AVX2 build of TVM races AVX2 peers, and every peer says which ISA it ran.

``PEER_ISA_ENV``: what keeps each library a peer calls to an ISA, set in the peer's worker before it imports any
of them (``bench`` passes it to the peers of a build whose target ISA has an entry; a native build keeps the
native peers). ``ATEN_CPU_CAPABILITY`` alone is not enough: ATen's own kernels and inductor's vector ISA honour it,
but torch's BF16 GEMM still runs oneDNN's AMX kernel and its FP32 GEMM MKL's AVX-512 one, and inductor compiles its
kernels with ``-march=native``.

``ran_isa``: what the peer ran, read from the code that ran rather than from the settings: ATen's dispatch level,
the kernels oneDNN and MKL name in their verbose lines during one call at every T, the instructions of the
kernels inductor compiled and loaded (``objdump``), OpenBLAS's kernel family and numpy's enabled dispatch targets.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable

ISAS = ("sse", "avx2", "avx512", "amx")  # narrowest first
PEER_ISA_ENV: dict[str, dict[str, str]] = {
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",  # ATen's kernels; inductor's vector ISA (``cpu_vec_isa.pick_vec_isa``)
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "TORCHINDUCTOR_CPP_MARCH": "haswell",  # inductor's kernels are built with -march=native otherwise
        "OPENBLAS_CORETYPE": "Haswell",
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR",
    },
}
TORCH_LIBRARIES = ("aten", "onednn", "mkl")
INDUCTOR = "inductor"
NUMPY_LIBRARIES = ("openblas", "numpy")


def peer_env(isa: str | None) -> dict[str, str]:
    """The environment of a peer's worker that races a build of ``isa`` (empty: native)."""
    return PEER_ISA_ENV.get(isa, {}) if isa else {}


def held_to(isa: str | None) -> str | None:
    """The ISA a build of ``isa`` holds its peers to (an AVX2 build races AVX2 peers); None: native peers."""
    return isa if isa in PEER_ISA_ENV else None


def wider(ran: str | None, isa: str) -> bool:
    """Whether ``ran`` is an ISA wider than ``isa``."""
    return ran is not None and ISAS.index(ran) > ISAS.index(isa)


def _named(text: str) -> str | None:
    """The ISA a kernel's or library's own name for its code says (oneDNN's ``brg_matmul:avx10_1_512_amx``,
    MKL's ``Intel(R) AVX2``), or None where it names none (oneDNN's ``ref``)."""
    t = text.lower()
    for isa, words in (("amx", ("amx",)), ("avx512", ("avx512", "avx-512", "avx10")), ("avx2", ("avx2",)),
                       ("sse", ("sse",))):
        if any(w in t for w in words):
            return isa
    return None


_MKL_ISA = re.compile(r"Extensions[^(]*\(Intel\(R\) ([^)]+)\)")  # its header: "... (Intel(R) AVX2) enabled ..."
_AMX = re.compile(r"%tmm\d|\btile(loadd|stored|cfg|zero)|\bldtilecfg")
_AVX512 = re.compile(r"%zmm\d|%k[1-7]\b|%[xy]mm(1[6-9]|2\d|3[01])\b")


@contextlib.contextmanager
def _stdout_captured():
    """fd 1 into a file while the block runs (oneDNN and MKL print their verbose lines with C stdio); yields a
    callable returning the text."""
    libc = ctypes.CDLL(None)
    with tempfile.TemporaryFile() as f:
        saved = os.dup(1)
        libc.fflush(None)
        os.dup2(f.fileno(), 1)
        try:
            yield lambda: (f.seek(0), f.read().decode(errors="replace"))[1]
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)


def _verbose_kernels(runs: Iterable[Callable]) -> tuple[list[str], list[str]]:
    """(oneDNN's kernels, MKL's verbose lines) while each of ``runs`` is called once."""
    import torch

    with _stdout_captured() as text:
        with (torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON),
              torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON)):
            for run in runs:
                run()
        lines = text().splitlines()
    onednn = []
    for line in lines:  # onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx10_1_512_amx,...
        fields = line.split(",")
        if fields[0] in ("onednn_verbose", "dnnl_verbose") and "exec" in fields:
            i = fields.index("exec")
            if len(fields) > i + 3:
                onednn.append(fields[i + 3])
    return list(dict.fromkeys(onednn)), [line for line in lines if line.startswith("MKL_VERBOSE")]


def _mkl_seen(lines: list[str]) -> tuple[str | None, str] | None:
    """What MKL's verbose ``lines`` say it ran: the ISA its header names, or on a non-Intel CPU, where the header
    names none ("... for Intel(R) 64 architecture ... processors"), that it ran unnamed code; None: not called."""
    named = [m.group(1) for line in lines if (m := _MKL_ISA.search(line))]
    if named:
        return _named(named[0]), f"MKL's {named[0]} kernels"
    return (None, "MKL's kernels (its header names no ISA on this CPU)") if lines else None


def _inductor_kernels(cache: str | None) -> tuple[str | None, str] | None:
    """The widest ISA in the instructions of the kernels inductor compiled into ``cache`` and this process
    loaded (its ISA check builds are loaded by a child, never here); None when it loaded none."""
    if not cache:
        return None
    with open("/proc/self/maps") as maps:
        libs = sorted({line.split()[-1] for line in maps if line.rstrip().endswith(".so")
                       and line.split()[-1].startswith(os.path.realpath(cache))})
    if not libs:
        return None
    if shutil.which("objdump") is None:
        return None, f"{len(libs)} kernel libraries not read: no objdump here"
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", *libs], capture_output=True, text=True,
                         check=True).stdout
    isa = "amx" if _AMX.search(asm) else "avx512" if _AVX512.search(asm) else "avx2" if "%ymm" in asm else "sse"
    return isa, f"{len(libs)} kernel libraries' instructions"


def _numpy_dispatch() -> tuple[str, str]:
    """numpy's widest enabled dispatch target (its ufuncs' SIMD)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    enabled = [d for d in __cpu_dispatch__ if __cpu_features__.get(d)]
    isa = ("avx512" if any(d.startswith("AVX512") or d == "X86_V4" for d in enabled) else
           "avx2" if any(d in ("AVX2", "X86_V3") for d in enabled) else "sse")
    return isa, "dispatch " + (" ".join(enabled) or "baseline only")


_OPENBLAS = {"haswell": "avx2", "zen": "avx2", "skylakex": "avx512", "cooperlake": "avx512",
             "sapphirerapids": "avx512"}


def _openblas(blas: list[dict]) -> tuple[str | None, str] | None:
    arch = [b["architecture"] for b in blas if b.get("internal_api") == "openblas" and b.get("architecture")]
    return (_OPENBLAS.get(arch[0].lower()), f"OpenBLAS {arch[0]} kernels") if arch else None


def ran_isa(runs: list[Callable], libraries: tuple[str, ...], blas: list[dict]) -> dict:
    """``{"name": the widest ISA seen (None: none could be read), "seen": {library: [isa, what said so]}}`` for a
    peer whose ``runs`` (one per T) call ``libraries`` (``TORCH_LIBRARIES``, ``INDUCTOR``, ``NUMPY_LIBRARIES``);
    ``blas``: numpy's BLAS as threadpoolctl reports it. Calls each run once."""
    seen: dict[str, tuple[str | None, str] | None] = {}
    if "aten" in libraries:
        import torch

        level = torch.backends.cpu.get_cpu_capability()
        seen["aten"] = (_named(level) if level != "DEFAULT" else "sse", f"dispatch {level}")
    if "onednn" in libraries or "mkl" in libraries:
        onednn, mkl = _verbose_kernels(runs)
        isas = [_named(k) for k in onednn]
        seen["onednn"] = (max((i for i in isas if i), key=ISAS.index, default=None), ", ".join(onednn)) \
            if onednn else None
        seen["mkl"] = _mkl_seen(mkl)
    if INDUCTOR in libraries:
        seen[INDUCTOR] = _inductor_kernels(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    if "openblas" in libraries:
        seen["openblas"] = _openblas(blas)
    if "numpy" in libraries:
        seen["numpy"] = _numpy_dispatch()
    found = {lib: list(v) for lib, v in seen.items() if v is not None}
    return {"name": max((v[0] for v in found.values() if v[0]), key=ISAS.index, default=None), "seen": found}
