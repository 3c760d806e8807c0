"""Specialise every PrimFunc of a static-shape Relax module to the shapes it is called with.

MetaSchedule tunes and looks up records only for static shapes, while our kernels keep the row count symbolic.
TVM's ``SpecializePrimFuncBasedOnCallSite`` rejects buffers whose shape is an expression (the pad kernels'
``ceil16(n)``), so this binds each symbolic var from the first buffer that names it as a bare dim.
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx


def _static_shape(sinfo) -> list[int]:
    dims = [int(d) if isinstance(d, (int, tirx.IntImm)) else None for d in sinfo.shape]
    if any(d is None for d in dims):
        raise ValueError(f"call site shape {sinfo.shape} is not static")
    return dims


def _call_sites(main: relax.Function):
    call_tir = tvm.ir.Op.get("relax.call_tir")
    for block in main.body.blocks:
        for binding in block.bindings:
            call = binding.value
            if isinstance(call, relax.Call) and call.op.same_as(call_tir):
                outs = call.ty.fields if isinstance(call.ty, relax.TupleType) else [call.ty]
                yield call.args[0], [a.ty for a in call.args[1].fields] + list(outs)


def specialize_to_call_sites(mod: tvm.IRModule) -> tvm.IRModule:
    """Each called PrimFunc with its symbolic dims bound to the static shapes of its (single) call site."""
    out = tvm.IRModule(dict(mod.functions_items()))
    done: dict[str, list] = {}
    for gv, arg_types in _call_sites(mod["main"]):
        shapes = [_static_shape(t) for t in arg_types]
        if gv.name_hint in done:
            if done[gv.name_hint] != shapes:
                raise ValueError(f"{gv.name_hint} is called with different shapes; cannot specialise it once")
            continue
        func = mod[gv]
        bindings, known = {}, set()
        for param, shape in zip(func.params, shapes):
            ty = param.ty
            if not isinstance(ty, tirx.BufferType):
                continue
            free = [d for d in ty.shape if isinstance(d, tirx.Var) and d not in known]
            if free:
                # each dim keeps its integer width (Var or IntImm), so specialised loops keep their index type
                dims = [tirx.IntImm(str(d.ty), v) for d, v in zip(ty.shape, shape)]
                bindings[param] = tirx.decl_buffer(dims, ty.dtype, name=param.name, elem_offset=ty.elem_offset)
                known.update(d for d in ty.shape if isinstance(d, tirx.Var))
        out[gv] = func.specialize(bindings) if bindings else func
        done[gv.name_hint] = shapes
    return out
