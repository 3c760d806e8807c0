"""Target binaries: a case built into one self-describing folder that loads and runs with TVM's runtime alone,
without the compiler, the model code or (for CUDA) a CUDA compiler.

An artifact folder::

    manifest.json                 what was built, from what, for what; the library's sha256; kernel resources
    library.so | library.tar      ``export_library``; a ``.tar`` of objects for another CPU architecture
    source/host.ll, source/host.s the host module's LLVM IR and assembly (on LLVM targets: the kernels)
    source/kernels.cu             CUDA only: the device code, and source/kernels.<arch>.ptx nvcc made from it

CUDA device code is compiled ahead of time by nvcc into a fatbin for every requested arch and embedded in place
of the CUDA source TVM would embed (see ``embedded.py``). Folders are written atomically: everything goes into a
temporary folder beside the target, which is renamed into place only when complete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tvm
from tvm import relax
from tvm.target import Target

from . import embedded
from .cases import TensorSpec, get_case
from .check import CheckResult, golden_check, validate_seed
from .compiler import CompiledCase, WeightCache, compile, main_args
from .dumps import write_assembly
from .model import leading_activations
from .config import make_shapes
from .cuda_binary import KERNEL_SOURCE, DeviceBinary, compile_fatbin
from .errors import BuildError, UsageError, last_line
from .target import CUDA_ARCHS, cpu_arch, device_for, host_triple, resolve_target, target_json, target_triple
from .tensors import NUMPY_DTYPES, validate_inputs
from .text_table import text_table

FORMAT = "mtp-tvm-artifact/1"
MANIFEST = "manifest.json"
SOURCE_DIR = "source"
SYMBOLIC_DIMS = {"T": "token count: the rows of every token-major tensor; one binary serves any T >= 1",
                 "R": "rows per owner of an owner-major tensor (T / owners); one binary serves any R >= 1"}


# ---- targets and archs --------------------------------------------------------------------------------------

def parse_archs(arch: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"sm_80,sm_90"`` (or a list) -> sorted unique archs; empty when none was asked for."""
    if arch is None:
        return ()
    names = arch.split(",") if isinstance(arch, str) else list(arch)
    archs = tuple(sorted({a.strip() for a in names if a.strip()}))
    bad = [a for a in archs if a not in CUDA_ARCHS]
    if bad or not archs:
        raise UsageError(f"unsupported CUDA arch {', '.join(bad) or repr(arch)}; choose from {', '.join(CUDA_ARCHS)}")
    return archs


def build_target(target: str | dict | Target, archs: tuple[str, ...]) -> Target:
    """The target to compile for: with several archs, the CUDA C is generated for the lowest one and nvcc
    compiles it for each."""
    if archs and target != "cuda":
        raise UsageError("--arch applies to --target cuda (a target JSON object names its own arch)")
    return resolve_target(target, archs[0]) if archs else resolve_target(target)


def _device_archs(target: Target, archs: tuple[str, ...]) -> tuple[str, ...]:
    if target.kind.name != "cuda":
        return ()
    own = str(target.attrs.get("arch", "")) or "sm_90"
    if archs and own not in archs:
        raise UsageError(f"target arch {own} is not among the requested archs {', '.join(archs)}")
    return archs or (own,)


# ---- provenance ---------------------------------------------------------------------------------------------

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
    root = Path(__file__).resolve().parent.parent
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


# ---- manifest -----------------------------------------------------------------------------------------------

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
    if not isinstance(lib.get("file"), str) or "/" in lib["file"] or not _is_sha256(lib.get("sha256")) \
            or not isinstance(lib.get("triple"), str):
        out.append("library: expected a file name in the folder, its sha256 and its target triple")
    if not all(isinstance(m["shapes"].get(k), int) for k in ("tokens", "vocab_shard")):
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


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n")


# ---- building -----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Built:
    """A written artifact: its folder (None for a compile-only build), manifest, and golden check if run."""

    path: Path | None
    manifest: dict
    check: CheckResult | None = None
    compiled: CompiledCase | None = dataclasses.field(default=None, repr=False)  # its dumps, pass records


def _require_device(target: Target) -> None:
    try:
        device_for(target)
    except UsageError:
        raise UsageError(f"--check runs the artifact, and this machine has no {target.kind.name} device: build "
                         "without it and run `mtp-tvm check --artifact DIR` where the device is") from None


def _find_module(mod, kind: str):
    stack = [mod]
    while stack:
        m = stack.pop()
        if m.kind == kind:
            return m
        stack.extend(m.imports)
    return None


def _refuse_existing(out: Path, force: bool) -> None:
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise UsageError(f"{out} already exists; pass --force to replace it")
    if out.is_symlink() or not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file()):
        raise UsageError(f"{out} exists and is not an mtp-tvm artifact; refusing to replace it")


@contextlib.contextmanager
def _staged(out: Path | None, force: bool):
    """A fresh folder to write into; renamed to ``out`` on success, removed (with any parents it created) on
    failure. ``out`` None: a temporary folder, always removed (compile-only builds)."""
    if out is None:
        with tempfile.TemporaryDirectory(prefix="mtp-tvm-build-") as d:
            yield Path(d)
        return
    _refuse_existing(out, force)
    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    except OSError as e:
        raise UsageError(f"cannot create {out}: {e.strerror}") from None
    try:
        yield tmp
        _refuse_existing(out, force)  # it may have appeared while building
        if out.exists():
            old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for p in created:
            with contextlib.suppress(OSError):
                p.rmdir()
        raise


def _compile_device_code(mod, archs: tuple[str, ...], src: Path) -> tuple[bytes, DeviceBinary]:
    """nvcc the CUDA module's source for ``archs`` and return the import blob with the fatbin in its place."""
    tree = embedded.ModuleTree.parse(embedded.pack_imports(mod))
    index, payload = embedded.cuda_payload(tree)
    # Without a CUDA runtime TVM keeps the source as the code; with one it has already JIT-compiled it and
    # kept the source for inspection only.
    source = payload.code.decode() if payload.fmt == "cuda" else _find_module(mod, "cuda").inspect_source("cuda")
    with tempfile.TemporaryDirectory(prefix="mtp-tvm-nvcc-") as work:
        binary = compile_fatbin(source, archs, list(payload.kernels), Path(work))
    (src / KERNEL_SOURCE).write_text(source)
    for arch, ptx in binary.ptx.items():
        (src / f"kernels.{arch}.ptx").write_text(ptx)
    tree.modules[index] = (embedded.CUDA_KIND, payload.with_code("fatbin", binary.fatbin).to_bytes())
    return tree.to_bytes(), binary


def _device_section(binary: DeviceBinary) -> dict:
    return {"format": "fatbin", "archs": list(binary.archs), "sha256": hashlib.sha256(binary.fatbin).hexdigest(),
            "bytes": len(binary.fatbin), "compiler": {"nvcc": binary.nvcc_version, "command": " ".join(binary.command)},
            "kernels": {k: {a: r.as_dict() for a, r in per_arch.items()} for k, per_arch in binary.kernels.items()}}


def _export_library(ex, lib: Path, blob: bytes | None) -> None:
    try:
        if blob is None:
            ex.export_library(str(lib))
        else:
            ex.export_library(str(lib), fpack_imports=embedded.object_packer(blob))
    except Exception as e:  # the C++ toolchain or TVM: keep the last line for the user
        raise BuildError(f"export of {lib.name} failed: {last_line(e)}") from e
    if blob is not None and embedded.read_library_blob(str(lib)) != blob:
        raise BuildError(f"{lib.name} does not embed the compiled device code")


def _write_artifact(folder: Path, compiled: CompiledCase, archs: tuple[str, ...]) -> dict:
    t0 = time.perf_counter()
    c, s, target = compiled.case, compiled.shapes, target_json(compiled.target)
    src = folder / SOURCE_DIR
    src.mkdir()
    host = _find_module(compiled.executable.mod, "llvm")
    (src / "host.ll").write_text(host.inspect_source("ll"))
    with ThreadPoolExecutor(1, thread_name_prefix="mtp-artifact-asm") as pool:  # one backend run beside another
        assembly = pool.submit(write_assembly, src / "host.ll")
        blob, device = None, None
        if archs:
            blob, binary = _compile_device_code(compiled.executable.mod, archs, src)
            device = _device_section(binary)
        triple = target_triple(target)
        lib = folder / ("library.so" if cpu_arch(triple) == cpu_arch(host_triple()) else "library.tar")
        _export_library(compiled.executable, lib, blob)
        assembly.result()
    return {
        "format": FORMAT, "case": c.name, "description": c.description, "preset": s.preset.name,
        "frontend": compiled.frontend, "shapes": s.as_dict(), "symbolic_dims": SYMBOLIC_DIMS,
        "inputs": {n: spec.as_dict() for n, spec in compiled.input_specs.items()},
        "outputs": {n: spec.as_dict() for n, spec in compiled.output_specs.items()},
        "target": target,
        "schedule": {"name": str(getattr(compiled, "schedule", "none")),
                     "trace_sha256": trace_sha256(getattr(compiled, "schedule_traces", {}))},
        "versions": versions(), "git": git_revision(),
        "library": {"file": lib.name, "format": lib.suffix[1:], "triple": triple, "bytes": lib.stat().st_size,
                    "sha256": sha256_file(lib)},
        "sources": sorted(str(p.relative_to(folder)) for p in src.iterdir()),
        "device": device,
        "build": {"compile_seconds": round(compiled.build_seconds, 3),
                  "export_seconds": round(time.perf_counter() - t0, 3),
                  "finished_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")},
        "golden": None,
    }


def export(compiled: CompiledCase, out: str | os.PathLike | None, archs: tuple[str, ...] = (), force: bool = False,
           check: bool = False, seed: int = 0, log=print) -> Built:
    """Write ``compiled`` as an artifact folder ``out`` (None: build in a temporary folder and discard it).
    CUDA device code is compiled for ``archs`` (default: the target's arch). With ``check`` the written
    artifact is loaded back and golden-checked before the folder is renamed into place, and the result is
    recorded in the manifest (a failed check is recorded too: the caller decides what it means)."""
    archs = _device_archs(compiled.target, tuple(archs))
    if check:
        validate_seed(seed)
        _require_device(compiled.target)
    with _staged(None if out is None else Path(out), force) as folder:
        manifest = _write_artifact(folder, compiled, archs)
        _write_json(folder / MANIFEST, manifest)
        result = None
        if check:
            result = check_artifact(load(folder), seed=seed, log=log)
            manifest["golden"] = result.as_dict()
            _write_json(folder / MANIFEST, manifest)
    return Built(None if out is None else Path(out), manifest, result, compiled)


def build(out: str | os.PathLike | None, case: str = "tail", target: str | dict | Target = "llvm",
          arch: str | list[str] | None = None, preset: str = "flash", frontend: str = "tir",
          tokens: int | None = None, vocab_shard: int | None = None,
          dump_passes: bool | str | os.PathLike | None = None, force: bool = False, check: bool = False,
          seed: int = 0, log=print, owners: int | None = None, tp: int | None = None,
          schedule: str = "default", **compile_options) -> Built:
    """Compile ``case`` for ``target`` (CUDA: for every arch in ``arch``) and write it to ``out`` (see
    ``export``). Refuses an existing ``out`` before compiling, unless ``force``. ``compile_options``: the
    debugging keywords of ``compile()`` (dump filters, timing, pass gate, extra passes)."""
    archs = parse_archs(arch)
    tgt = build_target(target, archs)
    if out is not None:
        _refuse_existing(Path(out), force)
    if check:
        validate_seed(seed)
        _require_device(tgt)
    compiled = compile(case=case, target=tgt, preset=preset, frontend=frontend, tokens=tokens,
                       vocab_shard=vocab_shard, dump_passes=dump_passes, owners=owners, tp=tp, schedule=schedule,
                       **compile_options)
    return export(compiled, out, archs=archs, force=force, check=check, seed=seed, log=log)


# ---- loading ------------------------------------------------------------------------------------------------

def _specs(section: dict) -> dict[str, TensorSpec]:
    return {n: TensorSpec(n, tuple(d["shape"]), d["dtype"]) for n, d in section.items()}


@dataclasses.dataclass
class Artifact:
    """A loaded artifact: ``run(inputs) -> outputs`` validated against the manifest's tensors."""

    path: Path
    manifest: dict
    module: tvm.runtime.Module
    device: tvm.runtime.Device
    _vm: relax.VirtualMachine | None = dataclasses.field(default=None, repr=False)
    _weights: WeightCache = dataclasses.field(default_factory=WeightCache, repr=False)

    @property
    def input_specs(self) -> dict[str, TensorSpec]:
        return _specs(self.manifest["inputs"])

    @property
    def output_specs(self) -> dict[str, TensorSpec]:
        return _specs(self.manifest["outputs"])

    def run(self, inputs: dict) -> dict[str, np.ndarray]:
        """Run on named inputs (numpy with ``ml_dtypes.bfloat16`` for BF16, or torch); returns numpy outputs."""
        arrays, _ = validate_inputs(self.input_specs, inputs, f"artifact {self.path}")
        if self._vm is None:
            self._vm = relax.VirtualMachine(self.module, self.device)
        args = main_args(self._vm, self.device, arrays, leading_activations(self.input_specs), self._weights)
        outs = self._vm["main"](*args)
        return {name: outs[i].numpy() for i, name in enumerate(self.output_specs)}


def _runnable_device(path: Path, m: dict) -> tvm.runtime.Device:
    """The device this artifact runs on here, or a one-line reason why it cannot."""
    if m["target"]["kind"] == "cuda":
        archs = m["device"]["archs"]
        dev = tvm.cuda(0)
        if not dev.exist:
            raise UsageError(f"{path} is a CUDA artifact ({', '.join(archs)}) and this machine has no CUDA GPU")
        here = "sm_" + dev.compute_version.replace(".", "")
        if here not in archs:
            raise UsageError(f"{path} has device code for {', '.join(archs)}; this GPU is {here}")
        return dev
    built_for, here = m["library"]["triple"], host_triple()
    if cpu_arch(built_for) != cpu_arch(here):
        raise UsageError(f"{path} is built for {built_for}; this machine is {here}")
    return tvm.cpu(0)


def load(path: str | os.PathLike) -> Artifact:
    """Load an artifact folder; refuses a library that does not match its manifest's sha256, and an artifact
    whose device is not here, each with a one-line reason."""
    path = Path(path)
    m = read_manifest(path)
    lib = path / m["library"]["file"]
    if not lib.is_file():
        raise UsageError(f"{path}: library {lib.name} is missing")
    digest = sha256_file(lib)
    if digest != m["library"]["sha256"]:
        raise UsageError(f"{lib} does not match its manifest (sha256 {digest[:16]}..., manifest "
                         f"{m['library']['sha256'][:16]}...): refusing to load a modified library")
    dev = _runnable_device(path, m)
    try:
        module = tvm.runtime.load_module(str(lib))
    except Exception as e:  # the dynamic loader or a missing TVM runtime: its last line says which
        raise UsageError(f"cannot load {lib}: {last_line(e)}") from None
    return Artifact(path, m, module, dev)


def check_artifact(artifact: Artifact | str | os.PathLike, seed: int = 0, tokens: int | None = None,
                   tolerance: dict | None = None, report: str | os.PathLike | None = None,
                   log=print) -> CheckResult:
    """Golden-check a prebuilt artifact on fresh seeded inputs (any ``tokens``: T is symbolic), no compile."""
    a = artifact if isinstance(artifact, Artifact) else load(artifact)
    m = a.manifest
    c = get_case(m["case"])
    s = make_shapes(m["preset"], m["shapes"]["tokens"] if tokens is None else tokens, m["shapes"]["vocab_shard"],
                    m["shapes"].get("owners"), m["shapes"].get("tp"))
    drawn = {n: spec.as_dict() for n, spec in c.input_specs(s).items()}
    if drawn != m["inputs"]:
        raise UsageError(f"{a.path}: its inputs differ from case {c.name!r} in this mtp_tvm; cannot draw its "
                         "golden inputs")
    result = golden_check(a.run, c, s, m["target"], m["frontend"], seed, m["build"]["compile_seconds"],
                          tolerance=tolerance, log=log)
    if report is not None:
        result.write_report(report)
    return result


def describe(built: Built) -> str:
    """What a build wrote: library, size, hash, and per kernel resources for CUDA."""
    m = built.manifest
    lib, device = m["library"], m["device"]
    archs = f" ({', '.join(device['archs'])})" if device else ""
    lines = [f"built {m['case']} for {m['target']['kind']}{archs} preset={m['preset']} frontend={m['frontend']} "
             f"compile={m['build']['compile_seconds']:.2f}s export={m['build']['export_seconds']:.2f}s",
             f"library {lib['file']} ({lib['triple']}) {lib['bytes']} bytes sha256 {lib['sha256']}"]
    if device:
        rows = [("kernel", "arch", "registers", "smem bytes", "spill st/ld bytes")]
        rows += [(k, a, str(r["registers"]), str(r["shared_memory_bytes"]),
                  f"{r['spill_store_bytes']}/{r['spill_load_bytes']}")
                 for k, per_arch in device["kernels"].items() for a, r in per_arch.items()]
        lines += text_table(rows, rule=False)
    lines.append(f"artifact: {built.path}" if built.path else "compile only: nothing written")
    return "\n".join(lines)
