"""Packed weights on transparent huge pages: a decode GEMM streams its whole packed weight on every call.

On 4 KiB pages that stream misses the TLB every 4 KiB (the FLASH logits shard: about 32 000 pages a call), and in a
virtual machine each miss is a two-level page walk. TVM allocates with ``posix_memalign``, which Linux backs with
2 MiB pages only under THP ``always``; most systems ship ``madvise``. So ``on_huge_pages`` copies a packed weight
of at least one huge page, once, into a private anonymous mapping aligned to 2 MiB and advised ``MADV_HUGEPAGE``
before its first touch. A build decides (``weights_on_huge_pages``), an artifact records it.

Measured on a Sapphire Rapids VM, FLASH logits, V = 16160, 2 threads, alternating processes: the AVX2 build
T = 8 8.2-9.2 -> 7.2-7.5 ms, T = 16 14.8-15.5 -> 14.0-14.2; ``vdpbf16ps`` (Zen 4's path) T = 1 3.9-4.3 -> 3.5-3.7,
T = 8 6.5-6.8 -> 6.2, T = 16 11.7-11.8 -> 11.0-11.5. The AMX tiles, which read at the memory's bandwidth, went
the other way (T = 1/8/16 medians 3.71/3.51/3.72 -> 3.93/3.89/3.86 ms), so a target with AMX keeps TVM's
allocation. Where THP is ``never`` the advice does nothing (``weight_pages`` says which pages a build's weights
are on, and the bench reports it); a platform without ``madvise`` keeps TVM's buffer.
"""

from __future__ import annotations

import math
import mmap
from pathlib import Path

import numpy as np
import tvm
from tvm.target import Target

from ..passes.target import cpu_isa, is_gpu

HUGE_PAGE_BYTES = 2 << 20
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str:
    """The kernel's transparent-huge-page mode (``always``, ``madvise``, ``never``), or ``unavailable``."""
    try:
        text = THP_SETTING.read_text()
    except OSError:
        return "unavailable"
    chosen = [word.strip("[]") for word in text.split() if word.startswith("[")]
    return chosen[0] if chosen else "unavailable"


def weights_on_huge_pages(target: Target) -> bool:
    """Whether a build for ``target`` keeps its packed weights on huge pages: a CPU target without AMX tiles."""
    if is_gpu(target):
        return False
    isa = cpu_isa(target)
    return not (isa.bf16_tile or isa.int8_tile)


def weight_pages(huge: bool) -> str:
    """Which pages a build's packed weights are on, as a report says it."""
    mode = thp_mode()
    if not huge:
        return "4 KiB pages (TVM's allocation)"
    return f"2 MiB pages (THP {mode})" if mode in ("always", "madvise") else f"base pages (THP {mode})"


def huge_page_empty(shape, dtype) -> tvm.runtime.Tensor | None:
    """An unwritten CPU tensor on a private anonymous mapping aligned to 2 MiB and advised ``MADV_HUGEPAGE`` (its
    first write faults in huge pages), or None where this system has no transparent huge pages (no ``madvise``,
    or a kernel without THP: ``thp_mode`` ``unavailable``, which the bench reports). The tensor keeps its mapping
    alive (the view holds the tensor DLPack made from the numpy array that holds the mapping)."""
    if not hasattr(mmap, "MADV_HUGEPAGE") or thp_mode() == "unavailable":
        return None
    nbytes = math.prod(shape) * tvm.runtime.DataType(dtype).itemsize
    region = mmap.mmap(-1, nbytes + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(region, np.uint8)
    start = -whole.ctypes.data % HUGE_PAGE_BYTES
    region.madvise(mmap.MADV_HUGEPAGE, start, nbytes)
    return tvm.runtime.from_dlpack(whole[start:start + nbytes])._create_view(shape, dtype)


def on_huge_pages(tensor: tvm.runtime.Tensor) -> tvm.runtime.Tensor:
    """``tensor`` copied onto huge pages (``huge_page_empty``), or ``tensor`` itself: not on the CPU, smaller than
    a huge page, or no transparent huge pages here."""
    if (tensor.device.dlpack_device_type() != tvm.cpu().dlpack_device_type()
            or math.prod(tensor.shape) * tensor.dtype.itemsize < HUGE_PAGE_BYTES):
        return tensor
    aligned = huge_page_empty(tensor.shape, tensor.dtype)
    if aligned is None:
        return tensor
    tensor.copyto(aligned)
    return aligned
