"""``load``: an artifact folder back as a runnable ``Artifact``, with TVM's runtime alone. It refuses a library whose
sha256 differs from its manifest or whose image or signature is not what the manifest says (``library_check``),
a CUDA artifact on a machine without a GPU, another CPU's binary, and one that failed its recorded golden check;
inputs are validated against the manifest. ``check_artifact`` golden-checks one on fresh seeded inputs.
"""

from __future__ import annotations

import dataclasses
import os
import platform
from collections.abc import Mapping
from pathlib import Path

import tvm
import tvm_ffi
from tvm.runtime.vm import VirtualMachine
from tvm_ffi.libinfo import load_lib_ctypes

from ..artifact.library_check import check_elf, check_signature
from ..artifact.manifest import artifact_file, manifest_spec, read_manifest, sha256_file
from ..compiler.options import require_path
from ..compiler.runtime import Runnable
from ..compiler.weights import WeightCache
from ..contract.cases import Case, TensorDecl, get_case
from ..contract.presets import Shapes
from ..passes.target import cpu_arch
from ..support.errors import UsageError, last_line
from ..verify.golden_check import GoldenOptions, Provenance, golden_check, validate_check_args
from ..verify.results import CheckResult
from ..verify.tolerances import RatioTolerance


def _specs(section: dict) -> dict[str, TensorDecl]:
    return {n: TensorDecl(n, tuple(d["shape"]), d["dtype"]) for n, d in section.items()}


@dataclasses.dataclass
class Artifact(Runnable):
    """A loaded artifact: ``run(inputs) -> outputs`` validated against the manifest's tensors."""

    path: Path
    manifest: dict
    module: tvm.runtime.Module
    device: tvm.runtime.Device
    _vm: VirtualMachine | None = dataclasses.field(default=None, repr=False)
    _weights: WeightCache = dataclasses.field(default_factory=WeightCache, repr=False)

    @property
    def input_specs(self) -> dict[str, TensorDecl]:
        return _specs(self.manifest["inputs"])

    @property
    def output_specs(self) -> dict[str, TensorDecl]:
        return _specs(self.manifest["outputs"])

    def _runtime(self):
        return self.module, self.device, f"artifact {self.path}"

    @property
    def cuda_graph(self) -> bool:
        return bool(self.manifest["build"].get("cuda_graph", False))

    @property
    def huge_page_weights(self) -> bool:
        return bool(self.manifest["build"].get("huge_page_weights", False))  # (artifacts before it: TVM's pages)

    @property
    def num_input(self) -> int:
        module = self.manifest.get("module")
        return module["num_input"] if module else super().num_input

    @property
    def returns_tuple(self) -> bool:
        module = self.manifest.get("module")
        return module["returns_tuple"] if module else True

    def make_inputs(self, tokens: int | None = None, seed: int = 0, shapes: dict | None = None) -> dict:
        """The seeded inputs of the case; a module file's artifact runs on the example inputs stored in it, or at
        ``shapes`` (input name -> shape) on seeded ones."""
        if "module" in self.manifest:
            from ..artifact.module_reference import stored_inputs

            return stored_inputs(self, tokens, seed, shapes)
        if shapes:
            raise UsageError(f"{self.path} is a case's artifact: --tokens sizes it, --shape applies to a module file's")
        return super().make_inputs(tokens, seed)

    def sized(self, tokens: int | None = None) -> tuple[Case, Shapes]:
        """The manifest's case and sizes at ``tokens``; refused when this mtp_tvm's case has other inputs (the
        seeded inputs, and so the golden, would not be the artifact's)."""
        m = self.manifest
        c = get_case(m["case"])
        s = manifest_spec(m).shapes(tokens)
        c.check_shapes(s)  # the sizes a fresh check refuses (T a multiple of the owners) are refused here too
        drawn = {n: spec.as_dict() for n, spec in c.input_specs(s).items()}
        if drawn != m["inputs"]:
            raise UsageError(f"{self.path}: its inputs differ from case {c.name!r} in this mtp_tvm; cannot draw its "
                             "golden inputs")
        return c, s


def _cuda_runtime() -> str | None:
    """Make sure TVM's CUDA runtime (device API, fatbin loader) is registered; None, or why it could not be. The
    compiler's import registers it, TVM's runtime alone (``TVM_USE_RUNTIME_LIB=1``) does not: it is loaded here."""
    if tvm_ffi.get_global_func("device_api.cuda", allow_missing=True) is not None:
        return None
    try:
        load_lib_ctypes("tvm", "tvm_runtime_cuda", "RTLD_LOCAL", extra_lib_paths=tvm.libinfo.package_lib_paths())
    except (OSError, RuntimeError) as e:
        return last_line(e)
    return None


def _runnable_device(path: Path, m: dict) -> tvm.runtime.Device:
    """The device this artifact runs on here, or a one-line reason why it cannot."""
    if m["target"]["kind"] == "cuda":
        archs = m["device"]["archs"]
        why = _cuda_runtime()
        dev = tvm.cuda(0)
        if not dev.exist:
            raise UsageError(f"{path} is a CUDA artifact ({', '.join(archs)}) and this machine has no CUDA GPU"
                             + (f" (TVM's CUDA runtime did not load: {why})" if why else ""))
        here = "sm_" + dev.compute_version.replace(".", "")
        if here not in archs:
            raise UsageError(f"{path} has device code for {', '.join(archs)}; this GPU is {here}")
        return dev
    built_for, here = m["library"]["triple"], platform.machine()  # no LLVM: loading needs TVM's runtime alone
    if cpu_arch(built_for) != here:
        raise UsageError(f"{path} is built for {built_for}; this machine is {here}")
    return tvm.cpu(0)


def load(path: str | os.PathLike, allow_failed: bool = False) -> Artifact:
    """Load an artifact folder; refuses, each with a one-line reason, a library that does not match its
    manifest's sha256, is not a sound shared object for this CPU, or whose signature is not the manifest's
    (``library_check``); an artifact whose device is not here; and one whose recorded golden check failed,
    unless ``allow_failed``."""
    require_path("artifact", path)
    path = Path(path)
    m = read_manifest(path)
    lib = artifact_file(path, m["library"]["file"])
    if not lib.is_file():
        raise UsageError(f"{path}: library {lib.name} is missing")
    digest = sha256_file(lib)
    if digest != m["library"]["sha256"]:
        raise UsageError(f"{lib} does not match its manifest (sha256 {digest[:16]}..., manifest "
                         f"{m['library']['sha256'][:16]}...): refusing to load a modified library")
    if m["golden"] is not None and not m["golden"].get("passed", False) and not allow_failed:
        raise UsageError(f"{path} failed its golden check when it was built (see golden in its manifest); "
                         "refusing to run it (pass --allow-failed to run it anyway)")
    dev = _runnable_device(path, m)
    problem = check_elf(lib) if lib.suffix == ".so" else None
    if problem:
        raise UsageError(f"{lib} is {problem}: refusing to load it")
    try:
        module = tvm.runtime.load_module(str(lib))
    except Exception as e:  # the dynamic loader or a missing TVM runtime: its last line says which
        raise UsageError(f"cannot load {lib}: {last_line(e)}") from None
    if module.kind != "relax.VMExecutable":
        raise UsageError(f"{lib} is not a Relax executable (a {module.kind} module): refusing to run it")
    artifact = Artifact(path, m, module, dev)
    problem = check_signature(artifact.vm, module["stats"](), m)
    if problem:
        raise UsageError(f"{path}/manifest.json does not describe {lib.name}: {problem}; refusing to run it")
    return artifact


def check_artifact(artifact: Artifact | str | os.PathLike, seed: int = 0, tokens: int | None = None,
                   tolerance: RatioTolerance | Mapping | None = None, report: str | os.PathLike | None = None,
                   log=print) -> CheckResult:
    """Golden-check a prebuilt artifact on fresh seeded inputs (any ``tokens``: T is symbolic), no compile; an
    artifact whose recorded check failed may be checked again. ``tolerance``: every output's ``ratio_allclose``
    (a ``RatioTolerance`` or a dict of some of its fields; a module file's artifact takes none)."""
    validate_check_args(seed, report, log)
    ratio = RatioTolerance.of(tolerance)
    a = artifact if isinstance(artifact, Artifact) else load(artifact, allow_failed=True)
    m = a.manifest
    if "module" in m:
        from ..artifact.module_reference import check_module_artifact

        return check_module_artifact(a, seed, tokens, tolerance, report, log)
    c, s = a.sized(tokens)
    built = Provenance(m["target"], m["frontend"], m["schedule"]["name"],
                       m["build"]["compile_seconds"])
    result = golden_check(a.run, c, s, built, GoldenOptions(seed, ratio), log=log)
    if report is not None:
        result.write_report(report)
    return result
