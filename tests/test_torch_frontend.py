"""The torch frontend (``ir/torch_frontend.py``): every case, imported from its torch goldens, meets those goldens
at several T; the importer's GEMMs get the hand GEMMs' schedules by pattern; its departures from the spec are
rewritten (``ir/torch_to_spec.py``); it builds for CUDA without a GPU."""

import re

import numpy as np
import pytest
import torch
import tvm
from tvm import relax, tirx

import mtp_tvm
from helpers import slow_except
from mtp_tvm.compiler.arrays import to_numpy
from mtp_tvm.contract.cases import CASES
from mtp_tvm.contract.presets import make_shapes
from mtp_tvm.ir.torch_frontend import TorchFrontend, import_golden
from mtp_tvm.verify.golden_check import compare_outputs


def _token_counts(case: str) -> tuple[int, ...]:
    """T = 1, 8, 17; the LM head splits the tokens among 2 owners, so its cases take the even 2, 8, 18."""
    return (2, 8, 18) if "lm_head" in CASES[case].stages else (1, 8, 17)


@pytest.mark.parametrize("case", slow_except(list(CASES), {"norm"}))
def test_every_case_meets_its_golden(compiled, case):
    m = compiled(case, "torch")
    assert m.unscheduled == []
    for tokens in _token_counts(case):
        s = make_shapes("tiny", tokens=tokens)
        inputs = CASES[case].make_inputs(s, seed=tokens)
        actual = m.run({k: to_numpy(v) for k, v in inputs.items()})
        checks = compare_outputs(CASES[case], s, actual, CASES[case].golden(inputs, s), inputs=inputs)
        assert set(checks) == set(CASES[case].output_specs(s))
        for name, check in checks.items():
            assert check.passed, f"{case} T={tokens} {name}: " + "; ".join(c.detail for c in check.checks)


@pytest.mark.slow  # the torch projection builds for seconds
def test_the_projection_is_bitwise_the_other_frontends(compiled):
    """Every rounding point of spec §1 where the spec has it (the golden's ``127 / amax`` is torch's
    ``reciprocal(amax) * 127``: the frontend divides, as the spec and the other frontends do)."""
    s = make_shapes("tiny", tokens=17)
    inputs = {k: to_numpy(v) for k, v in CASES["projection"].make_inputs(s, seed=5).items()}
    out = {fe: compiled("projection", fe).run(inputs)["hidden_states_out"].astype(np.float32)
           for fe in ("torch", "tir", "relax")}
    np.testing.assert_array_equal(out["torch"], out["tir"])
    np.testing.assert_array_equal(out["torch"], out["relax"])


def test_the_norms_chunk_loop_is_one_reshaped_sum(compiled):
    """The golden's per-chunk slices and sums (spec §1.3) are not kernels of their own (bitwise: the test above)."""
    kernels = re.findall(r"call_tir\((\w+)", compiled("norm", "torch").optimized_module["main"].script())
    assert kernels and not any("strided_slice" in k for k in kernels) and len(kernels) < 8


@pytest.mark.slow  # builds with dumps, over 1 s
@pytest.mark.parametrize("case, twins", [("tail", {"w8a8_dual_gemm": 2, "lm_head_logits": 1}),
                                         ("lm-head", {"lm_head_logits": 1})])
def test_the_importers_gemms_get_their_twins_schedules(case, twins, tmp_path):
    m = mtp_tvm.compile(case=case, target="llvm", preset="tiny", frontend="torch", dump_passes=tmp_path)
    origins = re.findall(r"^# (\S+): (.+)$", (m.dump_dir / "schedule_trace.py").read_text(), re.M)
    found = {}
    for _kernel, origin in origins:
        twin = re.match(r"pattern gemm <- (\w+) knobs", origin)
        if twin:
            found[twin[1]] = found.get(twin[1], 0) + 1
    assert found == twins
    assert m.unscheduled == [] and (m.dump_dir / "index.html").is_file()


def _run_stage(fn, x: np.ndarray) -> np.ndarray:
    """``fn`` over one tensor ``x`` (rows symbolic) through the torch frontend alone, built for LLVM."""
    bb = relax.BlockBuilder()
    rows = tirx.Var("rows", "int64")
    arg = relax.Var("x", relax.TensorType([rows, x.shape[1]], str(x.dtype)))
    with bb.function("main", [arg]):
        with bb.dataflow():
            (y,) = TorchFrontend(bb).stage(lambda t: (fn(t["x"]),), {"x": arg}, "y")
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    vm = relax.VirtualMachine(tvm.compile(bb.finalize(), target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_round_is_half_to_even_as_in_torch():
    """The importer's ``R.round`` rounds half away from zero; torch (and spec §1.5's rint) half to even."""
    x = np.array([[0.5, 1.5, 2.5, -0.5, -2.5, 3.7]], np.float32).repeat(3, 0)
    np.testing.assert_array_equal(_run_stage(torch.round, x), torch.round(torch.from_numpy(x)).numpy())


def test_integer_gemms_accumulate_in_int32():
    """``q.int() @ w.int().T``: the importer accumulates in FP32 (out_dtype float32); the rewritten GEMM reads
    the INT8 operands and accumulates in INT32 (spec §1.6), then casts as the importer did."""
    rows = tirx.Var("rows", "int64")
    args = {"q": relax.Var("q", relax.TensorType([rows, 64], "int8")),
            "w": relax.Var("w", relax.TensorType([32, 64], "int8"))}
    mod = import_golden(lambda t: ((t["q"].to(torch.int32) @ t["w"].to(torch.int32).T).float(),), args)
    calls = []
    relax.analysis.post_order_visit(mod["main"], lambda e: calls.append(e) if isinstance(e, relax.Call)
                                    and getattr(e.op, "name", "") == "relax.matmul" else None)
    assert [(str(c.args[0].ty.dtype), str(c.args[1].ty.dtype), str(c.ty.dtype)) for c in calls] == \
        [("int8", "int8", "int32")]


@pytest.mark.slow  # two CUDA builds, over 1 s
def test_cuda_builds_without_a_gpu():
    for case in ("logits", "lm-head"):
        m = mtp_tvm.compile(case=case, target={"kind": "cuda", "arch": "sm_90"}, preset="tiny", frontend="torch")
        assert "__global__" in m.device_source and m.unscheduled == []


def test_the_frontend_is_named_for_the_cli():
    from mtp_tvm.ir.frontend_names import FRONTEND_NAMES
    from mtp_tvm.ir.model import FRONTENDS

    assert "torch" in FRONTEND_NAMES and all(FRONTENDS[n].name == n for n in FRONTEND_NAMES)
