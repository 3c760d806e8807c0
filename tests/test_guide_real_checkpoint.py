"""docs/guides/real-checkpoint.md runs: every ```sh command and ```python block, in order, in one folder that holds
a tiny V4-Flash checkpoint (``DeepSeek-V4-Flash``; both layouts are converted and checked in test_convert.py),
with the FLASH sizes replaced by tiny's (``REPLACE``, which the guide states); the convert report it shows is what
convert prints, numbers aside; the layout table names every tensor the reader looks for."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from checkpoint_files import write_checkpoint

from helpers import REPO
from mtp_tvm.contract.checkpoint import LayoutName

GUIDE = REPO / "docs" / "guides" / "real-checkpoint.md"
REPLACE = (("--preset flash", "--preset tiny"), ("16160", "512"))
FENCE = re.compile(r"^```(sh|python)\n(.*?)^```", re.M | re.S)


def _blocks() -> list[tuple[str, str]]:
    text = GUIDE.read_text()
    blocks = [(kind, body) for kind, body in FENCE.findall(text)]
    for old, new in REPLACE:
        assert old in text, f"the guide no longer says {old!r}: update REPLACE and the guide's note"
        blocks = [(kind, body.replace(old, new)) for kind, body in blocks]
    return blocks


def _skeleton(text: str) -> list[str]:
    """Lines with every number as #, paths cut to their names: what must match whatever the figures."""
    return [re.sub(r"\d+(\.\d+)?(e-?\d+)?", "#", line.strip()) for line in text.strip().splitlines()]


def test_the_guide_names_the_tensors_of_both_layouts():
    """Its table holds every name the reader looks for (V3's after the first abbreviated ``...``)."""
    from mtp_tvm.contract.checkpoint import LAYOUTS

    text = GUIDE.read_text()
    for layout in LAYOUTS.values():
        for n in (layout.e_proj.weight, layout.h_proj.weight, layout.e_proj.scale, layout.h_proj.scale, layout.enorm,
                  layout.hnorm, layout.norm, layout.head):
            assert f"`{n}`" in text or f"`...{n.removeprefix('model.layers.61.')}`" in text, n
        assert "`--layout deepseek-v3|deepseek-v4-flash`" in text


@pytest.mark.slow  # builds and runs tiny cases, a bench: about a minute on 2 cores
def test_every_block_of_the_guide_runs(tmp_path, prefork):
    write_checkpoint(tmp_path / "DeepSeek-V4-Flash", LayoutName.V4_FLASH)
    env = prefork.env({**os.environ, "MTP_TVM_DUMPS": str(tmp_path / "dumps")})
    outputs = {}
    for kind, body in _blocks():
        runs = [[*prefork.python, "-c", body]] if kind == "python" else [
            ["bash", "-c", line] for line in body.splitlines() if line.strip() and not line.startswith("#")]
        for argv in runs:
            done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"{argv[-1]}\n{done.stdout}\n{done.stderr}"
            outputs[argv[-1]] = done.stdout
    convert = next(out for cmd, out in outputs.items() if cmd.startswith("mtp-tvm convert") and "--calibration"
                   not in cmd)
    shown = re.split(r"and prints \(here on the\s+tiny test checkpoint\):\n\n", GUIDE.read_text(), maxsplit=1)[1]
    shown = shown.split("\n\n", 1)[0]
    assert _skeleton(convert) == _skeleton(shown)
    assert "PASSED" in next(out for cmd, out in outputs.items() if cmd.startswith("mtp-tvm check"))
    assert (tmp_path / "outputs.npz").is_file() and "{'hidden_states_out': (8, 256)" in outputs[_blocks()[-1][1]]
