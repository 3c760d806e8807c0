"""Small-T variants of the CPU GEMMs (``schedule/token_rows.py``): one binary runs 1, 2 or 4 rows for T up to
those and ceil(T / 8) * 8 beyond, and every output is bitwise that of the general kernel, for T = 1..17, in
both frontends and on both ISA families (AVX-512 dot products and the AVX2 build)."""

import numpy as np
import pytest
from tvm import tirx

import mtp_tvm
from mtp_tvm.compiler.arrays import to_numpy
from mtp_tvm.contract.presets import make_shapes
from mtp_tvm.ir import tir_kernels
from mtp_tvm.schedule import token_rows
from mtp_tvm.schedule.token_rows import VARIANTS_ATTR, row_variants, scope_name, trim_token_rows, variant_name

HASWELL = {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}
ZNVER4 = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}


def test_variants_are_an_if_chain_on_t_with_named_blocks():
    func = row_variants(tir_kernels.lm_head_logits(256, 512), 8)
    assert [int(r) for r in func.attrs[VARIANTS_ATTR]] == [1, 2, 4]
    text = func.script()
    for rows in (1, 2, 4):
        assert f"if tokens <= T.int64({rows}):" in text
        assert f'T.sblock("{variant_name("logits", rows)}")' in text and f'T.sblock("{scope_name(rows)}")' in text
    assert 'T.sblock("logits")' in text and "(tokens + T.int64(7)) // T.int64(8) * T.int64(8)" in text


def test_kernels_without_token_rows_or_small_rows_are_left_alone():
    static = tir_kernels.lm_head_tp(256, 512, 2, 2, 2)
    assert row_variants(static, 8) is static and trim_token_rows(static, 8) is static
    full = tir_kernels.lm_head_logits(256, 512)
    assert row_variants(full, 16, ()) is full and trim_token_rows(full, 16) is full
    assert row_variants(full, 16).attrs[VARIANTS_ATTR] == [1, 2, 4]  # a 16-row AMX tile keeps the decode sizes
    assert VARIANTS_ATTR not in (row_variants(tir_kernels.lm_head_logits(256, 512), 1).attrs or {})


@pytest.mark.parametrize("case, frontend, target", [
    ("tail", "tir", "llvm"), ("tail", "relax", "llvm"), ("tail", "tir", HASWELL), ("tail", "relax", HASWELL),
    ("logits", "tir", ZNVER4),
])
@pytest.mark.slow  # two builds per case, over 1 s
def test_small_t_outputs_are_bitwise_those_of_the_general_kernel(case, frontend, target, monkeypatch):
    if target == ZNVER4 and not _runs_here("avx512_bf16"):
        pytest.skip("this CPU has no AVX512-BF16 (the znver4 build is checked by its assembly elsewhere)")
    fitted = mtp_tvm.compile(case=case, preset="tiny", frontend=frontend, target=target)
    assert any(isinstance(f, tirx.PrimFunc) and f.attrs is not None and VARIANTS_ATTR in f.attrs
               for _, f in fitted.optimized_module.functions_items())
    monkeypatch.setattr(token_rows, "SMALL_ROWS", ())  # the general kernel only: ceil(T / 8) * 8 rows
    general = mtp_tvm.compile(case=case, preset="tiny", frontend=frontend, target=target)
    for tokens in range(1, 18):
        inputs = {k: to_numpy(v) for k, v in fitted.case.make_inputs(make_shapes("tiny", tokens), 3).items()}
        a, b = fitted.run(inputs), general.run(inputs)
        for name in a:
            assert np.array_equal(a[name].view(np.uint8), b[name].view(np.uint8)), (tokens, name)


def _runs_here(flag: str) -> bool:
    with open("/proc/cpuinfo") as f:
        return flag in f.read()
