"""tools/convert/convert.py and its commands: ``mtp-tvm convert`` on both test layouts (the report's per-matrix
errors and the projection's verdict), the converted file read back, ``load_weights`` ready for ``bind``, ``check
--weights`` to PASS, and bad checkpoints: exit 2, one line naming the file and tensor, nothing written."""

from __future__ import annotations

import errno
import os
import re
import stat

import numpy as np
import pytest
import torch
from checkpoint_files import checkpoint_tensors, write_checkpoint

import mtp_tvm
from helpers import slow_except
from mtp_tvm.cli import main
from mtp_tvm.contract.cases import get_case
from mtp_tvm.contract.checkpoint import INDEX_FILE, LayoutName
from mtp_tvm.contract.presets import make_shapes
from mtp_tvm.tools.convert.convert import CONVERTED_FORMAT, converted_metadata


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    return {layout: write_checkpoint(root / layout.value, layout) for layout in LayoutName}


@pytest.mark.parametrize("layout", list(LayoutName))
def test_convert_writes_the_case_weights_and_reports_errors_and_verdict(checkpoints, layout, tmp_path, capsys):
    out = tmp_path / "w.safetensors"
    rc = main(["convert", str(checkpoints[layout]), "--preset", "tiny", "--tp", "8", "--rank", "3", "--out", str(out)])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    head = f"layout {layout.value}, case tail, preset tiny (D=256), tp 8 rank 3 (LM-head rows 1536..2048)"
    assert head in printed.out
    for matrix in ("e_proj", "h_proj"):
        assert any(line.startswith(matrix) and line.endswith("within bound") for line in printed.out.splitlines())
    assert "projection hidden_states_out vs the checkpoint's FP8 math (T=8): ratio_allclose(" in printed.out
    assert printed.out.rstrip().splitlines()[-2].endswith("PASS")
    assert "[read]" in printed.err and "MB" in printed.err  # the progress lines, with bytes read
    meta = converted_metadata(out)
    assert meta["format"] == CONVERTED_FORMAT and (meta["tp"], meta["rank"], meta["vocab_shard"]) == ("8", "3", "512")
    from_file = mtp_tvm.load_weights(out, case="tail")
    from_ckpt = mtp_tvm.load_weights(checkpoints[layout], case="tail", preset="tiny", tp=8, rank=3)
    assert list(from_file) == list(from_ckpt) == list(get_case("tail").input_specs(make_shapes("tiny")))[2:]
    assert all(torch.equal(from_file[n], from_ckpt[n]) for n in from_file)


def test_load_weights_is_ready_for_bind(checkpoints, compiled):
    """A tiny tail build (vocab shard 512 = 4096 / TP 8) bound to a checkpoint's rank 5 runs as its golden."""
    weights = mtp_tvm.load_weights(checkpoints[LayoutName.V4_FLASH], case="tail", tp=8, rank=5)
    build = compiled("tail", "tir")
    case, shapes = get_case("tail"), make_shapes("tiny", vocab_shard=512, tp=8)
    inputs = {**case.make_inputs(shapes, 1), **weights}
    got = build.bind(weights).run({n: inputs[n] for n in ("hidden_states", "prev_hidden_states")})
    want = case.golden(inputs, shapes)
    np.testing.assert_allclose(got["candidate_logits"], want["candidate_logits"].numpy(), rtol=2e-2, atol=2e-2)


def test_a_verdict_that_fails_writes_nothing_and_exits_1(checkpoints, tmp_path, capsys):
    out = tmp_path / "w.safetensors"
    rc = main(["convert", str(checkpoints[LayoutName.V3]), "--tp", "8", "--atol", "0", "--rtol", "0",
               "--max-error-ratio", "0", "--out", str(out)])
    assert rc == 1 and not out.exists()
    assert "FAIL" in capsys.readouterr().out


def _damage(folder, what):
    shard3 = folder / "model-00003-of-00003.safetensors"
    if what == "missing shard":
        shard3.unlink()
    elif what == "truncated":
        shard3.write_bytes(shard3.read_bytes()[:-4096])
    elif what == "missing tensor":
        tensors = checkpoint_tensors(LayoutName.V4_FLASH)
        tensors.pop("mtp.0.norm.weight")
        write_checkpoint(folder, LayoutName.V4_FLASH, tensors=tensors)
    elif what == "zero scale":
        tensors = checkpoint_tensors(LayoutName.V3)
        tensors["model.layers.61.eh_proj.weight_scale_inv"][1, 1] = 0.0
        write_checkpoint(folder, LayoutName.V3, tensors=tensors)


@pytest.mark.parametrize("what, layout, extra, names", slow_except([
    ("missing shard", LayoutName.V4_FLASH, [], ("model.safetensors.index.json", "head.weight")),
    ("truncated", LayoutName.V4_FLASH, [], ("model-00003-of-00003.safetensors", "head.weight")),
    ("missing tensor", LayoutName.V4_FLASH, ["--case", "tail-norm"], ("mtp.0.norm.weight",)),
    ("zero scale", LayoutName.V3, [], ("model-00001-of-00003.safetensors", "eh_proj.weight_scale_inv")),
    ("rank outside tp", LayoutName.V3, ["--rank", "8"], ("--rank", "--tp 8")),
], fast=("missing shard",)))
def test_a_bad_checkpoint_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, what, layout, extra, names):
    folder = write_checkpoint(tmp_path / "ckpt", layout)
    _damage(folder, what)
    out = tmp_path / "w.safetensors"
    rc = main(["convert", str(folder), "--tp", "8", "--out", str(out), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not out.exists() and not list(tmp_path.glob(".w.safetensors*"))
    assert err[-1].startswith("mtp-tvm: error: ") and all(n in err[-1] for n in names), err[-1]



def _out_onto(tmp_path, folder, what):
    """The --out path (and extra flags) of each output guard's probe, made as the probe needs it."""
    if what == "a shard":
        return folder / "model-00001-of-00003.safetensors", ["--force"]
    if what == "a symlink to a shard":
        (tmp_path / "link").symlink_to(folder / "model-00002-of-00003.safetensors")
        return tmp_path / "link", ["--force"]
    if what == "a hard link of a shard":
        os.link(folder / "model-00003-of-00003.safetensors", tmp_path / "hard.safetensors")
        return tmp_path / "hard.safetensors", ["--force"]
    if what == "the index":
        return folder / INDEX_FILE, ["--force"]
    if what == "the calibration file":
        (tmp_path / "cal.npz").write_bytes(b"")
        return tmp_path / "cal.npz", ["--force", "--calibration", str(tmp_path / "cal.npz")]
    if what == "an existing file":
        (tmp_path / "w.safetensors").write_bytes(b"mine")
        return tmp_path / "w.safetensors", []
    if what == "a missing folder":
        return tmp_path / "nodir" / "w.safetensors", []
    os.mknod(tmp_path / "full", 0o600 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full: every write fails
    return tmp_path / "full", []


@pytest.mark.parametrize("what, message", [
    ("a shard", "is a file of the checkpoint"),
    ("a symlink to a shard", "is a file of the checkpoint"),
    ("a hard link of a shard", "is a file of the checkpoint"),
    ("the index", "is a file of the checkpoint"),
    ("the calibration file", "is the --calibration file"),
    ("an existing file", "already exists; pass --force to replace it"),
    ("a missing folder", "nodir is not a directory"),
    pytest.param("a device node", "No space left on device",
                 marks=pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")),
])
def test_an_output_that_is_an_input_a_device_or_unwritable_is_refused_and_nothing_lost(tmp_path, capsys, what,
                                                                                        message):
    """Refused before a tensor is read (no progress line), except the device, whose writes fail: the checkpoint
    is as it was and the device node stays one (a rename would have put a regular file over it)."""
    folder = write_checkpoint(tmp_path / "ckpt", LayoutName.V4_FLASH)
    before = {f.name: f.read_bytes() for f in folder.iterdir()}
    out, extra = _out_onto(tmp_path, folder, what)
    rc = main(["convert", str(folder), "--tp", "8", "--out", str(out), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("mtp-tvm: error: ") and message in err[-1], err
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == before
    if what == "a device node":
        assert stat.S_ISCHR(os.stat(out).st_mode)
    else:
        assert not any(line.startswith("[read]") for line in err), err


def _unreadable(monkeypatch, blocked):
    """``blocked`` as this user without root's override sees a folder without r/x or a file without r: its own
    stat works, a stat, listing or open below it (or an open of it) is EACCES. (Simulated: tests run as root.)"""
    blocked = os.path.abspath(blocked)

    def guard(name, call):
        def guarded(path, *args, **kwargs):
            p = os.path.abspath(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else None
            if p is not None and (p.startswith(blocked + "/") or p == blocked and name != "stat"):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
            return call(path, *args, **kwargs)
        return guarded

    for name in ("stat", "open", "scandir"):
        monkeypatch.setattr(os, name, guard(name, getattr(os, name)))


@pytest.mark.parametrize("blocked, named", [
    (".", INDEX_FILE),  # the checkpoint folder
    (INDEX_FILE, INDEX_FILE),
    ("model-00002-of-00003.safetensors", "model-00002-of-00003.safetensors"),
    ("..", "ckpt"),  # the folder it is in
])
def test_an_unreadable_checkpoint_folder_or_file_is_one_line(tmp_path, capsys, monkeypatch, blocked, named):
    folder = write_checkpoint(tmp_path / "ckpt", LayoutName.V4_FLASH)
    _unreadable(monkeypatch, folder / blocked)
    rc = main(["convert", str(folder), "--tp", "8", "--out", str(tmp_path / "w.safetensors")])
    monkeypatch.undo()
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("mtp-tvm: error: ") and err[-1].endswith(": cannot read: Permission denied")
    assert named in err[-1] and not (tmp_path / "w.safetensors").exists()


@pytest.mark.parametrize("tamper, message", [
    ({"vocab_shard": "2048 rows"}, "its metadata's vocab_shard is '2048 rows', not a count"),
    ({"owners": None}, "its metadata has no 'owners'"),
    ({"tp": "9" * 5000}, "its metadata's tp is '9999"),
    ({"preset": "huge"}, "its metadata does not fit: unknown preset 'huge'"),
], ids=["vocab-shard-text", "no-owners", "5000-digit-tp", "unknown-preset"])
def test_tampered_converted_metadata_is_one_line(checkpoints, tmp_path, capsys, tamper, message):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    out = tmp_path / "w.safetensors"
    assert main(["convert", str(checkpoints[LayoutName.V4_FLASH]), "--tp", "8", "--out", str(out)]) == 0
    with safe_open(str(out), framework="pt") as f:
        meta = {k: v for k, v in {**f.metadata(), **tamper}.items() if v is not None}
    save_file(load_file(out), str(out), metadata=meta)
    with pytest.raises(mtp_tvm.UsageError, match=re.escape(message)) as err:
        mtp_tvm.load_weights(out, case="tail")
    assert str(err.value).startswith(f"{out}: ") and "\n" not in str(err.value)


@pytest.mark.slow
def test_smoothquant_from_a_calibration_file_smooths_and_keeps_the_bound(checkpoints, tmp_path, capsys):
    cal = tmp_path / "cal.npz"
    assert main(["inputs", "--case", "projection", "--preset", "tiny", "--tokens", "64", "--out", str(cal)]) == 0
    out = tmp_path / "w.safetensors"
    rc = main(["convert", str(checkpoints[LayoutName.V3]), "--tp", "8", "--calibration", str(cal), "--alpha", "0.5",
               "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0 and "smoothing smoothquant(alpha=0.5)" in printed and "(T=64)" in printed
    assert "OVER BOUND" not in printed
    smooth = mtp_tvm.load_weights(out, case="projection")["e_proj_smooth"]
    assert not torch.equal(smooth, torch.ones(256)) and bool((smooth > 0).all())


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LayoutName))
def test_a_converted_file_round_trips_through_check_weights_to_pass(checkpoints, layout, tmp_path, capsys):
    out = tmp_path / "w.safetensors"
    assert main(["convert", str(checkpoints[layout]), "--tp", "8", "--rank", "3", "--out", str(out)]) == 0
    # the converted file; for V3 also the checkpoint itself, converted in memory
    for weights in (out, checkpoints[layout]) if layout == LayoutName.V3 else (out,):
        extra = [] if weights == out else ["--tp", "8", "--rank", "3"]
        rc = main(["check", "--case", "tail", "--preset", "tiny", "--weights", str(weights), *extra])
        printed = capsys.readouterr().out
        assert rc == 0 and "V=512" in printed and "PASSED" in printed, printed


def test_bench_races_every_peer_on_the_given_weights(checkpoints, tmp_path):
    """``bench(weights=...)``: the weights file the workers read holds them, and the golden is computed on them."""
    from types import SimpleNamespace

    from mtp_tvm.compiler.arrays import to_numpy
    from mtp_tvm.tools.bench import bench

    weights = mtp_tvm.load_weights(checkpoints[LayoutName.V3], case="tail", tp=8, rank=2)
    case, shapes = get_case("tail"), make_shapes("tiny", vocab_shard=512, tp=8)
    plan = SimpleNamespace(case=case, sweep=(8,), shapes={8: shapes}, options=SimpleNamespace(seed=0))
    written = bench._write_inputs(plan, tmp_path, weights)
    stored = written.files.weights()
    assert all(np.array_equal(stored[n].view(np.uint8), to_numpy(w).view(np.uint8)) for n, w in weights.items())
    inputs = {**case.make_inputs(shapes, 0), **weights}
    assert torch.equal(torch.as_tensor(np.asarray(written.golden[8])), case.golden(inputs, shapes)["candidate_logits"])


def test_weights_options_need_weights_and_fit_the_build(checkpoints, tmp_path, capsys):
    for argv in (["check", "--case", "tail", "--rank", "3"], ["check", "--artifact", "x", "--rank", "3"],
                 ["run", "x", "--random-inputs", "--rank", "3"], ["bench", "--module", "x.py", "--rank", "3"]):
        assert main(argv) == 2
        assert "--rank read a checkpoint: give --weights CKPT" in capsys.readouterr().err
    out = tmp_path / "w.safetensors"
    assert main(["convert", str(checkpoints[LayoutName.V4_FLASH]), "--tp", "8", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["check", "--case", "tail", "--preset", "flash", "--weights", str(out)]) == 2
    assert "converted for preset tiny, not flash" in capsys.readouterr().err
    assert main(["check", "--case", "tail", "--preset", "tiny", "--weights", str(out), "--vocab-shard", "64"]) == 2
    assert "the weights' LM-head shard has 512 rows (tp 8)" in capsys.readouterr().err
    assert main(["check", "--case", "tail", "--preset", "tiny", "--weights", str(out), "--calibration", "x"]) == 2
    assert "is already converted" in capsys.readouterr().err
    from safetensors.torch import load_file, save_file

    tampered = load_file(out)
    tampered["e_proj_w"] = tampered["e_proj_w"].float()
    (tmp_path / "t").mkdir()
    bad = tmp_path / "t" / "t.safetensors"
    save_file(tampered, str(bad), metadata=converted_metadata(out))
    assert main(["check", "--case", "tail", "--preset", "tiny", "--weights", str(bad)]) == 2
    assert "t.safetensors: tensor 'e_proj_w' has dtype F32, expected I8 (case 'tail')" in capsys.readouterr().err
    assert main(["convert", str(out), "--out", str(tmp_path / "again.safetensors")]) == 2
    assert "is already converted; convert reads a checkpoint" in capsys.readouterr().err
    assert main(["convert", str(out.parent), "--out", str(tmp_path / "x.safetensors")]) == 2  # its one file
    assert "holds the marker tensors of none of the known layouts" in capsys.readouterr().err
