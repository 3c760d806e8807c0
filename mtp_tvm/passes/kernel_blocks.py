"""The one walk over a PrimFunc's blocks that the pipeline (which kernels pack a weight) and the schedules (the
names a schedule file gives, which kernels hold an int8 GEMM) share."""

from __future__ import annotations

from tvm import s_tir, tirx


def kernel_blocks(func: tirx.PrimFunc):
    """Every block of a PrimFunc, in program order, nested ones (an init, a block's body, either branch of an if)
    included."""

    def walk(stmt):
        if isinstance(stmt, s_tir.SBlockRealize):
            stmt = stmt.block
        if isinstance(stmt, s_tir.SBlock):
            yield stmt
            for part in (stmt.init, stmt.body):
                yield from walk(part)
        elif isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                yield from walk(s)
        elif isinstance(stmt, tirx.IfThenElse):
            yield from walk(stmt.then_case)
            yield from walk(stmt.else_case)
        elif stmt is not None and hasattr(stmt, "body"):  # loops, lets, attributes
            yield from walk(stmt.body)

    yield from walk(func.body)
