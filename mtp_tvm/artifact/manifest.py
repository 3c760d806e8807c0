"""The artifact manifest (``manifest.json``): its schema, what it records (case, shapes with T named, target,
schedule and trace hash, versions, git revision, library sha256, build times, CUDA kernel resources, golden
result) and the validation a loader runs before trusting any of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path

import numpy as np
import tvm

from ..compiler.arrays import NUMPY_DTYPES
from ..compiler.options import BuildSpec
from ..support.errors import UsageError

FORMAT = "mtp-tvm-artifact/1"


MANIFEST = "manifest.json"


SOURCE_DIR = "source"


SYMBOLIC_DIMS = {"T": "token count: the rows of every token-major tensor; one binary serves any T >= 1",
                 "R": "rows per owner of an owner-major tensor (T / owners); one binary serves any R >= 1"}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def trace_sha256(traces: dict) -> str | None:
    """One hash over every PrimFunc's schedule trace (sorted by name), None when nothing was traced."""
    if not traces:
        return None
    return hashlib.sha256(json.dumps(sorted((str(k), str(v)) for k, v in traces.items())).encode()).hexdigest()


def git_revision() -> dict:
    """The commit the package was built from, and whether tracked files differed from it."""
    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {"revision": None, "dirty": None}
    if rev.returncode != 0:
        return {"revision": None, "dirty": None}
    return {"revision": rev.stdout.strip(), "dirty": bool(status.stdout.strip())}


def versions() -> dict:
    import torch
    import tvm_ffi

    return {"tvm": tvm.__version__, "tvm_ffi": tvm_ffi.__version__, "torch": torch.__version__,
            "numpy": np.__version__, "python": platform.python_version()}


_RESOURCE_FIELDS = ("registers", "shared_memory_bytes", "spill_store_bytes", "spill_load_bytes",
                    "stack_frame_bytes", "barriers")


_TOP_LEVEL = {"format": str, "case": str, "preset": str, "frontend": str, "shapes": dict, "symbolic_dims": dict,
              "inputs": dict, "outputs": dict, "target": dict, "schedule": dict, "versions": dict, "git": dict,
              "library": dict, "sources": list, "device": (dict, type(None)), "build": dict,
              "golden": (dict, type(None))}


def _is_sha256(v) -> bool:
    return isinstance(v, str) and len(v) == 64 and all(ch in "0123456789abcdef" for ch in v)


def _tensor_problems(where: str, specs, symbolic: dict) -> list[str]:
    if not isinstance(specs, dict) or not specs:
        return [f"{where}: expected a non-empty object of tensors"]
    out = []
    for name, spec in specs.items():
        shape, dtype = (spec.get("shape"), spec.get("dtype")) if isinstance(spec, dict) else (None, None)
        if not isinstance(shape, list) or not all(
                (isinstance(d, int) and not isinstance(d, bool) and d > 0) or d in symbolic for d in shape):
            out.append(f"{where}.{name}.shape: expected sizes and named symbolic dims, got {shape!r}")
        if dtype not in NUMPY_DTYPES:
            out.append(f"{where}.{name}.dtype: unknown dtype {dtype!r}")
    return out


def _device_problems(device: dict) -> list[str]:
    out = []
    archs = device.get("archs")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        return ["device.archs: expected a non-empty list of archs"]
    if device.get("format") != "fatbin" or not _is_sha256(device.get("sha256")):
        out.append("device: expected format 'fatbin' and its sha256")
    kernels = device.get("kernels")
    if not isinstance(kernels, dict) or not kernels:
        return out + ["device.kernels: expected the ptxas report of every kernel"]
    for name, per_arch in kernels.items():
        if not isinstance(per_arch, dict) or sorted(per_arch) != sorted(archs):
            out.append(f"device.kernels.{name}: expected one report per arch {archs}")
            continue
        for arch, res in per_arch.items():
            if not isinstance(res, dict) or not all(isinstance(res.get(f), int) for f in _RESOURCE_FIELDS):
                out.append(f"device.kernels.{name}.{arch}: expected integers {', '.join(_RESOURCE_FIELDS)}")
    return out


MODULE_KINDS = ("torch", "tvmscript")


def _file_name_problem(where: str, name, nested: bool = False) -> list[str]:
    """A file name the manifest gives must name a file of the artifact: relative, no ``..``, no empty part
    (``nested``: under a folder of it, as ``source/...``; else a plain name)."""
    parts = name.split("/") if isinstance(name, str) else None
    if not parts or not all(parts) or any(p in (".", "..") for p in parts) or (len(parts) > 1 and not nested):
        return [f"{where}: expected a file name inside the artifact, got {name!r}"]
    return []


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _module_problems(module, m: dict) -> list[str]:
    """The ``module`` section of a module file's artifact: every field's type and value."""
    if not isinstance(module, dict):
        return [f"module: expected an object, got {type(module).__name__}"]
    out = []
    if not isinstance(module.get("path"), str):
        out.append("module.path: expected the module file's path (a string)")
    if "sha256" in module and not _is_sha256(module["sha256"]):  # absent before bench --artifact ran peers
        out.append(f"module.sha256: expected the module file's sha256, got {module['sha256']!r}")
    if module.get("kind") not in MODULE_KINDS:
        out.append(f"module.kind: expected one of {', '.join(MODULE_KINDS)}, got {module.get('kind')!r}")
    inputs = len(m["inputs"]) if isinstance(m["inputs"], dict) else 0
    if not _int(module.get("num_input")) or not 0 <= module["num_input"] <= inputs:
        out.append(f"module.num_input: expected an integer in [0, {inputs}] (the inputs that are activations), "
                   f"got {module.get('num_input')!r}")
    if not isinstance(module.get("returns_tuple"), bool):
        out.append(f"module.returns_tuple: expected true or false, got {module.get('returns_tuple')!r}")
    elif not module["returns_tuple"] and isinstance(m["outputs"], dict) and len(m["outputs"]) != 1:
        out.append(f"module.returns_tuple: false, but the manifest has {len(m['outputs'])} outputs")
    for key in ("example_inputs", "reference_outputs"):
        out += _file_name_problem(f"module.{key}", module.get(key))
    if not isinstance(module.get("reference"), str):
        out.append("module.reference: expected what the reference outputs are (a string)")
    bounds = module.get("dim_bounds", {})  # absent in an artifact built before --shape
    if not isinstance(bounds, dict) or not all(isinstance(b, list) and len(b) == 2 and _int(b[0]) and
                                               (b[1] is None or _int(b[1])) for b in bounds.values()):
        out.append(f"module.dim_bounds: expected each symbolic size's [lowest, highest or null], got {bounds!r}")
    names = module.get("dim_names", {})  # absent in an artifact built before sizes were said by their Dim names
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        out.append(f"module.dim_names: expected each symbolic size's Dim name (a string), got {names!r}")
    return out


def validate_manifest(m) -> list[str]:
    """Every problem with a manifest, as one line each (empty: valid)."""
    if not isinstance(m, dict):
        return ["manifest: expected a JSON object"]
    out = [f"{k}: missing or not {t.__name__ if isinstance(t, type) else ' or '.join(x.__name__ for x in t)}"
           for k, t in _TOP_LEVEL.items() if not isinstance(m.get(k), t) or (k not in m)]
    if out:
        return out
    if m["format"] != FORMAT:
        out.append(f"format: {m['format']!r} is not {FORMAT!r}")
    symbolic = m["symbolic_dims"]
    out += _tensor_problems("inputs", m["inputs"], symbolic) + _tensor_problems("outputs", m["outputs"], symbolic)
    lib = m["library"]
    out += _file_name_problem("library.file", lib.get("file"))
    if not _is_sha256(lib.get("sha256")) or not isinstance(lib.get("triple"), str):
        out.append("library: expected its sha256 and its target triple")
    for i, name in enumerate(m["sources"]):
        out += _file_name_problem(f"sources[{i}]", name, nested=True)
    if "module" in m:
        out += _module_problems(m["module"], m)
    if "module" not in m and not all(isinstance(m["shapes"].get(k), int) for k in ("tokens", "vocab_shard")):
        out.append("shapes: expected the integer tokens and vocab_shard")
    if not isinstance(m["target"].get("kind"), str):
        out.append("target.kind: missing")
    if not isinstance(m["schedule"].get("name"), str) or not (
            m["schedule"].get("trace_sha256") is None or _is_sha256(m["schedule"]["trace_sha256"])):
        out.append("schedule: expected a name and a trace sha256 (or null)")
    if m["target"].get("kind") == "cuda":
        out += ["device: a CUDA artifact needs its device code section"] if m["device"] is None \
            else _device_problems(m["device"])
    if not isinstance(m["build"].get("finished_utc"), str) or not isinstance(m["build"].get("compile_seconds"),
                                                                            (int, float)):
        out.append("build: expected finished_utc and compile_seconds")
    return out


def is_module_artifact(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a module file's artifact (a folder that is no artifact is not: the case's path refuses
    it, after its own options are checked)."""
    try:
        return "module" in read_manifest(path)
    except UsageError:
        return False


def read_manifest(path: str | os.PathLike) -> dict:
    f = Path(path) / MANIFEST
    try:
        m = json.loads(f.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path} is not an mtp-tvm artifact: no {MANIFEST}") from None
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"cannot read {f}: {e}") from None
    problems = validate_manifest(m)
    if problems:
        raise UsageError(f"{f} is not a valid manifest: {problems[0]}")
    return m


def artifact_file(folder: Path, name: str) -> Path:
    """``folder/name`` (a name ``validate_manifest`` accepted), refused unless it resolves inside the artifact:
    a symlink out of it is never followed."""
    path = folder / name
    root = folder.resolve()
    if not path.resolve().is_relative_to(root):
        raise UsageError(f"{path} leads outside the artifact {folder} (a symlink?); refusing to read it")
    return path


def write_manifest_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n")


def manifest_spec(m: dict) -> BuildSpec:
    """What an artifact is, as the ``BuildSpec`` that built it (its target as the manifest's JSON)."""
    sizes = m["shapes"]
    return BuildSpec(case=m["case"], target=m["target"], preset=m["preset"], frontend=m["frontend"],
                     tokens=sizes["tokens"], vocab_shard=sizes["vocab_shard"], schedule=m["schedule"]["name"],
                     owners=sizes.get("owners"), tp=sizes.get("tp"), cuda_graph=m["build"].get("cuda_graph", False))
