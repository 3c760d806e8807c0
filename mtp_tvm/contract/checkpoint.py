"""DeepSeek checkpoints read lazily from safetensors: one file or shards named by ``model.safetensors.index.json``,
only the tensors asked for, a row range of a tensor (a TP rank's LM-head rows) without the rest, and the name
maps of the two MTP layouts (``LAYOUTS``).

Every header is read and checked by hand before ``safe_open`` maps a file (dtype, shape, data offsets inside the
file), so a bad checkpoint is one ``UsageError`` naming the file and the tensor, not a safetensors error naming
neither. ``safe_open`` maps the whole file: the pages a read touches count in this process's resident memory
until the handle closes, so a row range is read in chunks, each through a handle of its own, and resident memory
stays near the rows' own bytes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path

from ..support import plain_files
from ..support.choice import Choice
from ..support.errors import UsageError
from ..support.lazy import lazy_module

torch = lazy_module("torch")
safetensors = lazy_module("safetensors")

INDEX_FILE = "model.safetensors.index.json"
FP8_BLOCK = 128  # DeepSeek's FP8 weights carry one scale per 128 x 128 block
ROW_CHUNK_BYTES = 8 << 20  # a row range is read this much at a time, each chunk's mapping dropped after it
DTYPE_BYTES = {"F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1, "BF16": 2, "F16": 2,
               "I16": 2, "F32": 4, "I32": 4, "F64": 8, "I64": 8}
_HEADER_MAX = 100 << 20  # a header longer than this is not a safetensors header


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """Where one tensor's bytes are: its file, dtype (the header's spelling, ``F8_E4M3``), shape, and data
    offsets ``[start, end)`` from the start of the file."""

    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    def where(self) -> str:
        return f"{self.file}: tensor {self.name!r}"


def read_header(path: Path) -> dict[str, TensorInfo]:
    """The tensors of one safetensors file, each checked: a known dtype, offsets that match its shape and lie
    inside the file, the data of every tensor its own and the file's last bytes (a truncated file, a corrupt
    header or stray bytes are a ``UsageError`` naming the file and tensor). Only a regular file is opened: a FIFO
    would block the reader."""
    try:
        with plain_files.open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise UsageError(f"{path}: not a safetensors file ({size} bytes, no header length)")
            (n,) = struct.unpack("<Q", head)
            if n > _HEADER_MAX or 8 + n > size:
                raise UsageError(f"{path}: the header of {n} bytes runs past the end of the file ({size} bytes): "
                                 "truncated or not a safetensors file")
            raw = f.read(n)
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    header = _parse_header(path, raw)
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise UsageError(f"{path}: the header's __metadata__ is not a JSON object of strings")
    data_start = 8 + n
    infos = {name: _tensor_info(path, name, entry, data_start, size) for name, entry in header.items()}
    _require_tiled(path, list(infos.values()), data_start, size)
    return infos


def _parse_header(path: Path, raw: bytes) -> dict:
    """The header's JSON object; JSON past the parser's limits (nesting, an integer's digits) is refused too."""
    try:
        header = json.loads(raw)
    except RecursionError:
        raise UsageError(f"{path}: the header nests JSON deeper than {sys.getrecursionlimit()} levels: not a "
                         "safetensors header") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{path}: the header is not JSON ({e})") from None
    except ValueError:  # int() of a number longer than the interpreter converts
        raise UsageError(f"{path}: the header holds a number of over {sys.get_int_max_str_digits()} digits: not a "
                         "safetensors header") from None
    if not isinstance(header, dict):
        raise UsageError(f"{path}: the header is not a JSON object")
    return header


def _require_tiled(path: Path, infos: list[TensorInfo], data_start: int, size: int) -> None:
    """The tensors' data, in offset order, covers the data section exactly, as safetensors demands: no two
    tensors share a byte, no byte between them or after the last belongs to none."""
    end, last = data_start, None
    for info in sorted(infos, key=lambda i: (i.start, i.end)):
        if info.start < end:
            raise UsageError(f"{info.where()}: data offsets [{info.start - data_start}, {info.end - data_start}) "
                             f"overlap those of tensor {last.name!r}")
        if info.start > end:
            raise UsageError(f"{info.where()}: data offsets start at {info.start - data_start}, but the data before "
                             f"ends at {end - data_start}: {info.start - end} bytes belong to no tensor")
        end, last = info.end, info
    if end != size:
        raise UsageError(f"{path}: {size - end} stray bytes follow the tensors' data (it ends at byte {end}, the "
                         f"file at {size})")


def _tensor_info(path: Path, name: str, entry, data_start: int, size: int) -> TensorInfo:
    where = f"{path}: tensor {name!r}"
    try:
        dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
    except (TypeError, KeyError, ValueError):
        raise UsageError(f"{where}: header entry without dtype, shape and data_offsets") from None
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"{where}: unknown dtype {dtype!r}")
    if not all(isinstance(d, int) and d >= 0 for d in (*shape, begin, end)):
        raise UsageError(f"{where}: shape {list(shape)} or data offsets [{begin}, {end}] are not sizes")
    if end - begin != math.prod(shape) * DTYPE_BYTES[dtype]:
        raise UsageError(f"{where}: data offsets [{begin}, {end}) hold {end - begin} bytes, but {dtype} "
                         f"{list(shape)} needs {math.prod(shape) * DTYPE_BYTES[dtype]}")
    if data_start + end > size:
        raise UsageError(f"{where}: data offsets [{begin}, {end}) run past the end of the file ({size - data_start} "
                         "data bytes): the file is truncated")
    return TensorInfo(name, path, dtype, shape, data_start + begin, data_start + end)


class Checkpoint:
    """A checkpoint folder (one ``.safetensors`` file, or shards and ``model.safetensors.index.json``) or one
    file. Headers are read when a tensor of their shard is first asked for; ``bytes_read`` counts the tensor
    bytes read, and ``on_read(name, done, total, bytes_read)`` is called after each read or chunk (a progress
    line: ``done`` of the tensor's ``total`` bytes asked for, ``bytes_read`` in all)."""

    def __init__(self, path: str | os.PathLike, on_read: Callable[[str, int, int, int], None] | None = None):
        self.path = Path(path)
        self.on_read = on_read
        self.bytes_read = 0
        self._headers: dict[Path, dict[str, TensorInfo]] = {}
        self.index: Path | None = None
        try:
            self._shards = self._find_shards()
        except OSError as e:  # a folder or file of it this user may not read
            raise UsageError(f"{e.filename or self.path}: cannot read: {e.strerror}") from None

    def _find_shards(self) -> dict[str, Path]:
        """Tensor name -> its file."""
        if self.path.is_file():
            return self._one_file(self.path)
        if not self.path.is_dir():
            raise UsageError(f"{self.path}: no such checkpoint file or folder")
        index = self.path / INDEX_FILE
        if index.is_file():
            self.index = index
            return self._read_index(index)
        files = sorted(self.path.glob("*.safetensors"))
        if len(files) != 1:
            raise UsageError(f"{self.path}: {len(files)} .safetensors files and no {INDEX_FILE} naming their "
                             "tensors" if files else f"{self.path}: no .safetensors file")
        return self._one_file(files[0])

    def _one_file(self, file: Path) -> dict[str, Path]:
        self._headers[file] = read_header(file)
        return dict.fromkeys(self._headers[file], file)

    def _read_index(self, index: Path) -> dict[str, Path]:
        try:
            weight_map = json.loads(plain_files.read_text(index))["weight_map"]
        except (UnicodeDecodeError, ValueError, RecursionError, KeyError, TypeError) as e:  # OSError: the caller
            raise UsageError(f"{index}: not a safetensors index with a weight_map ({type(e).__name__})") from None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise UsageError(f"{index}: weight_map must map tensor names to shard file names")
        shards = {}
        for name, shard in weight_map.items():
            file = self.path / shard
            if Path(shard).name != shard or not file.is_file():
                raise UsageError(f"{index}: tensor {name!r} is in shard {shard!r}, which is not a file in "
                                 f"{self.path}")
            shards[name] = file
        return shards

    def names(self) -> set[str]:
        return set(self._shards)

    def files(self) -> list[Path]:
        """Every file the checkpoint is read from: its index (if it has one) and its shards."""
        return ([] if self.index is None else [self.index]) + sorted(set(self._shards.values()))

    def info(self, name: str) -> TensorInfo:
        """The tensor's dtype, shape and offsets (its shard's header read and checked, no data)."""
        file = self._shards.get(name)
        if file is None:
            raise UsageError(f"{self.path}: no tensor {name!r} in the checkpoint")
        if file not in self._headers:
            self._headers[file] = read_header(file)
        info = self._headers[file].get(name)
        if info is None:
            raise UsageError(f"{file}: tensor {name!r}, which {INDEX_FILE} places there, is not in the file")
        return info

    def expect(self, name: str, dtype: str, shape: tuple[int, ...], why: str = "") -> TensorInfo:
        """``info(name)``, refused unless it has this dtype and shape (``why``: what asked for them)."""
        info = self.info(name)
        if info.dtype != dtype:
            raise UsageError(f"{info.where()} has dtype {info.dtype}, expected {dtype}{why}")
        if info.shape != tuple(shape):
            raise UsageError(f"{info.where()} has shape {list(info.shape)}, expected {list(shape)}{why}")
        return info

    def _count(self, name: str, nbytes: int, done: int, total: int) -> None:
        self.bytes_read += nbytes
        if self.on_read is not None:
            self.on_read(name, done, total, self.bytes_read)

    def read(self, name: str, columns: tuple[int, int] | None = None) -> torch.Tensor:
        """The whole tensor, or its ``columns`` range (a 2-D tensor's ``[:, a:b]``)."""
        info = self.info(name)
        with safetensors.safe_open(str(info.file), framework="pt") as f:
            t = f.get_tensor(name) if columns is None else f.get_slice(name)[:, columns[0]:columns[1]]
        nbytes = t.numel() * t.element_size()
        self._count(name, nbytes, nbytes, nbytes)
        return t

    def read_rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows ``[start, stop)`` of a tensor, read in chunks of about ``ROW_CHUNK_BYTES`` through a handle
        each (its mapping, and the pages it touched, released after the chunk): never the other rows."""
        info = self.info(name)
        if not 0 <= start < stop <= info.shape[0]:
            raise UsageError(f"{info.where()}: rows [{start}, {stop}) are outside its {info.shape[0]} rows")
        row_bytes = max(1, math.prod(info.shape[1:]) * DTYPE_BYTES[info.dtype])
        step = max(1, ROW_CHUNK_BYTES // row_bytes)
        out = None
        for a in range(start, stop, step):
            b = min(stop, a + step)
            with safetensors.safe_open(str(info.file), framework="pt") as f:
                part = f.get_slice(name)[a:b]
                if out is None:
                    out = torch.empty((stop - start, *info.shape[1:]), dtype=part.dtype)
                out[a - start:b - start] = part
                del part
            self._count(name, (b - a) * row_bytes, (b - start) * row_bytes, (stop - start) * row_bytes)
        return out


class LayoutName(Choice):
    """The checkpoint layouts ``--layout`` names (``LAYOUTS`` holds their tensor names)."""

    V3 = "deepseek-v3"
    V4_FLASH = "deepseek-v4-flash"


@dataclasses.dataclass(frozen=True)
class FP8Linear:
    """An FP8 e4m3 linear ``[out, in]`` with one scale per 128 x 128 block; ``half`` 0 or 1: the left or right
    column half of a weight that holds two linears side by side (V3's ``eh_proj``), None: the whole weight."""

    weight: str
    scale: str
    scale_dtype: str
    half: int | None = None


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a layout keeps the MTP tail's weights; ``marker``: the tensor that tells the layout apart."""

    name: LayoutName
    e_proj: FP8Linear
    h_proj: FP8Linear
    enorm: str
    hnorm: str
    norm: str
    head: str
    marker: str


_V3 = "model.layers.61."  # DeepSeek-V3/V3.1: the MTP module is the layer after the 61 decoder layers
LAYOUTS: dict[LayoutName, Layout] = {
    LayoutName.V3: Layout(
        LayoutName.V3,
        FP8Linear(f"{_V3}eh_proj.weight", f"{_V3}eh_proj.weight_scale_inv", "F32", half=0),
        FP8Linear(f"{_V3}eh_proj.weight", f"{_V3}eh_proj.weight_scale_inv", "F32", half=1),
        f"{_V3}enorm.weight", f"{_V3}hnorm.weight", f"{_V3}shared_head.norm.weight",
        f"{_V3}shared_head.head.weight", marker=f"{_V3}eh_proj.weight"),
    LayoutName.V4_FLASH: Layout(
        LayoutName.V4_FLASH,
        FP8Linear("mtp.0.e_proj.weight", "mtp.0.e_proj.scale", "F8_E8M0"),
        FP8Linear("mtp.0.h_proj.weight", "mtp.0.h_proj.scale", "F8_E8M0"),
        "mtp.0.enorm.weight", "mtp.0.hnorm.weight", "mtp.0.norm.weight", "head.weight",
        marker="mtp.0.e_proj.weight"),
}


def find_layout(ckpt: Checkpoint, name: str | None = None) -> Layout:
    """The layout ``name`` (``--layout``), or the one whose marker tensor the checkpoint holds."""
    if name is not None:
        return LAYOUTS[LayoutName.parse(name, "layout")]
    found = [layout for layout in LAYOUTS.values() if layout.marker in ckpt.names()]
    if len(found) != 1:
        markers = ", ".join(f"{layout.marker} ({layout.name})" for layout in LAYOUTS.values())
        raise UsageError(f"{ckpt.path}: holds the marker tensors of {'several' if found else 'none'} of the known "
                         f"layouts ({markers}); pass --layout")
    return found[0]
