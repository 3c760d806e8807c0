"""ptxas -v reports become per-kernel resources; nvcc failures and gaps become one-line BuildErrors."""

import shutil

import pytest

from mtp_tvm.artifact import cuda_binary
from mtp_tvm.artifact.cuda_binary import (
    KernelResources,
    compile_fatbin,
    parse_ptxas_info,
)
from mtp_tvm.support.errors import BuildError

PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'matmul_kernel' for 'sm_90'
ptxas info    : Function properties for matmul_kernel
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 3456 bytes smem
ptxas info    : Compile time = 30.1 ms
ptxas info    : Compiling entry function 'pad_rows_kernel' for 'sm_90'
ptxas info    : Function properties for pad_rows_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 384 bytes cmem[0]
"""

TINY = 'extern "C" __global__ void scale_kernel(float* x) { x[threadIdx.x] *= 2.0f; }\n'
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def test_ptxas_report_per_kernel_and_arch():
    kernels = parse_ptxas_info(PTXAS)
    assert kernels["matmul_kernel"]["sm_90"] == KernelResources(
        registers=40, shared_memory_bytes=3456, spill_store_bytes=4, spill_load_bytes=12, stack_frame_bytes=8,
        barriers=1)
    assert kernels["pad_rows_kernel"]["sm_90"].shared_memory_bytes == 0  # no smem printed: none used


def test_incomplete_ptxas_report_is_a_build_error():
    cut = PTXAS.split("ptxas info    : Used 40")[0]
    with pytest.raises(BuildError, match="no complete resource report for matmul_kernel on sm_90"):
        parse_ptxas_info(cut)


@needs_nvcc
def test_fatbin_for_two_archs_with_their_ptx(tmp_path):
    binary = compile_fatbin(TINY, ("sm_80", "sm_90"), ["scale_kernel"], tmp_path)
    assert binary.fatbin[:4] == bytes.fromhex("50ed55ba")  # the fatbin magic
    assert sorted(binary.kernels["scale_kernel"]) == ["sm_80", "sm_90"]
    assert ".target sm_80" in binary.ptx["sm_80"] and ".target sm_90" in binary.ptx["sm_90"]
    assert binary.command[0] == "nvcc" and "arch=compute_90,code=sm_90" in binary.command


@needs_nvcc
def test_a_kernel_ptxas_did_not_report_is_a_build_error(tmp_path):
    with pytest.raises(BuildError, match="ptxas reported no resources for ghost_kernel on sm_90"):
        compile_fatbin(TINY, ("sm_90",), ["scale_kernel", "ghost_kernel"], tmp_path)


@needs_nvcc
def test_nvcc_error_is_one_line(tmp_path):
    with pytest.raises(BuildError, match="nvcc failed for sm_90: .*error") as e:
        compile_fatbin(TINY.replace("2.0f;", "2.0f"), ("sm_90",), ["scale_kernel"], tmp_path)
    assert len(str(e.value).splitlines()) == 1


def test_missing_nvcc_is_a_build_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cuda_binary.shutil, "which", lambda _name: None)
    with pytest.raises(BuildError, match="nvcc not found on PATH"):
        compile_fatbin(TINY, ("sm_90",), ["scale_kernel"], tmp_path)
