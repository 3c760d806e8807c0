"""The embedded module tree parses and re-serialises byte for byte; a CUDA payload's code can be swapped."""

import re

import pytest

import mtp_tvm
from mtp_tvm.artifact import embedded


def test_module_tree_round_trips(compiled):
    blob = embedded.pack_imports(compiled("tail", "tir").executable.mod)
    tree = embedded.ModuleTree.parse(blob)
    assert [kind for kind, _ in tree.modules] == ["relax.VMExecutable", embedded.HOST_PLACEHOLDER]
    assert tree.to_bytes() == blob
    with pytest.raises(ValueError):
        embedded.ModuleTree.parse(blob[:-1])


def test_cuda_payload_holds_source_until_swapped():
    ex = mtp_tvm.compile(case="norm", target="cuda", preset="tiny").executable  # codegen needs no GPU, no nvcc
    tree = embedded.ModuleTree.parse(embedded.pack_imports(ex.mod))
    index, payload = embedded.cuda_payload(tree)
    assert payload.fmt == "cuda"  # TVM alone would compile this source where the library is loaded
    source = payload.code.decode()
    assert sorted(payload.kernels) == sorted(set(re.findall(r'__global__ void __launch_bounds__\(\d+\) (\w+)\(',
                                                            source)))
    assert payload.to_bytes() == tree.modules[index][1]
    swapped = embedded.CudaPayload.parse(payload.with_code("fatbin", b"\x50\xed\x55\xba").to_bytes())
    assert (swapped.fmt, swapped.code, swapped.kernels) == ("fatbin", b"\x50\xed\x55\xba", payload.kernels)
