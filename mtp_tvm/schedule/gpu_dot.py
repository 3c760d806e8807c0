"""``dp4a`` on registers: CUDA's 4-way int8 dot product with int32 accumulation, as a tensor intrinsic whose
operands live in ``local`` scope (TVM's own ``dp4a_s8s8s32`` takes them from shared memory; the GEMV loads each
lane's 16 bytes into registers). Registered on first use."""

from __future__ import annotations

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

DP4A_LOCAL = "mtp_tvm_dp4a_s8s8s32_local"


def _dp4a(body: bool):
    @T.prim_func(s_tir=True)
    def func(a: T.Buffer((4,), "int8", offset_factor=1, align=4, scope="local"),
             b: T.Buffer((4,), "int8", offset_factor=1, align=4, scope="local"),
             c: T.Buffer((1,), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(c[0], a[0:4], b[0:4])
            T.writes(c[0])
            if body:
                for i in range(4):
                    with T.sblock("update"):
                        vi = T.axis.remap("R", [i])
                        c[0] = c[0] + T.Cast("int32", a[vi]) * T.Cast("int32", b[vi])
            else:
                c[0] = c[0] + T.call_pure_extern("__dp4a", a.vload([0], "int8x4"), b.vload([0], "int8x4"),
                                                 T.int32(0), dtype="int32")

    return func


def register_dp4a() -> None:
    """Register ``DP4A_LOCAL`` once per process (TVM refuses a second registration of a name)."""
    try:
        TensorIntrin.get(DP4A_LOCAL, allow_missing=False)
    except Exception:
        TensorIntrin.register(DP4A_LOCAL, _dp4a(True), _dp4a(False))
