"""A pass plugin for the tests, registered in the wrong phase: it tags the fused RMSNorm kernels (a fused
PrimFunc with an ``rsqrt``), but the ``fuse`` phase's plugins run before FuseOps, where no fused kernel
exists yet, so it changes nothing (under ``schedule`` it would tag them)."""

import tvm


@tvm.transform.module_pass(opt_level=0, name="TagFusedNorm")
def tag_fused_norm(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    norms = [gv for gv, f in mod.functions_items() if gv.name_hint.startswith("fused_") and "rsqrt" in gv.name_hint]
    if not norms:
        return mod
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    for gv in norms:
        out[gv] = mod[gv].with_attr("user.norm", True)
    return out


def passes(_target):
    return {"fuse": [tag_fused_norm]}
