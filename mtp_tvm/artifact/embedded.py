"""The module tree a TVM library embeds, read and rewritten byte for byte.

An exported library carries every non-host module (the Relax VM executable, the CUDA module) serialized in
the symbol ``__tvm_ffi__library_bin``. The layout is tvm-ffi's (``src/ffi/extra/library_module.cc``)::

    <nbytes: u64> <indptr: vec<u64>> <child_indices: vec<u64>> (<kind: str> [<payload: str>])*

where ``str`` is a u64 length and the bytes, ``vec<u64>`` a u64 count and the items, and ``_lib`` (no payload)
marks the host library itself. A CUDA module's payload is ``<fmt: str> <fmap> <code: str>`` (TVM's
``CUDAModuleNode::SaveToBytes``); the runtime JIT-compiles ``code`` at load only when ``fmt`` is ``cuda``,
so swapping source for a fatbin gives a library that needs no CUDA compiler where it is loaded.
"""

from __future__ import annotations

import ctypes
import dataclasses
import struct

import tvm_ffi

from ..support.errors import BuildError

LIBRARY_BIN_SYMBOL = "__tvm_ffi__library_bin"
HOST_PLACEHOLDER = "_lib"
CUDA_KIND = "cuda"


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def u64(self) -> int:
        (v,) = struct.unpack_from("<Q", self.data, self.pos)
        self.pos += 8
        return v

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"truncated at byte {self.pos}: {n} bytes wanted, {len(self.data) - self.pos} left")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def str(self) -> bytes:
        return self.raw(self.u64())

    def u64s(self) -> list[int]:
        n = self.u64()
        return list(struct.unpack(f"<{n}Q", self.raw(8 * n)))

    def at_end(self) -> bool:
        return self.pos == len(self.data)


def _str(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _u64s(v: list[int]) -> bytes:
    return struct.pack(f"<Q{len(v)}Q", len(v), *v)


@dataclasses.dataclass
class ModuleTree:
    """The embedded modules in import-tree order (CSR ``indptr``/``children``); payload None for ``_lib``."""

    indptr: list[int]
    children: list[int]
    modules: list[tuple[str, bytes | None]]

    @classmethod
    def parse(cls, blob: bytes) -> ModuleTree:
        r = _Reader(blob)
        if r.u64() != len(blob) - 8:
            raise ValueError("embedded module blob: length header does not match its size")
        indptr, children = r.u64s(), r.u64s()
        modules = []
        for _ in range(len(indptr) - 1):
            kind = r.str().decode()
            modules.append((kind, None if kind == HOST_PLACEHOLDER else r.str()))
        if not r.at_end():
            raise ValueError(f"embedded module blob: {len(blob) - r.pos} trailing bytes")
        return cls(indptr, children, modules)

    def to_bytes(self) -> bytes:
        body = _u64s(self.indptr) + _u64s(self.children) + b"".join(
            _str(kind.encode()) + (b"" if payload is None else _str(payload)) for kind, payload in self.modules)
        return struct.pack("<Q", len(body)) + body


@dataclasses.dataclass(frozen=True)
class CudaPayload:
    """A serialized CUDA module: ``fmt`` (``cuda`` = source, else ``ptx``/``cubin``/``fatbin``), the raw
    function-info map, and the code. ``kernels`` are the fmap's keys (the launchable kernel names)."""

    fmt: str
    fmap: bytes
    code: bytes
    kernels: tuple[str, ...]

    @classmethod
    def parse(cls, payload: bytes) -> CudaPayload:
        r = _Reader(payload)
        fmt = r.str().decode()
        start, kernels = r.pos, []
        for _ in range(r.u64()):  # Map<String, FunctionInfo>
            kernels.append(r.str().decode())
            r.str()  # name
            r.raw(4 * r.u64())  # arg_types: DLDataType (u8 code, u8 bits, u16 lanes)
            for _ in range(r.u64()):  # launch_param_tags
                r.str()
            r.raw(4 * r.u64())  # arg_extra_tags: int32
        fmap = payload[start:r.pos]
        code = r.str()
        if not r.at_end():
            raise ValueError("CUDA module payload: trailing bytes after the code")
        return cls(fmt, fmap, code, tuple(kernels))

    def with_code(self, fmt: str, code: bytes) -> CudaPayload:
        return dataclasses.replace(self, fmt=fmt, code=code)

    def to_bytes(self) -> bytes:
        return _str(self.fmt.encode()) + self.fmap + _str(self.code)


def pack_imports(module) -> bytes:
    """The blob ``export_library`` would embed for ``module`` (TVM's own serializer)."""
    return bytes(tvm_ffi.get_global_func("runtime.ModulePackImportsToTensor")(module).numpy())


def cuda_payload(tree: ModuleTree) -> tuple[int, CudaPayload]:
    """The one CUDA module of ``tree`` and its index."""
    found = [(i, p) for i, (kind, p) in enumerate(tree.modules) if kind == CUDA_KIND]
    if len(found) != 1:
        raise BuildError(f"expected one CUDA module in the library, found {len(found)}")
    index, payload = found[0]
    return index, CudaPayload.parse(payload)


def object_packer(blob: bytes):
    """An ``export_library(fpack_imports=...)`` hook that embeds ``blob`` instead of TVM's own packing; the
    object is emitted by TVM's LLVM blob codegen for the host module's target."""

    def pack(module, is_system_lib: bool, symbol_prefix: str, workspace_dir: str) -> str:
        host = module.imports[0]
        target = host.get_function("_get_target_string")()
        obj = tvm_ffi.get_global_func("codegen.codegen_blob")(blob, is_system_lib, target, symbol_prefix)
        path = f"{workspace_dir}/{symbol_prefix}devc.o"
        obj.write_to_file(path)
        return path

    return pack


def read_library_blob(library_path: str) -> bytes:
    """The embedded blob of a shared library built for this host, read through the dynamic loader (no TVM
    module is created, so this works for CUDA libraries on machines without a GPU)."""
    lib = ctypes.CDLL(library_path)
    (nbytes,) = struct.unpack("<Q", bytes((ctypes.c_ubyte * 8).in_dll(lib, LIBRARY_BIN_SYMBOL)))
    return bytes((ctypes.c_ubyte * (nbytes + 8)).in_dll(lib, LIBRARY_BIN_SYMBOL))
