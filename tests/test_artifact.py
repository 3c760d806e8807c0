"""Target binaries: every case builds for LLVM, reloads in a fresh process, runs and meets its golden; CUDA
artifacts embed SASS for their arch (one fatbin for sm_80 and sm_90) and validate; tampered, misplaced and mis-fed
artifacts are refused."""

import dataclasses
import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Mapping
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
import tvm

import mtp_tvm
from mtp_tvm.artifact import embedded, export, manifest
from mtp_tvm.cli import main
from mtp_tvm.contract.cases import CASES
from mtp_tvm.support.errors import UsageError

# The CUDA builds that work: extend this list to every (case, frontend) once its CUDA schedule builds, and every
# test below covers it.
# Every case with hand TIR kernels (the LM-head kernel carries a CPU-only schedule: its cases go through Relax),
# plus the Relax frontend of the norm, the logits, the LM head and the tail (its W8A8 GEMMs on dlight's rules: the
# GPU script runs every one of these on a GPU).
CUDA_CASES = ([(case, "tir") for case in ("projection", "norm", "logits", "shared-head-logits", "tail", "tail-norm",
                                          "lm-head", "tail-lm-head")]
              + [(case, "relax") for case in ("norm", "logits", "lm-head", "tail")])
CUDA_ARCHS = ("sm_80", "sm_90")
EM_CUDA, EM_AARCH64 = 190, 183

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
HAS_GPU = tvm.cuda(0).exist
# Each case is built for one arch, this machine's GPU's where there is one (so it runs here): a second arch adds
# nvcc's back end once more to every case (about 1.7 s a case on 2 cores). One fatbin of every arch is built from
# the tail, the case with the most kernels.
CASE_ARCH = "sm_" + tvm.cuda(0).compute_version.replace(".", "") if HAS_GPU else CUDA_ARCHS[-1]
EVERY_ARCH = ("tail", "tir", CUDA_ARCHS)


class _Exported(Mapping):
    """Case -> its LLVM artifact (TIR frontend, tiny preset), exported on first use from the session's shared
    build: a test that reads one case builds that one only."""

    def __init__(self, compiled, root):
        self._compiled, self._root, self._paths = compiled, root, {}

    def __getitem__(self, case):
        if case not in self._paths:
            self._paths[case] = export.export(self._compiled(case, "tir"), self._root / case).path
        return self._paths[case]

    def __iter__(self):
        return iter(CASES)

    def __len__(self):
        return len(CASES)


@pytest.fixture(scope="module")
def llvm_artifacts(compiled, tmp_path_factory):
    """Every case exported for LLVM (each when a test first reads it)."""
    return _Exported(compiled, tmp_path_factory.mktemp("llvm"))


@pytest.fixture(scope="module")
def cuda_artifacts(tmp_path_factory):
    """(case, frontend, archs) -> its CUDA artifact: every CUDA_CASES entry built for ``(CASE_ARCH,)``, and
    ``EVERY_ARCH``."""
    root = tmp_path_factory.mktemp("cuda")
    return {(case, fe, archs): export.build(root / f"{case}-{fe}-{'-'.join(archs)}", case=case, target="cuda",
                                            arch=",".join(archs), preset="tiny", frontend=fe).path
            for case, fe, archs in [*((case, fe, (CASE_ARCH,)) for case, fe in CUDA_CASES), EVERY_ARCH]}


def _elf_cpu(data: bytes) -> int:
    assert data[:4] == b"\x7fELF", "not an ELF image"
    return struct.unpack_from("<H", data, 18)[0]


def _sass_archs(code: bytes) -> list[str]:
    """The SM arch of every CUDA ELF (cubin) inside ``code``, read from its ELF header's e_flags."""
    archs, i = [], code.find(b"\x7fELF")
    while i >= 0:
        elf = code[i:]
        if _elf_cpu(elf) == EM_CUDA:
            flags, abi = struct.unpack_from("<I", elf, 48)[0], elf[8]
            archs.append(f"sm_{(flags >> 8) & 0xff if abi >= 8 else flags & 0xff}")  # CUDA >= 12.8 moved the SM
        i = code.find(b"\x7fELF", i + 4)
    return sorted(archs)


def _embedded_cuda(lib) -> embedded.CudaPayload:
    return embedded.cuda_payload(embedded.ModuleTree.parse(embedded.read_library_blob(str(lib))))[1]


# ---- LLVM: every case, reloaded in a fresh process ----------------------------------------------------------

@pytest.mark.slow  # a subprocess, every case built
def test_every_case_reloads_with_tvms_runtime_alone_and_meets_its_golden(llvm_artifacts):
    """A deployment machine has TVM's runtime, not its compiler: TVM_USE_RUNTIME_LIB=1 loads libtvm_runtime
    alone, so any compiling (or an import of relax or TVMScript) fails there."""
    script = textwrap.dedent("""
        import json, sys
        import tvm, mtp_tvm

        assert tvm.base._RUNTIME_ONLY and "tvm_compiler" not in tvm.base._LOADED_LIBS
        out = {}
        for path in sys.argv[1:]:
            tokens = 6 if "lm-head" in path else 5  # the LM-head cases split T over 2 owners
            r = mtp_tvm.check_artifact(path, seed=11, tokens=tokens, log=lambda *_: None)
            out[r.case] = {"passed": r.passed, "tokens": r.shapes["tokens"],
                           "details": [c.detail for o in r.outputs.values() for c in o.checks if not c.passed]}
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", script, *map(str, llvm_artifacts.values())],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "TVM_USE_RUNTIME_LIB": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(results) == sorted(CASES)
    for case, r in results.items():
        assert r["passed"] and r["tokens"] == (6 if "lm-head" in case else 5), f"{case}: {r['details']}"


def test_llvm_manifest_describes_the_build(llvm_artifacts):
    path = llvm_artifacts["tail"]
    m = manifest.read_manifest(path)
    assert manifest.validate_manifest(m) == []
    assert m["case"] == "tail" and m["preset"] == "tiny" and m["frontend"] == "tir" and m["device"] is None
    assert m["inputs"]["hidden_states"] == {"shape": ["T", 256], "dtype": "bfloat16"}
    assert m["outputs"]["candidate_logits"] == {"shape": ["T", 512], "dtype": "float32"}
    assert m["target"]["kind"] == "llvm" and m["versions"]["tvm"] == tvm.__version__
    assert m["library"]["sha256"] == manifest.sha256_file(path / m["library"]["file"])
    assert m["schedule"]["name"] and "trace_sha256" in m["schedule"]
    assert {"source/host.ll", "source/host.s"} <= set(m["sources"])
    assert "define" in (path / "source/host.ll").read_text() and ".text" in (path / "source/host.s").read_text()


def test_wrong_shape_is_refused_naming_the_input_and_both_shapes(llvm_artifacts):
    a = mtp_tvm.load(llvm_artifacts["norm"])
    good = {"hidden_states": np.random.default_rng(1).standard_normal((5, 256)).astype(ml_dtypes.bfloat16),
            "shared_head_norm_w": np.ones(256, np.float32)}
    as_torch = {k: torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) if v.dtype == ml_dtypes.bfloat16
                else torch.from_numpy(v) for k, v in good.items()}  # before run makes the numpy weight read-only
    out = a.run(good)["normed_hidden"]
    assert out.shape == (5, 256) and out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(a.run(as_torch)["normed_hidden"].view(np.uint16), out.view(np.uint16))
    with pytest.raises(UsageError) as e:
        a.run({**good, "hidden_states": np.zeros((5, 255), ml_dtypes.bfloat16)})
    assert "'hidden_states'" in str(e.value) and "(5, 255)" in str(e.value) and "(5, 256)" in str(e.value)
    with pytest.raises(UsageError, match="'shared_head_norm_w' has dtype float16, expected float32"):
        a.run({**good, "shared_head_norm_w": np.ones(256, np.float16)})
    with pytest.raises(UsageError, match=r"missing \['shared_head_norm_w'\]"):
        a.run({"hidden_states": good["hidden_states"]})


def test_a_loaded_artifact_binds_its_weights(compiled, tmp_path):
    m = compiled("logits", "tir")
    a = mtp_tvm.load(export.export(m, tmp_path / "logits", log=lambda *_: None).path)
    inputs = m.case.make_inputs(m.shapes, 0)
    bound = a.bind({n: inputs[n] for n in a.weight_specs})
    for t in (1, 5):
        acts = {"hidden_states": inputs["hidden_states"][:t]}
        got, want = bound.run(acts), a.run({**inputs, **acts})
        assert got.keys() == want.keys() == {"candidate_logits"}
        np.testing.assert_array_equal(got["candidate_logits"], want["candidate_logits"])
        np.testing.assert_array_equal(got["candidate_logits"], m.run({**inputs, **acts})["candidate_logits"])
    with pytest.raises(UsageError, match=r"^weights do not match artifact .*: missing \['lm_head_weight'\]"):
        a.bind({})


def test_tampered_library_is_refused(llvm_artifacts, tmp_path):
    copy = tmp_path / "tampered"
    shutil.copytree(llvm_artifacts["logits"], copy)
    lib = copy / "library.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))
    with pytest.raises(UsageError, match="does not match its manifest") as e:
        mtp_tvm.load(copy)
    assert len(str(e.value).splitlines()) == 1


def test_invalid_manifest_is_refused(llvm_artifacts, tmp_path):
    copy = tmp_path / "bad"
    shutil.copytree(llvm_artifacts["norm"], copy)
    m = json.loads((copy / "manifest.json").read_text())
    m["inputs"]["hidden_states"]["shape"] = ["N", 256]  # a symbolic dim the manifest does not name
    del m["library"]["sha256"]
    assert len(manifest.validate_manifest(m)) == 2
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(UsageError, match="not a valid manifest"):
        mtp_tvm.load(copy)


# ---- writing: atomic, refusing, cleaning up -----------------------------------------------------------------

def test_existing_folder_is_refused_unless_forced(compiled, tmp_path):
    out = tmp_path / "a"
    first = export.export(compiled("norm", "tir"), out).manifest["build"]["finished_utc"]
    with pytest.raises(UsageError, match="already exists; pass --force"):
        export.export(compiled("norm", "tir"), out)
    export.export(compiled("logits", "tir"), out, force=True)
    assert manifest.read_manifest(out)["case"] == "logits" and first
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(UsageError, match="not an mtp-tvm artifact"):
        export.export(compiled("norm", "tir"), precious, force=True)
    assert (precious / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "precious"]  # no temp folders left


def test_a_failed_build_leaves_nothing_behind(compiled, tmp_path, monkeypatch):
    def broken(folder, *_args):
        (folder / "library.so").write_bytes(b"half")
        raise mtp_tvm.BuildError("export failed half way")

    monkeypatch.setattr(export, "_write_artifact", broken)
    with pytest.raises(mtp_tvm.BuildError):
        export.export(compiled("norm", "tir"), tmp_path / "new" / "deeper" / "a")
    assert list(tmp_path.iterdir()) == []  # neither the folder, nor its temp folder, nor the parents made for it


def test_build_check_records_the_golden(tmp_path):
    built = mtp_tvm.build(tmp_path / "a", case="norm", preset="tiny", check=True, seed=3, log=lambda *_: None)
    assert built.check.passed
    golden = manifest.read_manifest(tmp_path / "a")["golden"]
    assert golden["passed"] and golden["seed"] == 3 and golden["case"] == "norm"


# ---- cross-target -------------------------------------------------------------------------------------------

@pytest.mark.slow  # over 1 s
def test_cross_target_writes_an_object_archive_with_its_manifest(tmp_path):
    out = tmp_path / "arm"
    built = mtp_tvm.build(out, case="tail", preset="tiny",
                          target={"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
    m = built.manifest
    assert manifest.validate_manifest(m) == [] and m["library"]["file"] == "library.tar"
    assert m["library"]["triple"] == "aarch64-linux-gnu" and m["target"]["mtriple"] == "aarch64-linux-gnu"
    with tarfile.open(out / "library.tar") as tar:
        objects = [tar.extractfile(n).read() for n in tar.getnames() if n.endswith(".o")]
    assert objects and all(_elf_cpu(o) == EM_AARCH64 for o in objects)
    with pytest.raises(UsageError, match="built for aarch64-linux-gnu; this machine is"):
        mtp_tvm.load(out)


# ---- CUDA ---------------------------------------------------------------------------------------------------

def _check_cuda_artifact(path: Path, archs: tuple[str, ...]) -> None:
    """A CUDA artifact holds SASS for each of ``archs`` and nothing left to compile, and its manifest says so:
    the fatbin's hash, each kernel's registers per arch, the CUDA source and the PTX of each arch."""
    m = manifest.read_manifest(path)
    assert manifest.validate_manifest(m) == [] and m["target"]["kind"] == "cuda"
    assert m["target"]["arch"] == archs[0]
    device = m["device"]
    assert device["archs"] == list(archs)
    payload = _embedded_cuda(path / m["library"]["file"])
    assert payload.fmt == "fatbin"  # not "cuda": nothing left to compile where it is loaded
    assert _sass_archs(payload.code) == list(archs)
    assert hashlib.sha256(payload.code).hexdigest() == device["sha256"]
    assert sorted(device["kernels"]) == sorted(payload.kernels)
    for per_arch in device["kernels"].values():
        assert sorted(per_arch) == list(archs) and all(r["registers"] > 0 for r in per_arch.values())
    assert {"source/kernels.cu", *(f"source/kernels.{arch}.ptx" for arch in archs)} <= set(m["sources"])
    for arch in archs:
        assert f".target {arch}" in (path / f"source/kernels.{arch}.ptx").read_text()


@pytest.mark.slow  # nvcc
@needs_nvcc
@pytest.mark.parametrize("case, frontend", CUDA_CASES)
def test_cuda_artifact_embeds_sass_for_its_arch(cuda_artifacts, case, frontend):
    _check_cuda_artifact(cuda_artifacts[(case, frontend, (CASE_ARCH,))], (CASE_ARCH,))


@pytest.mark.slow  # nvcc
@needs_nvcc
def test_one_cuda_artifact_embeds_sass_for_every_arch(cuda_artifacts):
    _check_cuda_artifact(cuda_artifacts[EVERY_ARCH], CUDA_ARCHS)


@pytest.mark.slow  # nvcc
@needs_nvcc
@pytest.mark.parametrize("case, frontend", CUDA_CASES)
def test_cuda_artifact_runs_where_a_gpu_is_and_is_refused_elsewhere(cuda_artifacts, case, frontend):
    path = cuda_artifacts[(case, frontend, (CASE_ARCH,))]
    if not HAS_GPU:
        with pytest.raises(UsageError, match="CUDA artifact .* this machine has no CUDA GPU") as e:
            mtp_tvm.load(path)
        assert len(str(e.value).splitlines()) == 1
        return
    result = mtp_tvm.check_artifact(path, seed=5, tokens=5, log=lambda *_: None)
    assert result.passed, [c.detail for o in result.outputs.values() for c in o.checks if not c.passed]


def test_arch_options_are_checked():
    with pytest.raises(UsageError, match="unsupported CUDA arch sm_70"):
        export.parse_archs("sm_80,sm_70")
    with pytest.raises(UsageError, match="--arch applies to --target cuda"):
        export.build_target("llvm", ("sm_80",))
    assert export.parse_archs("sm_90, sm_80,sm_90") == ("sm_80", "sm_90")
    assert export.build_target("cuda", ("sm_80", "sm_90")).attrs["arch"] == "sm_80"


# ---- command line -------------------------------------------------------------------------------------------

def test_cli_build_run_and_check_artifact(tmp_path, capsys):
    out = tmp_path / "logits"
    assert main(["build", "--case", "logits", "--preset", "tiny", "--out", str(out)]) == 0
    assert main(["build", "--case", "logits", "--preset", "tiny", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    a = mtp_tvm.load(out)
    inputs = {"hidden_states": np.random.default_rng(0).standard_normal((3, 256)).astype(ml_dtypes.bfloat16),
              "lm_head_weight": np.full((512, 256), 0.01, ml_dtypes.bfloat16)}
    np.savez(tmp_path / "in.npz", **inputs)
    assert main(["run", str(out), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_array_equal(z["candidate_logits"], a.run(inputs)["candidate_logits"])
    assert main(["check", "--artifact", str(out), "--tokens", "3", "--seed", "4"]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert main(["check", "--artifact", str(out), "--case", "norm"]) == 2
    assert "--artifact takes --case from the artifact's manifest" in capsys.readouterr().err


def test_cli_compile_only_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--compile-only", "--case", "norm", "--preset", "tiny"]) == 0
    assert "compile only: nothing written" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(HAS_GPU, reason="a GPU is here: --check can run")
def test_cuda_check_without_a_gpu_is_refused_before_compiling(tmp_path, capsys):
    argv = ["build", "--case", "norm", "--preset", "tiny", "--target", "cuda", "--check", "--out", str(tmp_path / "a")]
    assert main(argv) == 2
    assert "--check runs the artifact, and this machine has no cuda device" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# ---- reliability round two: what a manifest's sha256 does not cover, failed checks, litter, full disks -------

def _edited(llvm_artifacts, tmp_path, case, edit, library=None):
    """A copy of ``case``'s artifact with its manifest edited (and its library swapped), sha256 rewritten."""
    copy = tmp_path / f"{case}-edited"
    shutil.copytree(llvm_artifacts[case], copy)
    if library is not None:
        (copy / "library.so").write_bytes(library)
    m = json.loads((copy / "manifest.json").read_text())
    edit(m)
    m["library"]["sha256"] = hashlib.sha256((copy / "library.so").read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(m))
    return copy


def _reorder(section):
    def edit(m):
        m[section] = dict(reversed(list(m[section].items())))
    return edit


def _set_shape(m):
    m["inputs"]["lm_head_weight"]["shape"] = [512, 128]


@pytest.mark.parametrize("case, edit, message", [
    ("tail", _reorder("outputs"), "output 0 is bfloat16 .* in the library, but the manifest's output 0 "
                                  "'candidate_logits' is float32"),
    ("logits", _reorder("inputs"), "input 0 is 'hidden_states' in the library, 'lm_head_weight' in the manifest"),
    ("logits", _set_shape, r"weight 'lm_head_weight' is bfloat16 \[512, 256\] in the library, bfloat16 \[512, 128\]"),
])
def test_a_manifest_that_does_not_describe_its_library_is_refused_before_any_call(llvm_artifacts, tmp_path, case,
                                                                                 edit, message):
    copy = _edited(llvm_artifacts, tmp_path, case, edit)
    with pytest.raises(UsageError, match="manifest.json does not describe library.so: " + message):
        mtp_tvm.load(copy)


def test_a_truncated_or_foreign_library_with_a_rewritten_sha256_is_refused(llvm_artifacts, tmp_path):
    data = (llvm_artifacts["logits"] / "library.so").read_bytes()
    truncated = _edited(llvm_artifacts, tmp_path, "logits", lambda m: None, library=data[: len(data) * 2 // 3])
    with pytest.raises(UsageError, match="library.so is truncated"):
        mtp_tvm.load(truncated)
    foreign = _edited(llvm_artifacts, tmp_path, "norm", lambda m: None,
                      library=(llvm_artifacts["logits"] / "library.so").read_bytes())
    with pytest.raises(UsageError, match="manifest.json does not describe library.so: "):
        mtp_tvm.load(foreign)


def test_a_failed_check_leaves_the_old_artifact_in_place(compiled, tmp_path, monkeypatch):
    out = tmp_path / "a"
    export.export(compiled("norm", "tir"), out)
    before = (out / "manifest.json").read_text()
    failed = mtp_tvm.check_artifact(out, log=lambda *_: None)
    outputs = {k: type(v)(k, [dataclasses.replace(c, passed=False) for c in v.checks])
               for k, v in failed.outputs.items()}
    failed = dataclasses.replace(failed, outputs=outputs)
    monkeypatch.setattr(export, "check_artifact", lambda *_a, **_k: failed)
    built = export.export(compiled("logits", "tir"), out, force=True, check=True)
    assert built.path is None and not built.check.passed
    assert (out / "manifest.json").read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["a"]
    new = tmp_path / "new"
    assert export.export(compiled("logits", "tir"), new, check=True).path is None and not new.exists()


def test_an_artifact_recorded_as_failed_is_refused_unless_allowed(llvm_artifacts, tmp_path, capsys):
    copy = _edited(llvm_artifacts, tmp_path, "logits", lambda m: m.update(golden={"passed": False}))
    with pytest.raises(UsageError, match="failed its golden check when it was built"):
        mtp_tvm.load(copy)
    assert mtp_tvm.load(copy, allow_failed=True).manifest["golden"] == {"passed": False}
    np.savez(tmp_path / "in.npz", hidden_states=np.zeros((2, 256), ml_dtypes.bfloat16),
             lm_head_weight=np.zeros((512, 256), ml_dtypes.bfloat16))
    argv = ["run", str(copy), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz")]
    assert main(argv) == 2 and "--allow-failed" in capsys.readouterr().err
    assert main([*argv, "--allow-failed"]) == 0


def test_force_never_deletes_the_users_files_inside_an_artifact(llvm_artifacts, compiled, tmp_path):
    copy = tmp_path / "a"
    shutil.copytree(llvm_artifacts["norm"], copy)
    (copy / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="holds files of yours"):
        export.export(compiled("norm", "tir"), copy, force=True)
    assert (copy / "notes.txt").read_text() == "mine"


def test_a_folder_appearing_during_the_swap_is_kept_and_nothing_is_left(compiled, tmp_path, monkeypatch):
    out = tmp_path / "a"
    real = export.replace_dir

    def racing(new, dest, replaceable):  # another process writes the user's folder just before the swap
        dest.mkdir()
        (dest / "theirs.txt").write_text("keep")
        return real(new, dest, replaceable)

    monkeypatch.setattr(export, "replace_dir", racing)
    with pytest.raises(UsageError, match="cannot write artifact .*appeared meanwhile"):
        export.export(compiled("norm", "tir"), out, force=True)
    assert (out / "theirs.txt").read_text() == "keep" and [p.name for p in tmp_path.iterdir()] == ["a"]


def test_a_full_disk_during_build_is_one_line_and_leaves_nothing(compiled, tmp_path, monkeypatch):
    import errno
    import pathlib

    real = pathlib.Path.write_text

    def full(self, *a, **k):
        if self.name == "manifest.json":  # the disk fills up as the last file is written
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    with pytest.raises(UsageError, match=r"cannot write artifact .*\(No space left on device\)"):
        export.export(compiled("norm", "tir"), tmp_path / "a")
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_as_the_partial_folder_is_made_leaves_nothing(compiled, tmp_path, monkeypatch):
    """SIGTERM (an interrupt here) can land after ``mkdtemp`` made the folder and before its path came back."""
    real = export.make_temp_dir

    def interrupted(prefix, parent):
        real(prefix, parent)
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "make_temp_dir", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export.export(compiled("norm", "tir"), tmp_path / "a")
    assert list(tmp_path.iterdir()) == []


BUILD = [sys.executable, "-m", "mtp_tvm", "build", "--case", "norm", "--preset", "tiny", "--out"]


@pytest.mark.slow  # subprocesses that import TVM and build
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_killed_build_leaves_no_litter_after_the_next_build(tmp_path, signal_name):
    import signal
    import time

    out = tmp_path / "a"
    proc = subprocess.Popen([*BUILD, str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not any(p.name.startswith(".a.partial-") for p in tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(getattr(signal, signal_name))
    _, err = proc.communicate(timeout=120)
    if signal_name == "SIGTERM":
        assert proc.returncode == 130 and "Traceback" not in err
        assert list(tmp_path.iterdir()) == []
    assert subprocess.run([*BUILD, str(out), "--force"], capture_output=True, timeout=600).returncode == 0
    assert [p.name for p in tmp_path.iterdir()] == ["a"]


def test_check_artifact_refuses_a_token_count_the_fresh_check_refuses(llvm_artifacts):
    with pytest.raises(UsageError, match="multiple"):
        mtp_tvm.check_artifact(llvm_artifacts["lm-head"], tokens=7, log=lambda *_: None)


def test_run_writes_into_a_fifo_and_refuses_out_equal_to_inputs(llvm_artifacts, tmp_path, capsys):
    import threading

    np.savez(tmp_path / "in.npz", hidden_states=np.zeros((2, 256), ml_dtypes.bfloat16),
             lm_head_weight=np.zeros((512, 256), ml_dtypes.bfloat16))
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    assert main(["run", str(llvm_artifacts["logits"]), "--inputs", str(tmp_path / "in.npz"), "--out", str(fifo)]) == 0
    reader.join(timeout=60)
    assert got and got[0][:2] == b"PK" and stat.S_ISFIFO(os.stat(fifo).st_mode)
    same = str(tmp_path / "in.npz")
    assert main(["run", str(llvm_artifacts["logits"]), "--inputs", same, "--out", same]) == 2
    assert "is the --inputs file" in capsys.readouterr().err


@pytest.mark.slow  # a subprocess that imports TVM and builds
def test_artifacts_and_dump_folders_are_readable_by_others_under_umask_022(tmp_path):
    """What ``build`` writes (the artifact, its run folder) is readable by another user or a service account
    when the umask lets it be: no 0700 folder from mkdtemp, no 0600 file from mkstemp."""
    script = ("import os, sys; os.umask(0o022); from mtp_tvm.cli import main; "
              "sys.exit(main(sys.argv[1:]))")
    subprocess.run([sys.executable, "-c", script, "build", "--case", "norm", "--preset", "tiny", "--out",
                    str(tmp_path / "a"), "--dump-passes", str(tmp_path / "d")], check=True, capture_output=True)
    paths = [tmp_path / "a", *(tmp_path / "a").rglob("*"), *(tmp_path / "d").rglob("*")]
    assert len(paths) > 20
    closed = [f"{p}: {oct(stat.S_IMODE(p.stat().st_mode))}" for p in paths
              if stat.S_IMODE(p.stat().st_mode) & (0o055 if p.is_dir() else 0o044) != (0o055 if p.is_dir() else 0o044)]
    assert closed == []
