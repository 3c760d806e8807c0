"""Intrinsics with vector forms that TVM's ``VectorizeLoop`` would scalarise, marked vectorisable.

``VectorizeLoop`` vectorises a call only when its op carries ``TVectorizable``; any other call makes it scalarise
the whole loop (``k_s``). TVM 0.27 marks ``tirx.round`` but not ``tirx.nearbyint``, though both lower to
``llvm.nearbyint`` on LLVM (round half to even: the quantiser's ``rint``; no CUDA schedule here vectorises a loop
holding it). So the W8A8 quantiser's loop, vectorised by its schedule, ran scalar: 16 rows of 4096 in 45 us
(FLASH projection, 2 threads), its conversions one lane at a time; 7.7 us as vectors.
"""

from __future__ import annotations

import tvm

VECTORIZABLE_OPS = ("tirx.nearbyint",)
_ATTR = "TVectorizable"


def mark_vectorizable() -> None:
    """Mark ``VECTORIZABLE_OPS`` vectorisable, leaving an op TVM already marks as TVM has it."""
    for name in VECTORIZABLE_OPS:
        if tvm.ir.Op.get(name).get_attr(_ATTR) is None:
            tvm.ir.register_op_attr(name, _ATTR, True)
