"""A module file's artifact is untrusted input: every field of its manifest's ``module`` section is checked for type
and value, and every file name it gives stays inside the artifact (no ``..``, no absolute path, no symlink out),
each refused in one line (exit 2) before anything is read or run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import slow_except
from mtp_tvm.cli import main

REPO = Path(__file__).resolve().parent.parent
TVMSCRIPT_EXAMPLE = REPO / "examples" / "tvmscript_module.py"


@pytest.fixture(scope="module")
def module_artifact(tmp_path_factory) -> Path:
    import mtp_tvm

    out = tmp_path_factory.mktemp("module_artifact") / "art"
    mtp_tvm.build(out, TVMSCRIPT_EXAMPLE, log=lambda *_: None)
    return out


def _edit(module_artifact: Path, tmp_path: Path, change) -> Path:
    art = tmp_path / "art"
    shutil.copytree(module_artifact, art)
    m = json.loads((art / "manifest.json").read_text())
    change(m, art)
    (art / "manifest.json").write_text(json.dumps(m))
    return art


def _set(section: str, key: str, value):
    def change(m, _art):
        if value is KeyError:
            del m[section][key]
        else:
            m[section][key] = value
    return change


def _outside(m, art):
    np.savez(art.parent / "outside.npz", x=np.ones((2, 64), "float32"))
    m["module"]["example_inputs"] = "../outside.npz"


def _symlink_out(m, art):
    np.savez(art.parent / "outside.npz", x=np.ones((2, 64), "float32"))
    (art / "linked.npz").symlink_to(art.parent / "outside.npz")
    m["module"]["example_inputs"] = "linked.npz"


def _whole_section(m, _art):
    m["module"] = "x"


EDITS = {
    "module not an object": (_whole_section, "module: expected an object, got str"),
    "path": (_set("module", "path", 3), "module.path: expected the module file's path"),
    "kind": (_set("module", "kind", "keras"), "module.kind: expected one of torch, tvmscript, got 'keras'"),
    "num_input negative": (_set("module", "num_input", -1), "module.num_input: expected an integer in [0, "),
    "num_input a bool": (_set("module", "num_input", True), "module.num_input: expected an integer"),
    "num_input too many": (_set("module", "num_input", 99), "module.num_input: expected an integer in [0, "),
    "returns_tuple not a bool": (_set("module", "returns_tuple", "no"), "module.returns_tuple: expected true or false"),
    "returns_tuple flipped": (_set("module", "returns_tuple", True), "main returned one tensor, but its description "
                              "says a tuple"),
    "example_inputs missing": (_set("module", "example_inputs", KeyError),
                               "module.example_inputs: expected a file name inside the artifact, got None"),
    "example_inputs outside": (_outside, "module.example_inputs: expected a file name inside the artifact, got "
                               "'../outside.npz'"),
    "example_inputs absolute": (_set("module", "example_inputs", "/etc/passwd"),
                                "expected a file name inside the artifact, got '/etc/passwd'"),
    "example_inputs symlink out": (_symlink_out, "linked.npz leads outside the artifact"),
    "reference_outputs": (_set("module", "reference_outputs", "a/../b.npz"), "module.reference_outputs: expected"),
    "reference": (_set("module", "reference", None), "module.reference: expected what the reference outputs are"),
    "dim_bounds": (_set("module", "dim_bounds", {"n": [1, "big"]}), "module.dim_bounds: expected each symbolic "
                   "size's [lowest, highest or null]"),
    "library file outside": (_set("library", "file", "../library.so"), "library.file: expected a file name"),
    "source outside": (lambda m, _a: m["sources"].append("source/../../x.py"), "sources["),
}


@pytest.mark.parametrize("edit", slow_except(list(EDITS), {"example_inputs outside"}))
@pytest.mark.parametrize("command", slow_except(["run", "check"], {"run"}))
def test_every_field_of_a_module_artifacts_manifest_is_checked(module_artifact, tmp_path, capsys, edit, command):
    change, message = EDITS[edit]
    art = _edit(module_artifact, tmp_path, change)
    argv = (["run", str(art), "--random-inputs", "--out", str(tmp_path / "o.npz")] if command == "run"
            else ["check", "--artifact", str(art)])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.slow  # builds a module artifact (seconds)
def test_stored_arrays_must_be_the_manifests_tensors(module_artifact, tmp_path, capsys):
    art = _edit(module_artifact, tmp_path, lambda m, a: np.savez(a / m["module"]["reference_outputs"],
                                                                   other=np.ones(2, "float32")))
    assert main(["check", "--artifact", str(art)]) == 2
    assert "holds other; the manifest's outputs are output0" in capsys.readouterr().err
