"""Target binaries: a case built into one self-describing folder that loads and runs with TVM's runtime alone,
without the compiler, the model code or (for CUDA) a CUDA compiler.

An artifact folder::

    manifest.json                 what was built, from what, for what; the library's sha256; kernel resources
    library.so | library.tar      ``export_library``; a ``.tar`` of objects for another CPU architecture
    source/host.ll, source/host.s the host module's LLVM IR and assembly (on LLVM targets: the kernels)
    source/kernels.cu             CUDA only: the device code, and source/kernels.<arch>.ptx nvcc made from it

CUDA device code is compiled ahead of time by nvcc into a fatbin for every requested arch and embedded in place
of the CUDA source TVM would embed (see ``embedded.py``). This module writes them
(``build``, ``export``); ``manifest.py`` defines and validates the manifest, ``load.py`` runs one. Folders are
written atomically: everything goes into a
temporary folder beside the target (``.<DIR>.partial-<pid>-<id>``), which is swapped into place only when
complete (and, with ``--check``, only when it passed); the next build removes the partial folders of killed ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tvm.target import Target

from ..artifact import embedded
from ..artifact.cuda_binary import KERNEL_SOURCE, DeviceBinary, compile_fatbin
from ..artifact.load import check_artifact, load
from ..artifact.manifest import (
    FORMAT,
    MANIFEST,
    SOURCE_DIR,
    SYMBOLIC_DIMS,
    git_revision,
    sha256_file,
    trace_sha256,
    versions,
    write_manifest_json,
)
from ..artifact.module_artifact import module_identity
from ..compiler.compiled import Compiled
from ..compiler.driver import CompiledCase
from ..compiler.options import DebugOptions, Spec, require_path
from ..contract.cases import validate_seed
from ..passes.codegen import write_assembly
from ..passes.target import (
    CUDA_ARCHS,
    cpu_arch,
    device_for,
    host_triple,
    is_gpu,
    resolve_target,
    target_json,
    target_triple,
)
from ..support.atomic_file import (
    make_temp_dir,
    remove_own_temps,
    remove_stale,
    replace_dir,
    require_name_fits,
    temp_prefix,
)
from ..support.errors import BuildError, UsageError, last_line
from ..support.text_table import text_table
from ..support.timing import phase
from ..verify.results import CheckResult
from ..verify.subject import ModuleSubject, Subject, subject_of


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
    if not is_gpu(target):
        return ()
    own = str(target.attrs.get("arch", "")) or "sm_90"
    if archs and own not in archs:
        raise UsageError(f"target arch {own} is not among the requested archs {', '.join(archs)}")
    return archs or (own,)


@dataclasses.dataclass
class Built:
    """A written artifact: its folder (None for a compile-only build), manifest, and golden check if run."""

    path: Path | None
    manifest: dict
    check: CheckResult | None = None
    compiled: Compiled | None = dataclasses.field(default=None, repr=False)  # its dumps, pass records


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


def _artifact_files(folder: Path) -> set[str] | None:
    """The files an artifact folder consists of, by its manifest (None: it has no readable manifest)."""
    try:
        m = json.loads((folder / MANIFEST).read_text())
        return {MANIFEST, str(m["library"]["file"]), *map(str, m["sources"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _replaceable(folder: Path) -> bool:
    """Only an empty folder, or an artifact folder holding nothing but its own files, may be replaced: never a
    symlink, a file, or a folder with the user's files in it."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    found = {str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir() or p.is_symlink()}
    own = _artifact_files(folder) if found else set()
    return own is not None and found <= own


def refuse_existing(out: Path, force: bool) -> None:
    require_name_fits(out, "")
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise UsageError(f"{out} already exists; pass --force to replace it")
    if not _replaceable(out):
        raise UsageError(f"{out} exists and is not an mtp-tvm artifact (or holds files of yours); refusing to "
                         "replace it")


PARTIAL = "partial"  # the folder a build writes into: .<DIR>.partial-<pid>-<random>


@dataclasses.dataclass
class _Stage:
    """The folder being written; ``discard()`` drops it at the end instead of swapping it in."""

    path: Path
    keep: bool = True

    def discard(self) -> None:
        self.keep = False


@contextlib.contextmanager
def _staged(out: Path | None, force: bool):
    """A ``_Stage`` to write into, swapped in for ``out`` (``replace_dir``) when the block ends unless discarded;
    on a failure, an interrupt or a discard it is removed with any parents it created, and ``out`` is as it was.
    ``out`` None: a temporary folder, always removed (compile-only builds). The partial folders of killed
    builds are removed first; a write error (a full disk) is one line."""
    if out is None:
        with tempfile.TemporaryDirectory(prefix="mtp-tvm-build-") as d:
            yield _Stage(Path(d))
        return
    refuse_existing(out, force)
    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    prefix = temp_prefix(out, PARTIAL)
    try:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            remove_stale(out, PARTIAL)
            stage = _Stage(make_temp_dir(prefix, out.parent))
        except OSError as e:
            raise UsageError(f"cannot create {out}: {e.strerror}") from None
        yield stage
        if stage.keep:
            refuse_existing(out, force)  # it may have appeared while building
            replace_dir(stage.path, out, _replaceable)
            created = []
    except OSError as e:  # a full disk, a quota, a race with another writer: one line, nothing left behind
        raise UsageError(f"cannot write artifact {out} ({e.strerror}): {e.filename or out}; {out} is as it was"
                         ) from None
    finally:
        remove_own_temps(prefix, out.parent)  # by name: an interrupt may land inside make_temp_dir
        for p in created:
            with contextlib.suppress(OSError):
                p.rmdir()


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


def case_identity(compiled: CompiledCase, _folder: Path) -> dict:
    """What a case's manifest says it is: the case, its sizes and tensors."""
    c, s = compiled.case, compiled.shapes
    return {"case": c.name, "description": c.description, "preset": s.preset.name, "frontend": compiled.frontend,
            "shapes": s.as_dict(), "symbolic_dims": SYMBOLIC_DIMS}


def _write_artifact(folder: Path, compiled: Compiled, archs: tuple[str, ...], identity) -> dict:
    t0 = time.perf_counter()
    target = target_json(compiled.target)
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
        "format": FORMAT, **identity(compiled, folder),
        "inputs": {n: spec.as_dict() for n, spec in compiled.input_specs.items()},
        "outputs": {n: spec.as_dict() for n, spec in compiled.output_specs.items()},
        "target": target,
        "schedule": {"name": compiled.schedule, "trace_sha256": trace_sha256(compiled.schedule_traces),
                     "unscheduled": list(compiled.unscheduled)},
        "versions": versions(), "git": git_revision(),
        "library": {"file": lib.name, "format": lib.suffix[1:], "triple": triple, "bytes": lib.stat().st_size,
                    "sha256": sha256_file(lib)},
        "sources": sorted(str(p.relative_to(folder)) for p in src.iterdir()),
        "device": device,
        "build": {"compile_seconds": round(compiled.build_seconds, 3), "cuda_graph": compiled.cuda_graph,
                  "huge_page_weights": compiled.huge_page_weights,
                  "export_seconds": round(time.perf_counter() - t0, 3),
                  "finished_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")},
        "golden": None,
    }


def export(compiled: Compiled, out: str | os.PathLike | None, archs: tuple[str, ...] = (), force: bool = False,
           check: bool = False, seed: int = 0, log=print, identity=case_identity) -> Built:
    """Write ``compiled`` as an artifact folder ``out`` (None: build in a temporary folder and discard it).
    ``identity(compiled, folder)`` says what the binary is in the manifest (and may write files of its own into
    the folder: ``artifact.module_artifact``).
    CUDA device code is compiled for ``archs`` (default: the target's arch). With ``check`` the written
    artifact is loaded back and golden-checked before the folder is renamed into place, and the result is
    recorded in the manifest; an artifact that fails its check is not written (``Built.path`` None), and an
    existing ``out`` stays as it was."""
    archs = _device_archs(compiled.target, tuple(archs))
    if check:
        validate_seed(seed)
        _require_device(compiled.target)
    with phase("build"), _staged(None if out is None else Path(out), force) as stage:  # export: part of a build
        manifest = _write_artifact(stage.path, compiled, archs, identity)
        write_manifest_json(stage.path / MANIFEST, manifest)
        result = None
        if check:
            result = check_artifact(load(stage.path), seed=seed, log=log)
            manifest["golden"] = result.as_dict()
            write_manifest_json(stage.path / MANIFEST, manifest)
            if not result.passed:  # a failed check never replaces a good artifact, nor lands as one
                stage.discard()
    written = out is not None and (result is None or result.passed)
    return Built(Path(out) if written else None, manifest, result, compiled)


def build(out: str | os.PathLike | None, spec: Spec | Subject | str | os.PathLike | None = None,
          debug: DebugOptions | None = None, *, arch: str | list[str] | None = None, force: bool = False,
          check: bool = False, seed: int = 0, log=print, **options) -> Built:
    """Compile ``spec`` (a ``verify.subject.Subject``, or what makes one: a case's ``BuildSpec``, or a module
    file: its path, a ``ModuleSpec`` or ``module=``; keywords: the fields of the spec and of ``DebugOptions``, as
    for ``compile``; for CUDA, for every arch in ``arch``) and write it to ``out`` (see ``export``); a module
    file's artifact also holds its example inputs and reference outputs (``artifact.module_artifact``). Refuses
    an existing ``out`` before compiling, unless ``force``."""
    subject, debug = subject_of(spec, debug, options, "build")
    require_path("out", out, optional=True)
    archs = parse_archs(arch)
    subject = subject.rebuilt(dataclasses.replace(subject.spec, target=build_target(subject.spec.target, archs)))
    if out is not None:
        refuse_existing(Path(out), force)
    if check:
        validate_seed(seed)
        _require_device(subject.spec.resolved_target)
    identity = module_identity if isinstance(subject, ModuleSubject) else case_identity
    return export(subject.build(debug), out, archs=archs, force=force, check=check, seed=seed, log=log,
                  identity=identity)


def describe(built: Built) -> str:
    """What a build wrote: library, size, hash, per kernel resources for CUDA, and the user passes that changed
    nothing."""
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
    lines += [f"[passes] warning: {why}" for why in (built.compiled.idle_passes if built.compiled else [])]
    lines.append(f"artifact: {built.path}" if built.path else "compile only: nothing written")
    return "\n".join(lines)
