"""Installed as a user installs it (a wheel, outside the checkout), the package builds the same binaries: the
hand schedules ship inside the wheel, and the installed package applies the same schedule traces."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HAND = ROOT / "mtp_tvm" / "schedule" / "hand"

TRACES = """
import json, sys
import mtp_tvm
print(json.dumps({"file": mtp_tvm.__file__,
                  "traces": mtp_tvm.compile(case="logits", preset="tiny").schedule_traces}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)], check=True,
                   capture_output=True, timeout=600)
    (found,) = out.glob("mtp_tvm-*.whl")
    return found


@pytest.mark.slow
def test_the_wheel_holds_every_hand_schedule(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.relative_to(ROOT).as_posix() for p in HAND.glob("*/*.json")}
    assert shipped and shipped <= names
    assert not any(n.startswith("schedules/") or "/tuned/" in n for n in names)  # local records stay local


@pytest.mark.slow
def test_an_installed_wheel_applies_the_checkouts_schedules(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    env = {**os.environ, "PYTHONPATH": str(site)}
    runs = {}
    for where, cwd, extra in (("installed", tmp_path, env), ("checkout", ROOT, os.environ)):
        out = subprocess.run([sys.executable, "-c", TRACES], cwd=cwd, env=extra, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        runs[where] = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(runs["installed"]["file"]).is_relative_to(site)  # not the checkout's package
    assert Path(runs["checkout"]["file"]).is_relative_to(ROOT)
    assert runs["installed"]["traces"] == runs["checkout"]["traces"] and "lm_head_logits" in runs["checkout"]["traces"]
