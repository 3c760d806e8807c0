"""A deliberately broken pass, for ``--extra-passes examples/int32_logits_accumulator.py``.

``Int32LogitsAccumulator`` gives the LM head the W8A8 projection's accumulator: it caches the ``logits``
block's output in a local buffer and makes that buffer INT32, the right type for the INT8 GEMMs but not for
BF16 x BF16 products, so every partial sum is truncated to an integer. docs/guides/debugging-passes.md finds it
with dumps, a numeric bisect and a reproducer; the bisect tests use it as the pass to be named.
"""

import tvm
from tvm import s_tir

from mtp_tvm.schedule.apply import fresh_copy


def int32_accumulator(kernel: str = "lm_head_logits", block: str = "logits") -> tvm.transform.Pass:
    """The broken pass for PrimFunc ``kernel`` (TIR frontend: ``lm_head_logits``); a no-op where it is absent."""

    @tvm.transform.module_pass(opt_level=0, name="Int32LogitsAccumulator")
    def int32_logits_accumulator(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        gv = next((gv for gv in mod.get_global_vars() if gv.name_hint == kernel), None)
        if gv is None:
            return mod
        sch = s_tir.Schedule(tvm.IRModule({kernel: fresh_copy(mod[gv])}))
        b = sch.get_sblock(block, func_name=kernel)
        sch.cache_write(b, 0, "local")
        sch.unsafe_set_dtype(b, 0, "int32")  # the bug: an integer accumulator for floating-point products
        out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
        out[gv] = sch.mod[kernel]
        return out

    return int32_logits_accumulator


def passes(_target):
    return {"fuse": [int32_accumulator()]}
