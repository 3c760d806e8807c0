"""Installed as a user installs it (a wheel, outside the checkout), the package builds the same binaries: the
hand schedules ship inside the wheel, and the installed package applies the same schedule traces.

The wheel is built from a copy of the sources (so setuptools' ``build/`` never lands in, or leaks stale files
from, the shared checkout) without build isolation (the project venv's setuptools: no download). It is installed
with ``pip install --target`` and imported by a ``python -I -S`` subprocess whose ``sys.path`` is the install
folder, the standard library and the venv's site-packages without its ``.pth`` files: the editable install's
finder (``__editable__.mtp_tvm-*.pth``) never runs, and torch and tvm are the venv's, not downloaded again.
"""

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from helpers import REPO

HAND = REPO / "mtp_tvm" / "schedule" / "hand"

TRACES = """
import json, sys
sys.path[:0] = [{site!r}]
sys.path += [{venv!r}]
import mtp_tvm
print(json.dumps({{"file": mtp_tvm.__file__,
                  "traces": mtp_tvm.compile(case="logits", preset="tiny").schedule_traces}}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "mtp_tvm", src / "mtp_tvm", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(src)], check=True, capture_output=True, timeout=300)
    (found,) = out.glob("mtp_tvm-*.whl")
    return found


@pytest.mark.slow
def test_the_wheel_holds_every_hand_schedule(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.relative_to(REPO).as_posix() for p in HAND.glob("*/*.json")}
    assert shipped and shipped <= names
    assert not any(n.startswith("schedules/") or "/tuned/" in n for n in names)  # local records stay local


@pytest.mark.slow
def test_the_wheel_holds_the_page_templates(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.relative_to(REPO).as_posix() for p in (REPO / "mtp_tvm").glob("**/templates/*")}
    expected = {"mtp_tvm/instrument/templates/run_index.html", "mtp_tvm/tools/dumps/templates/compare.html"}
    assert expected <= shipped <= names


@pytest.mark.slow
def test_an_installed_wheel_applies_the_checkouts_schedules(wheel, compiled, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    script = TRACES.format(site=str(site), venv=sysconfig.get_paths()["purelib"])
    out = subprocess.run([sys.executable, "-I", "-S", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    installed = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(installed["file"]).is_relative_to(site)  # the wheel's package, not the checkout's
    checkout = compiled("logits", "tir").schedule_traces  # this process: the checkout's
    assert installed["traces"] == checkout and "lm_head_logits" in checkout


def test_make_run_installs_only_when_pyproject_changes(tmp_path):
    """An editable install sees source changes, so ``make run`` installs only when pyproject.toml (the
    dependencies) is newer than its stamp."""
    makefile = REPO / "Makefile"
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    (venv / ".installed").touch()
    make = ["make", "-n", "-f", str(makefile), "run", f"VENV={venv}", "PRESET=tiny"]
    dry = subprocess.run(make, cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert "pip install" not in dry and f"{venv}/bin/mtp-tvm check --case tail --target llvm --preset tiny" in dry
    changed = subprocess.run([*make, "-W", str(makefile.parent / "pyproject.toml")], cwd=tmp_path,
                             capture_output=True, text=True, check=True).stdout
    assert "pip install -q --no-compile -e" in changed and "compileall" in changed
