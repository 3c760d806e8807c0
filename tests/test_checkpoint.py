"""spec/checkpoint.py: DeepSeek checkpoints read lazily (both layouts, sharded with an index), only the tensors
asked for, a row range without the rest (resident memory measured on a 1 GB-class head), and bad files named."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from checkpoint_files import checkpoint_tensors, read_shard, write_checkpoint, write_shard

from helpers import within
from mtp_tvm.contract.checkpoint import INDEX_FILE, LAYOUTS, Checkpoint, LayoutName, find_layout, read_header
from mtp_tvm.support.errors import UsageError


@pytest.fixture(scope="module", params=list(LayoutName))
def layout_ckpt(request, tmp_path_factory):
    layout = request.param
    return layout, write_checkpoint(tmp_path_factory.mktemp(layout.value), layout)


def test_layout_is_found_from_the_names_and_tensors_read_lazily_from_their_shards(layout_ckpt):
    layout, folder = layout_ckpt
    ckpt = Checkpoint(folder)
    assert find_layout(ckpt) is LAYOUTS[layout]
    assert find_layout(ckpt, layout.value) is LAYOUTS[layout]
    assert len({ckpt.info(n).file for n in ckpt.names()}) == 3  # three shards, the head in one of its own
    head = LAYOUTS[layout].head
    assert ckpt.bytes_read == 0  # opening reads the index and headers only
    expected = checkpoint_tensors(layout)[head]
    rows = ckpt.read_rows(head, 100, 612)
    assert torch.equal(rows, expected[100:612]) and ckpt.bytes_read == rows.numel() * 2


def test_a_row_range_larger_than_a_chunk_is_read_in_chunks_and_equals_the_rows(layout_ckpt, monkeypatch):
    layout, folder = layout_ckpt
    monkeypatch.setattr("mtp_tvm.contract.checkpoint.ROW_CHUNK_BYTES", 3 * 256 * 2)  # three rows a chunk
    seen = []
    ckpt = Checkpoint(folder, on_read=lambda *progress: seen.append(progress))
    head = LAYOUTS[layout].head
    ckpt.read(LAYOUTS[layout].enorm)
    assert torch.equal(ckpt.read_rows(head, 5, 16), checkpoint_tensors(layout)[head][5:16])
    assert seen == [(LAYOUTS[layout].enorm, 512, 512, 512)] + [  # progress after every read and chunk, in bytes
        (head, rows * 512, 11 * 512, 512 + rows * 512) for rows in (3, 6, 9, 11)]


def test_a_column_half_of_v3s_eh_proj_is_its_columns(tmp_path):
    lin = LAYOUTS[LayoutName.V3].h_proj
    tensors = checkpoint_tensors(LayoutName.V3)
    ckpt = Checkpoint(write_checkpoint(tmp_path / "v3", LayoutName.V3, tensors=tensors))
    half = ckpt.read(lin.weight, (256, 512))
    assert half.dtype == torch.float8_e4m3fn and half.shape == (256, 256)
    assert torch.equal(half.view(torch.uint8), tensors[lin.weight][:, 256:].view(torch.uint8))


@pytest.mark.parametrize("damage, message", [
    ("drop_shard", "is in shard 'model-00003-of-00003.safetensors', which is not a file"),
    ("truncate", "run past the end of the file"),
    ("header_only", "the header of"),
    ("bad_json", "the header is not JSON"),
    ("wrong_size", "needs"),
])
def test_damaged_files_are_named_with_the_tensor(tmp_path, damage, message):
    folder = write_checkpoint(tmp_path / "ckpt", LayoutName.V4_FLASH)
    shard = folder / "model-00003-of-00003.safetensors"
    data = shard.read_bytes()
    (n,) = __import__("struct").unpack("<Q", data[:8])
    if damage == "drop_shard":
        shard.unlink()
    elif damage == "truncate":
        shard.write_bytes(data[:-100])
    elif damage == "header_only":
        shard.write_bytes(data[:20])
    elif damage == "bad_json":
        shard.write_bytes(data[:8] + b"{" * n + data[8 + n:])
    else:
        header = json.loads(data[8:8 + n])
        header["head.weight"]["shape"] = [4096, 255]
        raw = json.dumps(header, separators=(",", ":")).encode().ljust(n)
        shard.write_bytes(data[:8] + raw + data[8 + n:])
    with pytest.raises(UsageError, match=message) as err:
        Checkpoint(folder).info("head.weight")
    assert "model-00003-of-00003.safetensors" in str(err.value) and "\n" not in str(err.value)
    if damage in ("truncate", "wrong_size", "drop_shard"):
        assert "head.weight" in str(err.value)



def _overlap(header: dict, data: bytes) -> tuple[dict, bytes]:
    """The second tensor's data offsets moved onto the first's bytes (its size kept)."""
    first, second = sorted((v for k, v in header.items() if k != "__metadata__"), key=lambda v: v["data_offsets"])[:2]
    begin, end = second["data_offsets"]
    second["data_offsets"] = [first["data_offsets"][0], first["data_offsets"][0] + end - begin]
    return header, data


def _long_offset(header: dict, data: bytes) -> tuple[bytes, bytes]:
    header["mtp.0.e_proj.weight"]["data_offsets"][1] = "END"
    return json.dumps(header).replace('"END"', "9" * 5000).encode(), data


@pytest.mark.parametrize("damage, message", [
    (lambda h, d: ({**h, "__metadata__": ["format", "pt"]}, d), "the header's __metadata__ is not a JSON object"),
    (lambda h, d: (b"[" * 100_000 + b"]" * 100_000, d), "the header nests JSON deeper than"),
    (_long_offset, "the header holds a number of over 4300 digits"),
    (_overlap, "tensor 'mtp.0.h_proj.scale': data offsets [0, 4) overlap those of tensor 'mtp.0.e_proj.scale'"),
    (lambda h, d: (h, d + b"junk"), "4 stray bytes follow the tensors' data"),
    ("fifo", "not a regular file; refusing to open it"),
], ids=["metadata-list", "nested-100000-deep", "5000-digit-offset", "overlapping-offsets", "stray-bytes", "fifo"])
def test_headers_past_the_parsers_limits_or_sharing_bytes_or_not_files_are_one_line(tmp_path, damage, message):
    """What safetensors or Python's JSON reader would raise (SafetensorError, RecursionError, ValueError), or a
    FIFO a reader would wait on for ever, is one ``UsageError`` naming the file."""
    folder = write_checkpoint(tmp_path / "ckpt", LayoutName.V4_FLASH)
    shard = folder / "model-00001-of-00003.safetensors"
    if damage == "fifo":  # the only .safetensors of a folder without an index
        for file in folder.iterdir():
            file.unlink()
        os.mkfifo(shard)
    else:
        write_shard(shard, *damage(*read_shard(shard)))
    with within(30), pytest.raises(UsageError, match=re.escape(message)) as err:
        Checkpoint(folder).info("mtp.0.e_proj.weight")
    assert str(err.value).startswith(str(shard)) and "\n" not in str(err.value)


def test_a_folder_without_an_index_is_one_file_or_an_error(tmp_path):
    folder = write_checkpoint(tmp_path / "ckpt", LayoutName.V4_FLASH)
    (folder / INDEX_FILE).unlink()
    with pytest.raises(UsageError, match="3 .safetensors files and no model.safetensors.index.json"):
        Checkpoint(folder)
    one = folder / "model-00003-of-00003.safetensors"
    assert Checkpoint(one).names() == {"head.weight"} == set(read_header(one))
    with pytest.raises(UsageError, match="no tensor 'mtp.0.enorm.weight'"):
        Checkpoint(one).info("mtp.0.enorm.weight")
    with pytest.raises(UsageError, match="holds the marker tensors of none of the known layouts"):
        find_layout(Checkpoint(one))


@pytest.mark.slow
def test_one_tp8_rank_of_a_1gb_head_is_read_within_1_5x_its_bytes_of_resident_memory(tmp_path):
    """A FLASH-size head (129280 x 4096 BF16, 1.06 GB; a sparse file) read as rank 3 of TP 8: the peak resident
    memory (VmHWM after clear_refs) grows by the slice's bytes and a chunk or two, never the whole head."""
    script = f"""
import json, struct, time
from pathlib import Path
from mtp_tvm.contract.checkpoint import Checkpoint
path, vocab, d, tp, rank = Path({str(tmp_path / 'head.safetensors')!r}), 129280, 4096, 8, 3
shard = vocab // tp
header = json.dumps({{"head.weight": {{"dtype": "BF16", "shape": [vocab, d], "data_offsets": [0, vocab * d * 2]}}}})
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header.encode())
    start = f.tell()
    edges = (rank * shard - 1, rank * shard, (rank + 1) * shard - 1, (rank + 1) * shard)
    for row, value in zip(edges, (1.0, 2.0, 3.0, 4.0)):
        f.seek(start + row * d * 2)
        f.write(struct.pack("<H", struct.unpack("<I", struct.pack("<f", value))[0] >> 16) * d)
    f.truncate(start + vocab * d * 2)
def status(key):
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1]) * 1024
ckpt = Checkpoint(path)
ckpt.read_rows("head.weight", 0, 1)  # the libraries loaded before the baseline
open("/proc/self/clear_refs", "w").write("5")
base, t0 = status("VmRSS:"), time.perf_counter()
rows = ckpt.read_rows("head.weight", rank * shard, (rank + 1) * shard)
peak = status("VmHWM:") - base
print(json.dumps({{"slice": rows.numel() * 2, "peak": peak, "seconds": time.perf_counter() - t0,
                  "file": path.stat().st_size, "ends": [float(rows[0, 0]), float(rows[-1, -1])]}}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.splitlines()[-1])
    assert found["file"] > 1e9 and found["slice"] == 16160 * 4096 * 2
    assert found["ends"] == [2.0, 3.0]  # its own first and last rows, not the neighbours' (1.0, 4.0)
    assert found["peak"] < 1.5 * found["slice"], found
