"""Packed weights on huge pages (``compiler.huge_pages``): a copy bitwise the packed tensor, on a private mapping
aligned to 2 MiB and advised ``MADV_HUGEPAGE``, alive as long as the tensor; a build without AMX tiles asks for it,
one with them keeps TVM's allocation, and an artifact does what its build did."""

import gc
import math
import mmap
import re

import ml_dtypes
import numpy as np
import pytest
import tvm

import mtp_tvm
from mtp_tvm.compiler import huge_pages
from mtp_tvm.compiler.huge_pages import (
    HUGE_PAGE_BYTES,
    on_huge_pages,
    thp_mode,
    weight_pages,
    weights_on_huge_pages,
)
from mtp_tvm.passes.target import resolve_target

needs_madvise = pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE") or thp_mode() == "unavailable",
                                   reason="no transparent huge pages here (madvise, or the kernel's THP)")


def _mapping(address: int) -> dict[str, str]:
    """The ``/proc/self/smaps`` fields of the mapping holding ``address``."""
    text = open("/proc/self/smaps").read()
    for m in re.finditer(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) .*\n((?:[A-Za-z_]+:.*\n)+)", text, re.M):
        if int(m.group(1), 16) <= address < int(m.group(2), 16):
            fields = dict(line.split(":", 1) for line in m.group(4).splitlines())
            return {"perms": m.group(3), **{k: v.strip() for k, v in fields.items()}}
    raise AssertionError(f"no mapping holds {address:#x}")


@needs_madvise
def test_a_packed_weight_is_copied_bitwise_onto_advised_aligned_private_memory_that_lives_with_it():
    values = np.random.default_rng(0).standard_normal((3, 700_000)).astype(ml_dtypes.bfloat16)  # 4.2 MB
    packed = tvm.runtime.tensor(values)
    moved = on_huge_pages(packed)
    del packed
    gc.collect()  # the mapping lives as long as the tensor, with no other reference to it
    assert moved.shape == (3, 700_000) and moved.dtype == "bfloat16"
    assert np.array_equal(moved.numpy().view(np.uint16), values.view(np.uint16))
    assert moved.data_ptr() % HUGE_PAGE_BYTES == 0
    where = _mapping(moved.data_ptr())
    assert "hg" in where["VmFlags"].split() and where["perms"].endswith("p"), where  # advised, private (THP-able)
    if thp_mode() in ("always", "madvise"):
        assert where["THPeligible"] == "1", where


def test_a_tensor_under_one_huge_page_or_on_a_system_without_thp_stays_where_tvm_put_it(monkeypatch):
    small = tvm.runtime.tensor(np.ones((HUGE_PAGE_BYTES // 4 - 1,), np.float32))
    assert on_huge_pages(small) is small
    big = tvm.runtime.tensor(np.ones((HUGE_PAGE_BYTES // 2,), np.float32))
    monkeypatch.setattr(huge_pages, "THP_SETTING", huge_pages.Path("/nonexistent/transparent_hugepage/enabled"))
    assert thp_mode() == "unavailable" and on_huge_pages(big) is big and weight_pages(True).startswith("base pages")


@pytest.mark.parametrize("target, huge", [({"kind": "llvm", "mcpu": "haswell"}, True),
                                          ({"kind": "llvm", "mcpu": "znver4"}, True),
                                          ({"kind": "llvm", "mcpu": "sapphirerapids"}, False), ("cuda", False)])
def test_a_build_asks_for_huge_pages_unless_its_gemms_run_on_amx_tiles_or_a_gpu(target, huge):
    assert weights_on_huge_pages(resolve_target(target)) is huge
    pages = "2 MiB" if thp_mode() in ("always", "madvise") else "base pages"
    assert weight_pages(huge).startswith(pages if huge else "4 KiB")


@needs_madvise
def test_a_bound_case_runs_its_packed_weight_from_huge_pages_and_its_artifact_does_too(tmp_path):
    """The tiny logits' packed weight over the whole vocabulary (4096 x 256 BF16: 2 MiB) on an AVX2 build: bound,
    it is on the advised mapping and the outputs are those of the unbound run; its artifact records the choice."""
    build = {"case": "logits", "preset": "tiny", "vocab_shard": 4096, "target": {"kind": "llvm", "mcpu": "haswell"}}
    compiled = mtp_tvm.compile(**build)
    assert compiled.huge_page_weights
    inputs = compiled.make_inputs()
    weights = {name: inputs[name] for name in compiled.weight_specs}
    bound = compiled.bind(weights)
    packed = bound.device_args({name: inputs[name] for name in compiled.activation_specs})[compiled.num_input:]
    big = [t for t in packed if t.data_ptr() % HUGE_PAGE_BYTES == 0 and "hg" in _mapping(t.data_ptr())["VmFlags"]]
    assert [math.prod(t.shape) * 2 for t in big] == [HUGE_PAGE_BYTES], [t.shape for t in packed]
    activations = {name: inputs[name] for name in compiled.activation_specs}
    expected = compiled.run(inputs)
    for name, out in bound.run(activations).items():
        assert np.array_equal(out, expected[name]), name
    artifact = mtp_tvm.load(mtp_tvm.build(tmp_path / "a", **build).path)
    assert artifact.manifest["build"]["huge_page_weights"] is True and artifact.huge_page_weights


@needs_madvise
def test_the_read_probe_reads_from_the_pages_the_builds_weights_are_on():
    """The roofline's bandwidth is read from memory like the weights' (an AVX2 build's: 2 MiB pages); on 4 KiB
    pages it read below the AVX2 logits' own rate at T = 1."""
    import dataclasses

    from mtp_tvm.tools.measure.peaks import ProbePlan, StreamProbe

    target = resolve_target({"kind": "llvm", "mcpu": "haswell"})
    probe = StreamProbe(target, dataclasses.replace(ProbePlan.for_target(target), stream_bytes=2 * HUGE_PAGE_BYTES))
    address = probe._buffer.data_ptr()
    assert address % HUGE_PAGE_BYTES == 0 and "hg" in _mapping(address)["VmFlags"].split()
    assert probe.describe().endswith("on 2 MiB pages") and probe.gbs() > 0
