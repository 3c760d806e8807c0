"""``RegisterTilesOnStack``: a CPU kernel's ``local`` buffers of register-file size stay on the stack.

TVM's ``LowerTVMBuiltin`` keeps a CPU allocation on the stack only in scope ``global`` and under 1 KiB
(``kMaxStackAlloca``); anything else becomes a ``TVMBackendAllocWorkspace`` call. LLVM promotes a stack
``alloca`` with constant-indexed accesses to registers, but never a workspace pointer: inside a parallel body
the kernel's buffers arrive through a closure without ``noalias``, so every store to a workspace tile may alias
the operands, and the tile is stored after each multiply-add and the activation broadcast reloaded (measured: an
8 x 2-zmm ``vdpbf16ps`` tile, 1 KiB, ran 2x slower than 4 x 2). This pass marks each ``local`` allocation of
an ``llvm`` function of at most ``MAX_REGISTER_TILE_BYTES`` with TVM's ``disable_lower_builtin`` annotation,
which makes ``LowerTVMBuiltin`` leave it an ``alloca``. The GEMM schedules write their accumulator tiles in
scope ``local`` (the register file's own name on every target); larger ``local`` buffers are left to TVM.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm.tirx.stmt import AllocBuffer

PASS_NAME = "RegisterTilesOnStack"
# 32 zmm registers: no register tile of any CPU here is larger (AVX2: 16 ymm, 512 bytes)
MAX_REGISTER_TILE_BYTES = 2048
_KEEP_ON_STACK = "disable_lower_builtin"  # tvm::tirx::transform::kDisableLowerTVMBuiltin


def _tile_bytes(alloc: AllocBuffer) -> int | None:
    """The allocation's size in bytes, None when it is not a constant."""
    shape = alloc.buffer.shape
    if not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
        return None
    return math.prod(int(d) for d in shape) * alloc.buffer.dtype.bits * alloc.buffer.dtype.lanes // 8


def _on_stack(alloc: AllocBuffer) -> AllocBuffer:
    size = _tile_bytes(alloc)
    if alloc.buffer.scope() != "local" or size is None or size > MAX_REGISTER_TILE_BYTES \
            or _KEEP_ON_STACK in alloc.annotations:
        return alloc
    return AllocBuffer(alloc.buffer, annotations={**alloc.annotations,
                                                   _KEEP_ON_STACK: tvm.tirx.IntImm("int32", 1)})


@tvm.tirx.transform.prim_func_pass(opt_level=0, name=PASS_NAME)
def register_tiles_on_stack(func: tvm.tirx.PrimFunc, _mod, _ctx) -> tvm.tirx.PrimFunc:
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or target.kind.name != "llvm":
        return func
    return func.with_body(tvm_ffi.structural_map(func.body, (AllocBuffer, _on_stack)))
