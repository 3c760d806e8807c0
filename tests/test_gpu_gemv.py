"""The CUDA decode GEMV (``gpu_gemv``): a kernel for each decode size, and, checked in the PTX nvcc makes here
(no GPU needed), the weight streamed in 128-bit loads with no barrier, int8 on ``dp4a``, and the registers and
shared memory of every GEMV kernel leaving room for at least two blocks per SM. These are proxies for the speed:
the GPU run (``scripts/gpu_check``) is the truth. dlight's baseline gets the unpadded GEMV it recognises."""

import re
import shutil

import pytest
from tvm import tirx

import mtp_tvm
from mtp_tvm.artifact.cuda_binary import KernelResources, compile_fatbin, ptx_mix
from mtp_tvm.ir import tir_kernels as kernels
from mtp_tvm.passes.target import resolve_target
from mtp_tvm.schedule.apply import ApplySchedules
from mtp_tvm.schedule.files import parse_schedule_file
from mtp_tvm.schedule.knobs import GpuGemm
from mtp_tvm.schedule.steps import fresh_copy
from mtp_tvm.schedule.token_rows import VARIANTS_ATTR, row_variants, rows_from_tokens, token_count

CUDA = resolve_target("cuda")
_LAUNCH = re.compile(r'__global__ void __launch_bounds__\((\d+)\) (\w+)\(')


def _gemv_kernels(device_source: str, prefix: str) -> dict[str, int]:
    """The kernels of one PrimFunc in a CUDA source, with their threads per block."""
    return {name: int(threads) for threads, name in _LAUNCH.findall(device_source) if name.startswith(prefix)}


def test_rows_from_tokens_states_the_padded_rows():
    func = rows_from_tokens(fresh_copy(kernels.lm_head_logits(256, 512)))
    tokens = token_count(func)
    x, y = func.params[0], func.params[-1]
    assert str(x.shape[0]) == str(y.shape[0]) == str((tirx.max(tokens, tirx.IntImm("int64", 1)) + 15) // 16 * 16)
    static = fresh_copy(kernels.rms_norm(256, 1e-6))  # no token count: unchanged
    assert rows_from_tokens(static) is static


def test_the_gpu_variants_are_the_decode_sizes_under_the_16_row_tile():
    func = row_variants(rows_from_tokens(fresh_copy(kernels.lm_head_logits(256, 512))), 16, (1, 2, 4, 8))
    assert [int(r) for r in func.attrs[VARIANTS_ATTR]] == [1, 2, 4, 8]
    assert "tokens <= T.int64(8)" in func.script()


def test_a_variant_naming_another_rule_inherits_nothing():
    text = """{"schedules": {"default": {"rule": "gpu_gemv", "blocks": {"logits": {"activation": "X", "weight": "w"}},
        "warp_columns": 4, "warps": 4, "vector_width": 8},
        "tile": {"rule": "gpu_gemm", "blocks": {"logits": {"activation": "X", "weight": "w"}},
        "column_tile": 8, "k_threads": 32, "vector_width": 8}}}"""
    tile = parse_schedule_file(text, "cuda/k.json", "k")["tile"]
    assert isinstance(tile.knobs, GpuGemm) and tile.knobs.column_tile == 8


@pytest.fixture(scope="module")
def compiled_cuda():
    built = {}

    def get(case, preset="tiny", **options):
        key = (case, preset, tuple(sorted(options.items())))
        if key not in built:
            built[key] = mtp_tvm.compile(case=case, target="cuda", preset=preset, vocab_shard=16160
                                         if preset == "flash" else None, **options)
        return built[key]

    return get


def test_each_decode_size_is_a_kernel_of_its_own(compiled_cuda):
    source = compiled_cuda("logits").device_source
    assert len(_gemv_kernels(source, "lm_head_logits_kernel")) == 5  # T <= 1, 2, 4, 8 and 16-row tiles
    assert "tokens" not in source.split("lm_head_logits_kernel(")[1].split(")")[0]  # T = 1: static rows


def test_dlight_gets_the_unpadded_gemv_it_recognises():
    _, _, origin = ApplySchedules(CUDA, "dlight")._schedule("lm_head_logits",
                                                             fresh_copy(kernels.lm_head_logits(256, 512)))
    assert origin == "dlight LowBatchGEMV"  # it was GeneralReduction on the padded rows: 5.2 ms on an H200


@pytest.mark.slow  # FLASH builds and nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("case, prefix, dp4a", [("logits", "lm_head_logits_kernel", False),
                                                ("projection", "w8a8_dual_gemm_kernel", True)])
def test_the_flash_gemv_streams_128_bit_loads_without_barriers(compiled_cuda, tmp_path, case, prefix, dp4a):
    source = compiled_cuda(case, "flash").device_source
    launches = _gemv_kernels(source, prefix)
    names = sorted(set(re.findall(r'__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', source)))
    binary = compile_fatbin(source, ("sm_90",), names, tmp_path)
    mix = ptx_mix(binary.ptx["sm_90"])
    gemvs = [k for k in launches if mix[k].shuffles]
    assert len(gemvs) == len(launches) == 5  # every decode size, and the projection's GEMMs and epilogue fused
    for kernel in gemvs:
        m, res = mix[kernel], binary.kernels[kernel]["sm_90"]
        # the weight and the token rows 16 bytes a load; only the projection's epilogue reads FP32 scales
        assert m.global_loads == m.global_loads_128 + m.global_loads_f32, f"{kernel}: {m}"
        assert m.global_loads_128 > 0 and (m.global_loads_f32 > 0) == dp4a, f"{kernel}: {m}"
        assert m.barriers == 0 and res.barriers == 0, f"{kernel}: a barrier"
        assert res.shared_memory_bytes == 0 and res.spill_store_bytes == 0, f"{kernel}: {res}"
        assert res.blocks_per_sm(launches[kernel]) >= 2, f"{kernel}: {res}, {launches[kernel]} threads"
        assert (m.dp4a > 0) == dp4a, f"{kernel}: {m}"


@pytest.mark.parametrize("registers, threads, smem, blocks", [(32, 128, 0, 16), (160, 128, 0, 3),
                                                              (255, 512, 0, 0), (40, 256, 100_000, 2)])
def test_blocks_per_sm(registers, threads, smem, blocks):
    res = KernelResources(registers, smem, 0, 0, 0, 0)
    assert res.blocks_per_sm(threads) == blocks
