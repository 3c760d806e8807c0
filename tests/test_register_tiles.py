"""``RegisterTilesOnStack``: a CPU kernel's ``local`` buffers of register-file size stay stack ``alloca``s (which
LLVM promotes to registers) past TVM's 1 KiB stack limit; ``global`` buffers and larger ones keep TVM's rule."""

import pytest
import tvm
from tvm.script import tirx as T

from mtp_tvm.passes.pipeline import TIR_PIPELINE, register_with_tvm
from mtp_tvm.passes.register_tiles import MAX_REGISTER_TILE_BYTES


def _kernel(floats: int, scope: str):
    @T.prim_func
    def kernel(A: T.Buffer((floats,), "float32"), B: T.Buffer((floats,), "float32")):
        T.func_attr({"global_symbol": "kernel", "tir.noalias": True})
        acc = T.alloc_buffer((floats,), "float32", scope=scope)
        for i in range(floats):
            acc[i] = A[i] * T.float32(2)
        for i in range(floats):
            B[i] = acc[i]

    return kernel


def _workspaces(floats: int, scope: str) -> int:
    register_with_tvm()
    ll = tvm.compile(tvm.IRModule({"kernel": _kernel(floats, scope)}), target="llvm",
                     tir_pipeline=TIR_PIPELINE).mod.inspect_source("ll")
    return ll.count("load ptr, ptr @__TVMBackendAllocWorkspace")  # the runtime's function pointer, per call


@pytest.mark.parametrize("floats, scope, on_stack", [
    (384, "local", True),                              # 1.5 KiB: over TVM's 1 KiB, a register tile here
    (MAX_REGISTER_TILE_BYTES // 4, "local", True),
    (MAX_REGISTER_TILE_BYTES // 4 + 1, "local", False),  # larger: TVM's workspace, as before
    (384, "global", False),                            # TVM's own rule for global buffers, untouched
    (128, "global", True),
])
def test_local_tiles_up_to_the_register_file_stay_on_the_stack(floats, scope, on_stack):
    assert (_workspaces(floats, scope) == 0) == on_stack
