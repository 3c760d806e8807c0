"""Input validation against specs (symbolic dims bind once; NaN/Inf named by its first index, found without
widening BF16 or copying the array), and .npz files that keep BF16."""

import json
import os
import re
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

from helpers import within
from mtp_tvm.compiler import tensors
from mtp_tvm.compiler.arrays import DTYPES_MEMBER, NUMPY_DTYPES, read_npz, write_npz
from mtp_tvm.compiler.tensors import validate_inputs
from mtp_tvm.contract.cases import TensorDecl
from mtp_tvm.support.errors import UsageError

SPECS = {"x": TensorDecl("x", ("T", 8), "bfloat16"), "y": TensorDecl("y", ("T", 4), "float32")}


def test_symbolic_dim_binds_to_the_first_input():
    arrays, bound = validate_inputs(SPECS, {"x": np.zeros((3, 8), ml_dtypes.bfloat16),
                                            "y": np.zeros((3, 4), np.float32)}, "case c")
    assert bound == {"T": 3} and [a.shape for a in arrays] == [(3, 8), (3, 4)]
    with pytest.raises(UsageError, match=r"input 'y' has shape \(4, 4\), expected \(3, 4\)"):
        validate_inputs(SPECS, {"x": np.zeros((3, 8), ml_dtypes.bfloat16), "y": np.zeros((4, 4), np.float32)}, "c")


def test_zero_tokens_and_wrong_rank_are_refused():
    with pytest.raises(UsageError, match="0 tokens"):
        validate_inputs(SPECS, {"x": np.zeros((0, 8), ml_dtypes.bfloat16), "y": np.zeros((0, 4), np.float32)}, "c")
    with pytest.raises(UsageError, match=r"input 'x' has shape \(8,\), expected \('T', 8\)"):
        validate_inputs(SPECS, {"x": np.zeros(8, ml_dtypes.bfloat16), "y": np.zeros((1, 4), np.float32)}, "c")


def test_every_non_finite_bf16_bit_pattern_is_found():
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)
    bad = np.flatnonzero(~np.isfinite(every.astype(np.float32)))
    with pytest.raises(UsageError, match=rf"has {bad.size} non-finite values \(NaN/Inf\), the first at \({bad[0]},\)"):
        validate_inputs({"w": TensorDecl("w", (1 << 16,), "bfloat16")}, {"w": every}, "c")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
def test_the_first_non_finite_value_is_named_across_scan_chunks(monkeypatch, dtype):
    monkeypatch.setattr(tensors, "FINITE_SCAN_CHUNK", 5)
    a = np.ones((4, 6), np.float32)
    a[3, 0], a[2, 3], a[3, 5] = np.inf, np.nan, -np.inf
    with pytest.raises(UsageError, match=r"input 'w' has 3 non-finite values \(NaN/Inf\), the first at \(2, 3\)$"):
        validate_inputs({"w": TensorDecl("w", (4, 6), dtype)}, {"w": a.astype(NUMPY_DTYPES[dtype])}, "c")


def test_the_non_finite_scan_of_a_large_bf16_weight_allocates_no_copy():
    w = np.ones((4096, 2048), ml_dtypes.bfloat16)  # 16 MB; widened to FP32 it would be 32 MB
    tracemalloc.start()
    try:
        validate_inputs({"w": TensorDecl("w", w.shape, "bfloat16")}, {"w": w}, "c")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * tensors.FINITE_SCAN_CHUNK  # a few chunk-sized temporaries, not the array


def test_npz_keeps_bf16(tmp_path):
    x = np.arange(16, dtype=np.float32).reshape(2, 8).astype(ml_dtypes.bfloat16)
    write_npz(tmp_path / "a.npz", {"x": x, "y": np.ones((2, 4), np.float32)})
    back = read_npz(tmp_path / "a.npz", {n: s.dtype for n, s in SPECS.items()})
    assert back["x"].dtype == x.dtype and np.array_equal(back["x"].view(np.uint16), x.view(np.uint16))
    assert back["y"].dtype == np.float32
    with pytest.raises(UsageError, match="cannot read"):
        read_npz(tmp_path / "missing.npz", {})


def _npz_bytes(tmp_path) -> bytes:
    write_npz(tmp_path / "good.npz", {"x": np.arange(64, dtype=np.float32)})
    return (tmp_path / "good.npz").read_bytes()


@pytest.mark.parametrize("make, message", [
    (lambda good: b"", "the file is empty"),
    (lambda good: good[: len(good) // 2], "the archive is damaged"),
    (lambda good: good[:60] + bytes([good[60] ^ 0xFF]) + good[61:], "the archive is damaged"),
    (lambda good: np.lib.format.magic(1, 0) + b"\x00" * 64, "it is a single .npy array, not an .npz archive"),
    (lambda good: b"\x80\x04random bytes, not pickled data", r"not an .npz file \(a zip archive of .npy arrays\)"),
])
def test_a_damaged_or_wrong_inputs_file_is_one_line(tmp_path, make, message):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(make(_npz_bytes(tmp_path)))
    with pytest.raises(UsageError, match=r"^cannot read .*bad\.npz: " + message) as e:
        read_npz(bad, {})
    assert len(str(e.value).splitlines()) == 1 and "pickled" not in str(e.value)



def _int_record(path) -> None:
    np.savez(path, x=np.zeros(4, "V2"), **{DTYPES_MEMBER: np.array(json.dumps({"x": 5}))})


@pytest.mark.parametrize("make, message", [
    (_int_record, f"its {DTYPES_MEMBER} member is not a JSON object of dtype names"),
    (os.mkfifo, "not a regular file; refusing to open it"),
], ids=["dtype-record-of-an-int", "fifo"])
def test_an_inputs_file_with_a_bad_dtype_record_or_not_a_file_is_one_line(tmp_path, make, message):
    """``read_inputs`` (``run --inputs``, ``--calibration``): a TypeError or a reader blocked on a FIFO before."""
    bad = tmp_path / "bad.npz"
    make(bad)
    with within(30), pytest.raises(UsageError, match=r"^cannot read .*bad\.npz: " + re.escape(message)) as e:
        tensors.read_inputs(bad)
    assert len(str(e.value).splitlines()) == 1


def test_a_zip_without_arrays_is_refused(tmp_path):
    import zipfile

    with zipfile.ZipFile(tmp_path / "empty.npz", "w"):
        pass
    with pytest.raises(UsageError, match="the archive holds no arrays"):
        read_npz(tmp_path / "empty.npz", {})
    with zipfile.ZipFile(tmp_path / "text.npz", "w") as z:
        z.writestr("notes.txt", "hello")
    with pytest.raises(UsageError, match="'notes.txt' in the archive is not an .npy array"):
        read_npz(tmp_path / "text.npz", {})


def _case_dtypes() -> list[str]:
    from mtp_tvm.contract.cases import CASES
    from mtp_tvm.contract.presets import make_shapes

    shapes = make_shapes("tiny", 3)
    return sorted({s.dtype for c in CASES.values() for s in [*c.input_specs(shapes).values(),
                                                              *c.output_specs(shapes).values()]})


@pytest.mark.parametrize("dtype", [*_case_dtypes(), "float8_e4m3fn", "float8_e5m2", "float16", "int64", "bool"])
def test_read_inputs_of_write_inputs_is_bitwise_every_dtype(tmp_path, dtype):
    import mtp_tvm

    bits = np.random.default_rng(0).integers(0, 256, size=48, dtype=np.uint8)
    wanted = np.dtype(getattr(ml_dtypes, dtype, dtype))
    x = (bits % 2).astype(bool) if dtype == "bool" else bits.view(wanted)
    mtp_tvm.write_inputs(tmp_path / "x.npz", {"x": x.reshape(2, -1)})
    back = mtp_tvm.read_inputs(tmp_path / "x.npz")
    assert list(back) == ["x"] and back["x"].dtype == x.dtype and back["x"].shape == (2, x.size // 2)
    assert back["x"].tobytes() == x.tobytes()


def test_read_inputs_restores_bf16_of_files_without_a_record_and_takes_torch(tmp_path):
    import torch

    import mtp_tvm

    x = np.arange(8, dtype=np.float32).astype(ml_dtypes.bfloat16)
    np.savez(tmp_path / "plain.npz", x=x)  # numpy's own writer: |V2 and no dtype record
    assert mtp_tvm.read_inputs(tmp_path / "plain.npz")["x"].dtype == x.dtype
    np.savez(tmp_path / "f8.npz", x=x.astype(ml_dtypes.float8_e4m3fn))
    with pytest.raises(UsageError, match=r"'x' is raw bytes \(\|V1\) and the file does not say its dtype"):
        mtp_tvm.read_inputs(tmp_path / "f8.npz")
    t = torch.randn(4, dtype=torch.bfloat16)
    mtp_tvm.write_inputs(tmp_path / "t.npz", {"t": t})
    assert torch.equal(torch.from_numpy(mtp_tvm.read_inputs(tmp_path / "t.npz")["t"].view(np.int16)),
                       t.view(torch.int16))


def test_a_raw_bytes_input_says_to_use_read_inputs(tmp_path):
    x = np.ones((2, 8), ml_dtypes.bfloat16)
    np.savez(tmp_path / "a.npz", x=x, y=np.ones((2, 4), np.float32))
    with np.load(tmp_path / "a.npz") as z:
        raw = {k: z[k] for k in z.files}
    with pytest.raises(UsageError, match=r"'x' has dtype \|V2, expected bfloat16 \(raw bytes: .*"
                                         r"mtp_tvm.read_inputs\(path\) restores them\)"):
        validate_inputs(SPECS, raw, "test")


def test_where_an_input_may_live_for_a_gpu_binary(monkeypatch):
    """``input_placement`` for a CUDA binary, decided from metadata alone (no GPU needed): host data is copied,
    a tensor on the binary's GPU would be used in place, one on another device is refused naming both devices,
    and a meta tensor, which no device would do, is refused for having no values (round four's line)."""
    import torch
    import tvm

    gpu = tvm.cuda(0)
    assert not tensors.input_placement("x", np.zeros(2, np.float32), gpu)
    assert not tensors.input_placement("x", torch.zeros(2), gpu)
    assert not tensors.input_placement("x", tvm.runtime.tensor(np.zeros(2, np.float32)), gpu)  # CPU: copied
    assert tensors.input_placement("x", tvm.runtime.tensor(np.zeros(2, np.float32)), tvm.cpu())
    with pytest.raises(UsageError, match=r"^a torch.strided tensor on the meta device \(2,\) has no values to run "
                                         r"on: give dense tensors with data \(on the CPU or the target's device\)$"):
        tensors.input_placement("x", torch.zeros(2, device="meta"), gpu)
    monkeypatch.setattr(tensors, "_device_of", lambda _x: "cuda:1")  # another GPU, without one
    with pytest.raises(UsageError, match=r"^input 'x' is on cuda:1, but this binary runs on cuda:0: pass it there "
                                         r"or on the CPU$"):
        tensors.input_placement("x", torch.zeros(2), gpu)


def test_a_tensor_used_in_place_is_shared_when_compact_and_aligned_else_compacted_by_torch():
    import torch

    x = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    shared = tensors.shared_in_place(x)
    assert shared.shape == (3, 4) and str(shared.dtype) == "bfloat16"
    assert torch.from_dlpack(shared).data_ptr() == x.data_ptr()  # no copy
    strided = x.t()
    compacted = torch.from_dlpack(tensors.shared_in_place(strided))
    assert compacted.data_ptr() != strided.data_ptr() and torch.equal(compacted, strided)
    arrays, bound = validate_inputs({"x": TensorDecl("x", ("T", 3), "bfloat16")}, {"x": strided}, "c", dev=None)
    assert bound == {"T": 4} and isinstance(arrays[0], np.ndarray)  # no device given: host validation
