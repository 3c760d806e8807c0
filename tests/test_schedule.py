"""Every schedule keeps every golden; traces are saved and replay; weight packing is lifted out of the per-call
path and done once per weight set; every case builds for CUDA sm_80 and sm_90 with its source saved."""

import dataclasses
import json
import re
import shutil

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import s_tir
from tvm.script import tirx as T

import mtp_tvm
from helpers import slow_except
from mtp_tvm import UsageError
from mtp_tvm.compiler.arrays import to_numpy
from mtp_tvm.compiler.runtime import TRANSFORM_PARAMS
from mtp_tvm.contract.cases import CASES
from mtp_tvm.contract.presets import make_shapes
from mtp_tvm.ir import tir_kernels as kernels
from mtp_tvm.passes.target import resolve_target
from mtp_tvm.schedule import gpu_rules
from mtp_tvm.schedule.apply import ApplySchedules
from mtp_tvm.schedule.files import (
    kernel_of,
    load_schedules,
    parse_schedule_file,
    schedule_names,
)
from mtp_tvm.schedule.gpu_rules import dlight_rules, has_int8_gemm
from mtp_tvm.schedule.rules import RULES
from mtp_tvm.schedule.steps import fitting_k_vector, fresh_copy
from mtp_tvm.schedule.token_rows import VARIANTS_ATTR
from mtp_tvm.verify.golden_check import compare_outputs

LLVM = resolve_target("llvm")
FRONTENDS = ("tir", "relax")
HAS_GPU = tvm.cuda(0).exist


def _meets_goldens(compiled, tokens=17):
    tokens += tokens % compiled.shapes.owners if "lm_head" in compiled.case.stages else 0  # T splits over owners
    s = make_shapes("tiny", tokens=tokens)
    inputs = compiled.case.make_inputs(s, seed=tokens)
    actual = compiled.run({k: to_numpy(v) for k, v in inputs.items()})
    expected = compiled.case.golden(inputs, s)
    for name, check in compare_outputs(compiled.case, s, actual, expected, inputs=inputs).items():
        assert check.passed, f"{compiled.case.name}/{compiled.schedule}/{name}: " + "; ".join(
            c.detail for c in check.checks)


@pytest.mark.parametrize("frontend", FRONTENDS)
# default: test_model; tuned needs a tuning database: test_tune
@pytest.mark.parametrize("schedule", [n for n in schedule_names(LLVM) if n not in ("default", "tuned")])
@pytest.mark.parametrize("case", slow_except(list(CASES), {"logits"}))
def test_every_llvm_schedule_meets_the_goldens(compiled, case, schedule, frontend):
    _meets_goldens(compiled(case, frontend, schedule=schedule))


# column tiles shrink to a divisor: 8, then 1
@pytest.mark.slow  # an LLVM and a CUDA build each
@pytest.mark.parametrize("vocab_shard", [1000, 1001])
def test_a_vocab_shard_off_the_column_tile_still_schedules(vocab_shard):
    m = mtp_tvm.compile(case="logits", preset="tiny", vocab_shard=vocab_shard)
    s = make_shapes("tiny", tokens=5, vocab_shard=vocab_shard)
    inputs = m.case.make_inputs(s, seed=1)
    actual = m.run({k: to_numpy(v) for k, v in inputs.items()})
    assert all(c.passed for c in compare_outputs(m.case, s, actual, m.case.golden(inputs, s)).values())
    cuda = mtp_tvm.compile(case="logits", target="cuda", preset="tiny", vocab_shard=vocab_shard)
    assert "lm_head_logits" in cuda.schedule_traces and "__global__" in cuda.device_source


def test_schedule_files_are_well_formed():
    for target in (LLVM, resolve_target("cuda")):
        schedules = load_schedules(target)
        assert {"lm_head_logits", "w8a8_dual_gemm", "rms_norm", "quantize_rows", "pad_rows"} <= set(schedules)
        for per_kernel in schedules.values():
            assert "default" in per_kernel
            assert all(ks.rule in RULES for ks in per_kernel.values())
    assert kernel_of("pad_rows_bfloat16") == "pad_rows" and kernel_of("rms_norm_smooth") == "rms_norm_smooth"


def test_the_trace_is_recorded_and_replays(compiled):
    m = compiled("tail", "tir")
    assert m.schedule == "default"
    assert {"lm_head_logits", "w8a8_dual_gemm", "rms_norm_smooth", "quantize_rows"} <= set(m.schedule_traces)
    namespace = {"s_tir": s_tir, "T": T}
    exec(m.schedule_traces["lm_head_logits"], namespace)  # noqa: S102 - our own trace text
    applier = ApplySchedules(LLVM)
    ks = load_schedules(LLVM)["lm_head_logits"]["default"]
    func = applier.hand_rows(ks, kernels.lm_head_logits(256, 512))  # as the schedule phase sees it
    assert func.attrs[VARIANTS_ATTR]  # its rows cut and small-T variants made
    replayed = s_tir.Schedule(tvm.IRModule({"lm_head_logits": fresh_copy(func)}))
    namespace["apply_trace"](replayed)
    direct = s_tir.Schedule(tvm.IRModule({"lm_head_logits": fresh_copy(func)}))
    direct.work_on("lm_head_logits")
    RULES[ks.rule].apply(direct, ks.knobs_for(applier.isa.name), applier.isa)
    assert tvm_ffi.structural_equal(replayed.mod, direct.mod)


@pytest.mark.slow  # over 1 s: a build with dumps
def test_dumps_hold_the_schedule_trace(tmp_path):
    m = mtp_tvm.compile(case="logits", preset="tiny", dump_passes=tmp_path)
    text = (m.dump_dir / "schedule_trace.py").read_text()
    assert "def apply_lm_head_logits(sch" in text and "llvm/lm_head_logits.json#default" in text
    compile(text, "schedule_trace.py", "exec")  # valid Python


def test_scheduling_leaves_the_shared_kernels_untouched():
    before = kernels.lm_head_logits(256, 512).script()
    mtp_tvm.compile(case="logits", preset="tiny")
    assert kernels.lm_head_logits(256, 512).script() == before


def test_weight_packing_is_lifted_and_done_once(compiled):
    m = compiled("logits", "tir")
    assert m.vm.module.implements_function(TRANSFORM_PARAMS)
    s = make_shapes("tiny")
    arrays = [to_numpy(v) for v in m.case.make_inputs(s, 0).values()]
    first, again = m.device_args(arrays), m.device_args(arrays)
    assert first[1] is again[1]  # the packed weight is reused, not re-packed
    shape = tuple(first[1].shape)  # column strips of w (from the target's ISA): [V/w, K, w] for FMAs,
    strip = shape[2]               # [V/w, K/2, w, 2] (K pairs) for the dot products
    assert shape in ((512 // strip, 256, strip), (512 // strip, 128, strip, 2)) and strip % 8 == 0
    arrays[1] = arrays[1].copy()
    arrays[1][0, 0] += 1
    assert m.device_args(arrays)[1] is not first[1]  # a changed weight is packed anew


def test_unpacked_schedule_keeps_the_weight_layout(compiled):
    m = compiled("logits", "tir", schedule="unpacked")
    assert not m.vm.module.implements_function(TRANSFORM_PARAMS)


@pytest.mark.parametrize("target, schedule", [("llvm", "bogus"), ("llvm", "dlight"), ("cuda", "none")])
def test_unknown_or_wrong_target_schedule_is_a_usage_error(target, schedule):
    with pytest.raises(mtp_tvm.UsageError, match="schedule"):
        mtp_tvm.compile(case="logits", preset="tiny", target=target, schedule=schedule)


def test_cli_schedule_option(capsys):
    from mtp_tvm.cli import main

    assert main(["check", "--case", "norm", "--preset", "tiny", "--schedule", "none"]) == 0
    assert "schedule=none" in capsys.readouterr().out
    assert main(["check", "--case", "norm", "--preset", "tiny", "--schedule", "bogus"]) == 2


# The hand LM-head kernel (lm_head_tp) has a CPU schedule (hand/llvm/lm_head_tp.json) and no CUDA one yet: its
# cases build for CUDA with the Relax and torch frontends (dlight schedules every kernel those make), not this one.
# tail-lm-head holds every stage, so on those frontends it stands for every case (the W8A8 GEMMs among them).
GPU_TIR_CASES = [case for case in CASES if "lm_head" not in CASES[case].stages]
CUDA_BUILDS = ([(case, "tir", arch, "default") for case in GPU_TIR_CASES for arch in ("sm_80", "sm_90")]
               + [(case, "tir", "sm_90", "dlight") for case in GPU_TIR_CASES]
               + [(case, "relax", "sm_90", s) for case in ("logits", "shared-head-logits")
                  for s in ("default", "dlight")]
               + [("tail-lm-head", frontend, "sm_90", "default") for frontend in ("relax", "torch")])


@pytest.mark.parametrize("case, frontend, arch, schedule",
                         slow_except(CUDA_BUILDS, {("logits", "tir", "sm_90", "default")}))
def test_cuda_builds_and_saves_its_source(case, frontend, arch, schedule, tmp_path):
    """Every case builds for CUDA; the dumps' copy of the source is checked on the logits case of each frontend
    and schedule (what writes it does not depend on the case, and dumping every pass triples a build's time)."""
    dumped = (case, arch) == ("logits", "sm_90")
    m = mtp_tvm.compile(case=case, target={"kind": "cuda", "arch": arch}, preset="tiny", frontend=frontend,
                        schedule=schedule, dump_passes=tmp_path if dumped else None)
    assert "__global__" in m.device_source
    assert not dumped or (m.dump_dir / "device_source.cu").read_text() == m.device_source
    assert m.schedule_traces and all("sch." in t for t in m.schedule_traces.values())


def test_dlight_leaves_an_int8_gemm_off_tensor_cores():
    """TVM 0.27 cannot lower dlight's int8 tensor-core matmul (``InjectSoftwarePipeline``), and trying it imports
    every tensor intrinsic TVM ships (45 s): the Relax and torch frontends' W8A8 GEMMs failed to build for CUDA."""
    assert has_int8_gemm(fresh_copy(kernels.w8a8_dual_gemm(256)))
    assert not has_int8_gemm(fresh_copy(kernels.lm_head_logits(256, 512)))
    assert "Matmul" not in [type(r).__name__ for r in dlight_rules(int8=True)]
    assert "Matmul" in [type(r).__name__ for r in dlight_rules()]


def test_a_dlight_schedule_that_does_not_lower_is_passed_over_and_named(monkeypatch):
    from tvm.s_tir import dlight as dl

    class Unlowerable:
        """A rule whose schedule TVM cannot lower: a software pipeline over a loop of one statement."""

        def apply(self, func, _target, _tunable):
            sch = s_tir.Schedule(func)
            loop = sch.get_loops(sch.get_child_blocks(sch.get_sblock("root"))[0])[0]
            sch.annotate(loop, "software_pipeline_stage", [0, 1])
            sch.annotate(loop, "software_pipeline_order", [0, 1])
            return sch

    monkeypatch.setattr(gpu_rules, "dlight_rules", lambda *_: [Unlowerable(), dl.gpu.Fallback()])
    sch, rule = gpu_rules.apply_dlight(fresh_copy(kernels.rms_norm(256, 1e-6)), resolve_target("cuda"))
    assert rule.startswith("Fallback (Unlowerable's schedule does not lower: ") and "software pipeline" in rule
    assert "software_pipeline_stage" not in sch.mod.script()


@pytest.mark.parametrize("k, width, vector", [(4096, 16, 16), (256, 16, 8), (256, 8, 8), (96, 16, 1)])
def test_the_gpu_gemm_splits_k_exactly(k, width, vector):
    """A predicated K split (tiny's K = 256 over 32 lanes x 16 int8) computed wrong sums on an H200."""
    assert fitting_k_vector(k, 32, width) == vector and k % (32 * vector) == 0


def test_a_k_the_lanes_cannot_split_is_refused():
    with pytest.raises(ValueError, match="K = 100 is not a multiple of the 32 K-lanes"):
        fitting_k_vector(100, 32, 16)


@pytest.mark.slow  # nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cuda_source_compiles_with_nvcc(arch):
    from tvm.support import nvcc

    m = mtp_tvm.compile(case="tail-norm", target={"kind": "cuda", "arch": arch}, preset="tiny")
    with m.target:
        assert nvcc.compile_cuda(m.device_source, target_format="fatbin", compiler="nvcc")


@pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU on this machine")
@pytest.mark.parametrize("schedule", ["default", "dlight", "tile"])
@pytest.mark.parametrize("case", list(CASES))
def test_cuda_meets_the_goldens(case, schedule):
    """At a T for each kernel the GEMV runs (T <= 1, 2, 4, 8: its decode kernels; 17: two 16-row tiles)."""
    if schedule not in schedule_names(resolve_target("cuda")):
        pytest.skip(f"no {schedule!r} schedule on CUDA")
    compiled = mtp_tvm.compile(case=case, target="cuda", preset="tiny", schedule=schedule)
    for tokens in (1, 2, 3, 5, 17):
        _meets_goldens(compiled, tokens)


# ---- schedule files are checked data -------------------------------------------------------------------------

GEMM = {"rule": "cpu_gemm", "blocks": {"logits": {"activation": "X", "weight": "w", "widen": True}}}


@pytest.mark.parametrize("entry, message", [
    ({**GEMM, "unrol": True}, r"k.json#default: unknown key 'unrol'"),
    ({**GEMM, "unroll": "register_rows"}, r"k.json#default: key 'unroll': expected true or false, got 'register_rows'"),
    ({**GEMM, "parallel": "diagonal"}, r"k.json#default: key 'parallel': 'diagonal' is not one of"),
    ({**GEMM, "k_chunk": 0}, r"key 'k_chunk': expected a positive integer, got 0"),
    ({"rule": "cpu_gemm"}, r"k.json#default: missing key 'blocks'"),
    ({**GEMM, "blocks": {"logits": {"activation": "X"}}}, r"key 'blocks'.logits: missing key 'weight'"),
    ({**GEMM, "rule": "cpu_gem"}, r"key 'rule': 'cpu_gem' is not one of"),
    ({**GEMM, "per_isa": {"avx3": {}}}, r"key 'per_isa' takes an object keyed by avx2"),
])
def test_a_bad_schedule_file_is_one_line_naming_file_schedule_and_key(entry, message):
    with pytest.raises(UsageError, match=message) as e:
        parse_schedule_file(json.dumps({"kernel": "k", "schedules": {"default": entry}}), "llvm/k.json", "k")
    assert "\n" not in str(e.value)


def test_variants_inherit_default_and_isa_entries_override():
    text = json.dumps({"kernel": "k", "schedules": {
        "default": {**GEMM, "per_isa": {"avx2": {"register_rows": 4}}}, "unpacked": {"pack_weight": False}}})
    parsed = parse_schedule_file(text, "llvm/k.json", "k")
    default, unpacked = parsed["default"], parsed["unpacked"]
    assert unpacked.knobs == dataclasses.replace(default.knobs, pack_weight=False)
    assert default.knobs_for("avx2").register_rows == 4 and default.knobs_for("avx512").register_rows is None
    assert unpacked.knobs_for("avx2") == dataclasses.replace(default.knobs_for("avx2"), pack_weight=False)


def test_missing_schedule_files_are_an_error_not_an_unscheduled_build(monkeypatch, tmp_path):
    from mtp_tvm.schedule import files

    monkeypatch.setattr(files, "HAND_SCHEDULES", "no-such-folder")
    files._load.cache_clear()
    try:
        with pytest.raises(UsageError, match="no hand schedules found for llvm .*reinstall mtp_tvm"):
            mtp_tvm.compile(case="logits", preset="tiny")
    finally:
        files._load.cache_clear()


@pytest.mark.parametrize("mcpu, lanes", [("haswell", 8), ("znver4", 16)])
def test_register_tiles_fit_the_register_file_of_the_target(mcpu, lanes):
    from mtp_tvm.passes.target import cpu_isa
    from mtp_tvm.schedule.cpu_rules import register_tile
    from mtp_tvm.schedule.knobs import CpuGemm

    isa = cpu_isa(resolve_target({"kind": "llvm", "mcpu": mcpu}))
    for columns in (16160, 4096, 512, 1000):
        rows, width = register_tile(isa, columns, CpuGemm(blocks={}))
        vectors = -(-width // lanes)
        assert columns % width == 0 and 16 % rows == 0 and rows * vectors + vectors + 1 <= isa.vector_registers


@pytest.mark.parametrize("path, mcpu, columns, tile", [
    ("bf16", "haswell", 16160, (4, 2)),  # the ymm FMA form: 8 accumulators, two vectors share each row's broadcasts
    ("bf16", "znver3", 512, (4, 2)),
    ("bf16", "haswell", 1000, (8, 1)),  # 125 vectors: no tile of two, so the most rows
    ("bf16", "icelake-server", 16160, (8, 2)),  # the zmm FMA form keeps the most rows
    ("bf16", "znver4", 16160, (8, 2)),  # vdpbf16ps
    ("int8", "haswell", 4096, (4, 2)),  # vpmaddwd on ymm
    ("int8", "znver3", 4608, (4, 2)),  # 576 vectors: 4 x 3 fits too; 8 accumulators fill the pipes
    ("int8", "znver4", 4096, (8, 2)),  # vpdpwssd on zmm: the most rows
])
def test_the_dot_tile_each_target_gets(path, mcpu, columns, tile):
    """``cpu_rules.dot_tile`` with 8 register rows: the ymm dots prefer two vectors of 4 rows to one of 8 (AVX2
    FLASH logits T = 16 on Zen 4: 15.4 against 21.1 ms; the projection 5.3 against 7.4), the others the most
    rows."""
    from mtp_tvm.passes.target import cpu_isa
    from mtp_tvm.schedule.cpu_rules import bf16_dot_path, dot_tile, int8_dot_path
    from mtp_tvm.schedule.knobs import CpuGemm

    isa = cpu_isa(resolve_target({"kind": "llvm", "mcpu": mcpu}))
    dot = (bf16_dot_path if path == "bf16" else int8_dot_path)(isa)
    assert dot_tile(isa, columns, 8, dot, CpuGemm(blocks={})) == tile


def test_kernels_no_schedule_covers_are_named(compiled, tmp_path, monkeypatch):
    monkeypatch.setattr("mtp_tvm.schedule.apply.match_kernel", lambda *a, **k: None)  # no pattern matches either
    m = mtp_tvm.compile(case="logits", preset="tiny", frontend="relax", dump_passes=tmp_path)
    assert m.unscheduled and all(name not in m.schedule_traces for name in m.unscheduled)
    assert f"# lowered as written (no schedule covers them): {', '.join(sorted(m.unscheduled))}" in (
        m.dump_dir / "schedule_trace.py").read_text()
    assert compiled("logits", "tir").unscheduled == []
    assert compiled("logits", "tir", schedule="none").unscheduled == []  # asked for: not news


@pytest.mark.slow  # over 1 s: builds the tail twice
def test_only_the_real_rows_run_and_the_outputs_stay_bitwise(compiled, monkeypatch):
    """The GEMMs run ceil(T / r) * r rows (r = the register rows), not the padded 16, with unchanged outputs."""
    real = compiled("tail", "tir")
    gemm = real.optimized_module["lm_head_logits_prepacked"]  # (after the weight packing is lifted)
    assert VARIANTS_ATTR in gemm.attrs  # the schedule phase cut its rows: ceil(T / r) * r, and small-T variants
    monkeypatch.setattr("mtp_tvm.schedule.apply.row_variants", lambda func, *_: func)  # the full tile
    full = mtp_tvm.compile(case="tail", preset="tiny")
    assert VARIANTS_ATTR not in full.optimized_module["lm_head_logits_prepacked"].attrs
    for tokens in (1, 5, 8, 17):
        inputs = {k: to_numpy(v) for k, v in real.case.make_inputs(make_shapes("tiny", tokens), 3).items()}
        a, b = real.run(inputs), full.run(inputs)
        assert all(np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)) for k in a), tokens


@pytest.mark.slow  # over 1 s: two cross-ISA builds each
@pytest.mark.parametrize("mcpu, logits_op, projection_op", [
    ("znver3", "vfmadd", "vpmaddwd"),         # AVX2: FMAs for BF16, vpmaddwd for int8
    ("znver4", "vdpbf16ps", "vpdpwssd"),      # AVX512-BF16 and AVX512-VNNI
    ("cooperlake", "vdpbf16ps", "vpdpwssd"),  # the same on an Intel part
    ("sapphirerapids", "tdpbf16ps", "tdpbssd"),  # AMX tiles for both
])
def test_the_gemms_use_the_dot_products_of_the_target(mcpu, logits_op, projection_op):
    """Instruction selection read from the assembly: no CPU of that kind is needed (cross-ISA builds)."""
    target = {"kind": "llvm", "mcpu": mcpu, "num-cores": 2}
    for case, op in (("logits", logits_op), ("projection", projection_op)):
        asm = mtp_tvm.compile(case=case, preset="tiny", target=target).executable.mod.imports[0].inspect_source("asm")
        assert op in asm, (mcpu, case, op)
        assert "vdpbf16ps" not in asm if mcpu == "znver3" else True  # never an instruction the target lacks
        assert ("tdpbf16ps" in asm or "tdpbssd" in asm) == (mcpu == "sapphirerapids"), (mcpu, case)


def _row_kernel_args(kernel: str, rng):
    """A row kernel's arguments (5 rows of 1024: 8 chunks of 128), outputs zeroed; extremes included."""
    import ml_dtypes

    x = rng.standard_normal((5, 1024)).astype(np.float32)
    x[1] *= 1e-6  # the quantiser's amax under its floor; a norm's tiny sum of squares
    x[3, 7] = -40.0  # the amax a negative value's
    x = x.astype(ml_dtypes.bfloat16)
    if kernel == "quantize_rows":
        return [x, np.zeros((5, 1024), np.int8), np.zeros(5, np.float32)]
    return [x, rng.uniform(0.5, 1.5, 1024).astype(np.float32), rng.uniform(0.5, 1.5, 1024).astype(np.float32),
            np.zeros((5, 1024), ml_dtypes.bfloat16)]


ROW_CHAINS = {  # kernel: its cpu_rows knobs, the knobs that break its reduction into chains, its outputs
    "quantize_rows": ({"row_block": "quantize", "parallel_blocks": ("amax",)}, {"lane_reductions": ("amax",)}, 2),
    "rms_norm_smooth": ({"row_block": "normalize", "compute_at_row": ("inv_rms", "sumsq", "sumsq_chunk")},
                        {"interleaved_chains": ("sumsq_chunk",)}, 1),
}


@pytest.mark.parametrize("kernel", sorted(ROW_CHAINS))
@pytest.mark.parametrize("mcpu", ["haswell", None])
def test_a_row_reduction_in_independent_chains_is_bitwise_the_serial_one(kernel, mcpu):
    """``lane_reductions`` (the amax as one partial maximum per lane, the lanes one vector) and
    ``interleaved_chains`` (``CHAINS`` of the norm's chunk sums in flight, each in its order): the outputs are
    bitwise those of the serial chain, on AVX2's lanes and the host's; the quantiser's loops are vectors (its
    ``nearbyint`` included: ``passes/vectorizable.py``), not scalarised."""
    from mtp_tvm.passes.pipeline import TIR_PIPELINE, register_with_tvm
    from mtp_tvm.passes.target import cpu_isa
    from mtp_tvm.schedule.cpu_rules import CHAINS, cpu_rows
    from mtp_tvm.schedule.knobs import CpuRows

    register_with_tvm()
    target = resolve_target({"kind": "llvm", "mcpu": mcpu} if mcpu else "llvm")
    lanes = cpu_isa(target).fp32_lanes
    func = (kernels.quantize_rows(1024) if kernel == "quantize_rows" else kernels.rms_norm_smooth(1024, 1e-6))
    base, chains, outs = ROW_CHAINS[kernel]
    outputs, scripts = [], []
    for knobs in (base, {**base, **chains}):
        sch = s_tir.Schedule(tvm.IRModule({"main": fresh_copy(func).with_attr("global_symbol", "main")}))
        cpu_rows(sch, CpuRows(**knobs), cpu_isa(target))
        scripts.append(sch.mod.script())
        lib = tvm.tirx.build(sch.mod, target=target, pipeline=TIR_PIPELINE)
        if kernel == "quantize_rows":
            assert f"@llvm.nearbyint.v{lanes}f32" in lib.inspect_source("ll")
        if mcpu is not None:
            continue  # built, not run: the host need not have it
        args = [tvm.runtime.tensor(a, tvm.cpu()) for a in _row_kernel_args(kernel, np.random.default_rng(4))]
        lib["main"](*args)
        outputs.append([a.numpy() for a in args[-outs:]])
    if kernel == "quantize_rows":
        assert "amax_rf" not in scripts[0] and "amax_rf" in scripts[1]
        assert f"amax_rf = T.sblock_alloc_buffer((m, {lanes}))" in scripts[1]
        assert re.search(rf'in T.vectorized\({lanes}\):\s+with T.sblock\("amax_rf"\)', scripts[1])
    else:
        assert f"T.unroll({CHAINS})" not in scripts[0] and f"T.unroll({CHAINS})" in scripts[1]
    for before, after in zip(*outputs):
        assert np.array_equal(before.view(np.uint8), after.view(np.uint8))
