"""A deliberately broken pass, for ``check --nan-check`` and ``localize``: ``NaNInRMSNorm`` makes the
``rms_norm_smooth`` kernel (TIR frontend) compute NaN as the inverse RMS of token row 0, so that row of its
output is NaN. Every later kernel reads it; the first kernel call whose output holds a NaN while its inputs
held none is the first ``rms_norm_smooth`` call. (TVM 0.27 has no Python IR mutator: the pass edits the
kernel's TVMScript and parses it back.)"""

import re

import tvm

_INV_RMS = re.compile(r"^(\s*inv\[vt\] = )(T\.rsqrt\(.*\))$", re.MULTILINE)


def nan_in_row0(kernel: str = "rms_norm_smooth") -> tvm.transform.Pass:
    """The broken pass for PrimFunc ``kernel``; a no-op where it is absent."""

    @tvm.transform.module_pass(opt_level=0, name="NaNInRMSNorm")
    def nan_in_rms_norm(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        gv = next((gv for gv in mod.get_global_vars() if gv.name_hint == kernel), None)
        if gv is None:
            return mod
        text, count = _INV_RMS.subn(r'\1T.if_then_else(vt == 0, T.float32("nan"), \2)',
                                    tvm.IRModule({kernel: mod[gv]}).script())
        assert count == 1, f"{kernel}: the inverse-RMS store was not found"
        out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
        out[gv] = tvm.script.from_source(text)[kernel]
        return out

    return nan_in_rms_norm


def passes(_target):
    return {"fuse": [nan_in_row0()]}
