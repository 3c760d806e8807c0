"""Trusting a library only as far as it can show: the manifest's sha256 says the file is the one that was built,
but a manifest can be edited together with its hash. So before anything in the library runs, ``load`` checks

- the file as an ELF image (``check_elf``): a shared object for this CPU whose every loaded segment lies inside
  the file; a truncated library would otherwise be mapped past its end and die of SIGBUS on first touch;
- the Relax executable against the manifest (``check_signature``): ``main``'s parameter names in order, and
  the type annotations the executable carries for its runtime checks (the activations', the weights
  ``main_transform_params`` packs, every returned tensor's: dtype and static sizes), so reordered inputs or
  outputs, an edited shape or another case's library are refused instead of mislabelling results or failing
  inside TVM. Two outputs of the same dtype and shape swapped in the manifest stay undetectable: the
  executable does not name its outputs.
"""

from __future__ import annotations

import platform
import re
import struct
from pathlib import Path

ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}
_ET_DYN, _PT_LOAD = 3, 1


def check_elf(lib: Path) -> str | None:
    """Why ``lib`` cannot be a loadable shared object for this CPU, or None."""
    size = lib.stat().st_size
    with open(lib, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return "not a 64-bit little-endian ELF shared object"
        e_type, machine = struct.unpack_from("<HH", head, 16)
        phoff, shoff = struct.unpack_from("<QQ", head, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 54)
        here = ELF_MACHINES.get(platform.machine().lower())
        if e_type != _ET_DYN:
            return "not a shared object"
        if here is not None and machine != here:
            return f"machine code for ELF machine {machine}, not this {platform.machine()}"
        if phoff + phnum * phentsize > size or shoff + shnum * shentsize > size:
            return f"truncated ({size} bytes): its headers point past the end"
        f.seek(phoff)
        table = f.read(phnum * phentsize)
    for i in range(phnum):
        p_type, _flags, offset, _vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
        if p_type == _PT_LOAD and offset + filesz > size:
            return f"truncated ({size} bytes): segment {i} ends at byte {offset + filesz}"
    return None


_TENSOR = re.compile(r'R\.Tensor\(\((.*?)\), dtype="(\w+)"\)')
_PARAM = re.compile(r'ErrorContext\(fn=main, loc=param\[(\d+)\], param=\w+, annotation=(R\.Tensor\(\(.*?\), '
                    r'dtype="\w+"\))')
_WEIGHTS = re.compile(r'ErrorContext\(fn=main_transform_params, loc=param\[0\], param=\w+, annotation=(.*?)\) "[,\]]')
_RETURN = re.compile(r'ErrorContext\(fn=main, loc=return, annotation=(.*?)\) "[,\]]')


def _tensors(text: str) -> list[tuple[tuple, str]]:
    """``R.Tensor((tokens, T.int64(512)), dtype="float32")``... -> [((None, 512), "float32")]: None for a
    symbolic size."""
    out = []
    for dims, dtype in _TENSOR.findall(text):
        sizes = [d.strip() for d in dims.split(",") if d.strip()]
        out.append((tuple(int(m.group(1)) if (m := re.fullmatch(r"(?:T\.int64\()?(\d+)\)?", d)) else None
                         for d in sizes), dtype))
    return out


def _describe(shape: tuple, dtype: str) -> str:
    return f"{dtype} [{', '.join('?' if d is None else str(d) for d in shape)}]"


def _mismatch(lib: tuple[tuple, str], spec: dict) -> bool:
    shape, dtype = lib
    want = tuple(d if isinstance(d, int) else None for d in spec["shape"])
    return dtype != spec["dtype"] or len(shape) != len(want) or any(
        a != b for a, b in zip(shape, want) if a is not None and b is not None)


def check_signature(vm, stats: str, manifest: dict) -> str | None:
    """Why the executable behind ``vm`` (its ``stats()`` text) is not what ``manifest`` describes, or None."""
    inputs, outputs = list(manifest["inputs"].items()), list(manifest["outputs"].items())
    params = [vm._get_function_param_name("main", i) for i in range(vm._get_function_arity("main"))]
    expected = [n for n, _ in inputs]
    if vm.module.implements_function("main_transform_params"):
        # main takes the packed weights (``lv<N>``) after the activations: those lead both lists, in order
        specs = manifest["inputs"]
        module = manifest.get("module")  # a module file's activations: the number it declares
        lead = module["num_input"] if module else next(
            (i for i, p in enumerate(params) if p not in specs or "T" not in specs[p]["shape"]), len(params))
        params, expected = params[:lead], expected[:lead]
    if params != expected:
        i = next((i for i, (a, b) in enumerate(zip(params, expected)) if a != b), min(len(params), len(expected)))
        return (f"main's parameters are {params}, the manifest's inputs {expected}" if i >= min(len(params),
                len(expected)) else f"input {i} is {params[i]!r} in the library, {expected[i]!r} in the manifest")
    for i, annotation in _PARAM.findall(stats):
        (lib,) = _tensors(annotation)
        name, spec = inputs[int(i)]
        if _mismatch(lib, spec):
            return f"input {name!r} is {_describe(*lib)} in the library, {_describe(spec['shape'], spec['dtype'])} " \
                   "in the manifest"
    weights = _WEIGHTS.search(stats)
    if weights is not None:  # the weights main_transform_params packs: the inputs after the activations
        packed, rest = _tensors(weights.group(1)), inputs[len(params):]
        if len(packed) != len(rest):
            return f"the library packs {len(packed)} weights, the manifest names {len(rest)}"
        for lib, (name, spec) in zip(packed, rest):
            if _mismatch(lib, spec):
                return f"weight {name!r} is {_describe(*lib)} in the library, " \
                       f"{_describe(spec['shape'], spec['dtype'])} in the manifest"
    ret = _RETURN.search(stats)
    if ret is not None:
        returned = _tensors(ret.group(1))
        if len(returned) != len(outputs):
            return f"the library returns {len(returned)} tensors, the manifest names {len(outputs)} outputs"
        for k, (lib, (name, spec)) in enumerate(zip(returned, outputs)):
            if _mismatch(lib, spec):
                return (f"output {k} is {_describe(*lib)} in the library, but the manifest's output {k} {name!r} is "
                        f"{_describe(spec['shape'], spec['dtype'])}")
    return None
