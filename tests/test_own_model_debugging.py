"""Own models down to the op (issue 36): ``localize --module`` names the first op that differs from eager torch
with its source line, ``minimize`` cuts the graph to a few failing ops, ``check --module --shape`` runs other
sizes. The model is ``tests/modules/transformer_block.py`` (RMSNorm, RoPE, causal attention, a SiLU-gated MLP,
a dynamic sequence length) and the bug ``tests/modules/fp16_norm_accumulator.py`` (the norm's mean in FP16)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import QUIET, REPO
from mtp_tvm.cli import main
from mtp_tvm.contract.cases import TensorDecl
from mtp_tvm.ir.graph_nodes import GraphNode, source_line
from mtp_tvm.ir.module_sizes import bind_sizes, parse_shapes, sized_inputs
from mtp_tvm.support.errors import UsageError
from mtp_tvm.tools.minimize.minimize import ddmin

MODULES = REPO / "tests" / "modules"
BLOCK = MODULES / "transformer_block.py"
FP16_NORM = MODULES / "fp16_norm_accumulator.py"
NORM_LINE = "x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight"

SPECS = {"x": TensorDecl("x", ("s0", 32), "float32"), "mask": TensorDecl("mask", ("s0", "s1"), "int64"),
         "w": TensorDecl("w", (32,), "float32")}
EXAMPLES = {"x": np.ones((8, 32), np.float32), "mask": np.array([[0, 3], [1, 2]], np.int64),
            "w": np.arange(32, dtype=np.float32)}


def test_shapes_parse_and_bad_ones_are_one_line_errors():
    assert parse_shapes(["x=16,32", "mask=16,16"]) == {"x": (16, 32), "mask": (16, 16)}
    for bad, message in (("x", "expected NAME=DIM"), ("x=0,32", "positive integer"), ("=3", "expected NAME"),
                         ("x=\u00b2,32", "positive integer"), ("x=\u0663,32", "positive integer")):  # ², Arabic 3
        with pytest.raises(UsageError, match=message):
            parse_shapes([bad])
    with pytest.raises(UsageError, match="names x twice"):
        parse_shapes(["x=1,32", "x=2,32"])


@pytest.mark.parametrize("shapes, message", [
    ({"y": (4, 32)}, "y: not an input of the module"),
    ({"x": (4,)}, "1 sizes for an input of 2 dims"),
    ({"x": (4, 31)}, "dim 1 is fixed at 32, got 31"),
    ({"x": (4, 32), "mask": (5, 5)}, "symbolic size s0, already 4"),
    ({"x": (4, 32)}, "input mask .* has the free size"),
    ({"x": (65, 32), "mask": (65, 65)}, r"s0=65 is outside dynamic_shapes\(\)'s bounds \[2, 64\]"),
    ({"x": (1, 32), "mask": (1, 1)}, r"s0=1 is outside"),
])
def test_a_size_the_module_cannot_run_is_refused(shapes, message):
    with pytest.raises(UsageError, match=message):
        bind_sizes(SPECS, ("x", "mask"), shapes, {"s0": (2, 64)})


def test_sizes_are_said_by_the_users_dim_names():
    names = {"s0": "seq"}
    with pytest.raises(UsageError, match=r"symbolic size seq=65 is outside"):
        bind_sizes(SPECS, ("x", "mask"), {"x": (65, 32), "mask": (65, 65)}, {"s0": (2, 64)}, names)
    with pytest.raises(UsageError, match=r"input mask \['seq', 's1'\] has the free size\(s\) s1"):
        bind_sizes(SPECS, ("x", "mask"), {"x": (4, 32)}, {"s0": (2, 64)}, names)


def test_inputs_larger_than_the_memory_are_refused_before_any_allocation(monkeypatch):
    import mtp_tvm.ir.module_sizes as module_sizes

    monkeypatch.setattr(np.random, "default_rng", lambda *a, **k: pytest.fail("drew inputs"))
    with pytest.raises(UsageError, match=r"take 4,352.0 GiB, more than this machine's"):
        sized_inputs(SPECS, ("x", "mask"), EXAMPLES, {"x": (2**35, 32), "mask": (2**35, 1)}, None)
    monkeypatch.setattr(module_sizes, "physical_memory", lambda: 1024)
    with pytest.raises(UsageError, match="more than this machine's"):
        sized_inputs(SPECS, ("x", "mask"), EXAMPLES, {"x": (8, 32), "mask": (8, 8)}, None)


def test_sized_inputs_are_seeded_at_the_size_and_keep_the_parameters():
    shapes = {"x": (5, 32), "mask": (5, 5)}
    a = sized_inputs(SPECS, ("x", "mask"), EXAMPLES, shapes, {"s0": (2, 64)}, seed=1)
    b = sized_inputs(SPECS, ("x", "mask"), EXAMPLES, shapes, {"s0": (2, 64)}, seed=1)
    assert a["x"].shape == (5, 32) and a["x"].dtype == np.float32 and a["mask"].dtype == np.int64
    assert a["mask"].min() >= 0 and a["mask"].max() <= 3  # integers within the example's range
    assert a["w"] is EXAMPLES["w"] and all(np.array_equal(a[k], b[k]) for k in a)


def test_ddmin_finds_a_one_minimal_failing_subset():
    fails = lambda s: {"c", "f"} <= set(s)  # noqa: E731
    assert ddmin(list("abcdefgh"), fails) == ["c", "f"]
    assert ddmin(["a"], lambda s: True) == ["a"]


@pytest.mark.slow  # a few builds of small pieces
def test_minimize_keeps_a_failing_build_and_its_piece_fails_the_same_way(tmp_path):
    from mtp_tvm import check
    from mtp_tvm.support.errors import BuildError
    from mtp_tvm.tools.minimize.minimize import minimize_module

    result = minimize_module(MODULES / "causal_mask_full.py", out=tmp_path / "mask_min.py", **QUIET)
    assert "legalize/LegalizeOps" in result.failure and "op relax.full" in result.failure
    assert "aten.full.default" in result.ops and len(result.nodes) <= 3 < result.graph_nodes
    assert "still fail the build in pass legalize/LegalizeOps" in result.summary()
    assert "torch.export.Dim('seq', min=2, max=64)" in (tmp_path / "mask_min.py").read_text()  # the size kept symbolic
    with pytest.raises(BuildError, match=r"in pass legalize/LegalizeOps on Relax function main, op relax\.full"):
        check(tmp_path / "mask_min.py", **QUIET)


def test_a_node_names_the_users_source_line_over_torchs_own():
    from pathlib import Path
    from types import SimpleNamespace

    trace = ('File "/x/torch/nn/modules/module.py", line 1, in _call_impl\n    return forward(*args)\n'
             'File "/u/block.py", line 18, in forward\n    return x * 2\n'
             'File "/x/torch/nn/modules/linear.py", line 134, in forward\n    return F.linear(x, w)\n'
             'File "/x/torch/fx/proxy.py", line 9, in create\n')  # a frame without its code line
    node = SimpleNamespace(meta={"stack_trace": trace})
    assert source_line(node, Path("/u/block.py")) == "/u/block.py:18 in forward: return x * 2"
    assert source_line(node, Path("/elsewhere.py")) == "/x/torch/fx/proxy.py:9 in create: "
    assert source_line(SimpleNamespace(meta={}), Path("/u/block.py")) is None
    node = GraphNode("mean", "aten.mean.dim", "block.py:18 in forward: return x * 2", "norm (RMSNorm)")
    assert node.describe() == "mean (aten.mean.dim) in norm (RMSNorm) at block.py:18 in forward: return x * 2"


@pytest.mark.parametrize("argv, message", [
    (["check", "--case", "norm", "--shape", "x=4,32"], "--shape sizes a module file's inputs"),
    (["minimize", "--case", "norm"], "minimize cuts your own model: give --module"),
    (["run", "D", "--inputs", "in.npz", "--shape", "x=4,32"], "--shape size the seeded inputs of --random-inputs"),
])
def test_misplaced_flags_are_refused_before_any_build(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow  # a build (the guide's first block localizes the plugin's failure)
def test_localize_module_of_a_correct_build_passes_with_most_calls_partnered(tmp_path, capsys):
    import json

    report = tmp_path / "localize.json"
    assert main(["localize", "--module", str(BLOCK), "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "every partnered kernel call is within tolerance" in out and "against eager torch" in out
    ops = json.loads(report.read_text())["ops"]
    partnered = [op for op in ops if op["node"] is not None]
    assert len(partnered) >= len(ops) - 4  # only the attention mask's kernels lack a node of their own
    assert {op["partnered_by"] for op in partnered} == {"name", "value"}


def test_a_call_is_partnered_by_value_only_with_a_node_of_its_value():
    from mtp_tvm.tools.check.torch_reference import NEAR, _distance

    scores = np.arange(16, dtype=np.float32).reshape(4, 4)
    masked = np.where(np.tril(np.ones((4, 4), bool)), scores, -np.inf).astype(np.float32)
    assert _distance(masked, scores) == np.inf  # -inf where the node is finite: the mask, not these scores
    assert _distance(masked, masked.copy()) == 0
    assert _distance(scores * np.float32(1 + 1e-3), scores) <= NEAR  # a pass's rounding: still its node
    assert _distance(np.tril(np.ones((4, 4), bool)), np.tril(np.ones((4, 4), bool))) == 0
    assert _distance(np.array([1, 2], np.int64), np.array([1, 3], np.int64)) == np.inf  # integers: exact


def _block_variant(tmp_path, name: str, replacements: dict[str, str]):
    text = BLOCK.read_text()
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


CAUSAL_SDPA = "torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)"
ARANGE_MASK = {  # a boolean mask built from arange before the norm, shared by two attentions
    "        seq = x.shape[0]\n": "        seq = x.shape[0]\n        pos = torch.arange(seq)\n"
                                  "        causal = pos[:, None] >= pos[None, :]\n",
    CAUSAL_SDPA: CAUSAL_SDPA.replace("is_causal=True", "attn_mask=causal") + " + "
                 + CAUSAL_SDPA.replace("q, k, v, is_causal=True", "v, k, q, attn_mask=causal"),
}
SQUARE_SCORES = {"torch.randn(8, HIDDEN": "torch.randn(16, HIDDEN"}  # 16 rows = HEAD_DIM: scores and heads alike


@pytest.mark.slow  # four builds
@pytest.mark.parametrize("variant", [SQUARE_SCORES, ARANGE_MASK], ids=["seq-equals-head-dim", "arange-mask"])
def test_localize_module_names_the_bug_never_the_causal_mask(tmp_path, variant):
    """A kernel that adds the causal mask to the scores holds what no torch node holds (SDPA is one node): it has
    no partner, not the nearest node of its shape (at 16 rows the scores have the heads' shape). A boolean mask
    torch computes too is compared exactly and matches."""
    from mtp_tvm import localize
    from mtp_tvm.compiler.options import DebugOptions
    from mtp_tvm.passes.plugins import load_pass_plugin

    block = _block_variant(tmp_path, "block.py", variant)
    clean = localize(block, **QUIET)
    assert clean.passed, clean.describe_first()
    masks = [op for op in clean.ops if op.comparison is not None and op.comparison.numel and
             op.call.outputs[0][1] == "bool"]
    assert all(op.comparison.passed for op in masks) and (masks or variant is SQUARE_SCORES)
    buggy = localize(block, DebugOptions(extra_passes=load_pass_plugin(FP16_NORM)), **QUIET)
    assert buggy.first is not None and "RMSNorm" in buggy.first.node.module
    assert NORM_LINE in buggy.first.node.source


@pytest.mark.slow  # two builds
def test_localize_module_against_another_build_writes_a_kernel_reproducer(tmp_path, monkeypatch):
    from pathlib import Path

    from mtp_tvm import localize
    from mtp_tvm.compiler.options import DebugOptions
    from mtp_tvm.passes.plugins import load_pass_plugin

    monkeypatch.chdir(tmp_path)  # its dumps/ with kernel_repro/
    result = localize(BLOCK, DebugOptions(extra_passes=load_pass_plugin(FP16_NORM)),
                             against="schedule=none", **QUIET)
    assert not result.passed and result.first.test.kernel.startswith("matmul")
    assert not result.first.inputs_matched  # its input is the norm's output: the norm is where it began
    assert (tmp_path / Path(result.kernel_repro_dir) / "repro.py").is_file()


@pytest.mark.slow  # a build (the guide's last block checks two sizes)
def test_check_module_at_another_size_with_the_nan_check(capsys):
    assert main(["check", "--module", str(BLOCK), "--shape", "x=37,32", "--seed", "2", "--nan-check"]) == 0
    out = capsys.readouterr().out
    assert "[RUN] inputs at --shape: x[37, 32]" in out and "inputs=x[37,32] seed=2" in out and "0/1184" in out
    assert "first non-finite value in the build" in out and "its inputs already held some" in out  # the mask
    assert main(["check", "--module", str(BLOCK), "--shape", "x=65,32"]) == 2
    assert "the symbolic size seq=65 is outside dynamic_shapes()'s bounds [2, 64]" in capsys.readouterr().err


@pytest.mark.slow  # a build and the reproducer's
def test_a_failing_module_check_writes_a_reproducer_that_fails_alone(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from mtp_tvm.tools.check.repro import rerun

    monkeypatch.chdir(tmp_path)
    assert main(["check", "--module", str(BLOCK), "--pass-plugin", str(FP16_NORM)]) == 1
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("reproducer: "))
    folder = Path(line.split()[1])
    assert "--extra-passes" in (folder / "command.txt").read_text()
    assert rerun(folder, **QUIET) == 1  # REPRODUCED, without the plugin


@pytest.mark.slow  # builds an artifact
def test_a_module_artifact_runs_at_another_size(tmp_path, capsys):
    assert main(["build", "--module", str(BLOCK), "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert main(["run", str(tmp_path / "a"), "--random-inputs", "--shape", "x=11,32", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    assert "output0" in out and "(11, 32)" in out and "nothing is checked" in out
    assert main(["run", str(tmp_path / "a"), "--random-inputs", "--shape", "x=99,32"]) == 2
    assert "the symbolic size seq=99 is outside dynamic_shapes()'s bounds [2, 64]" in capsys.readouterr().err


GUIDE = REPO / "docs" / "guides" / "own-model-debugging.md"


def _guide_blocks() -> tuple[list[str], list[str]]:
    """The guide's ``mtp-tvm`` command lines (indented blocks) and its Python blocks."""
    text = GUIDE.read_text()
    commands = [line.strip() for line in text.splitlines() if line.startswith("    mtp-tvm ")]
    python = [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]
    return commands, python


def test_the_guides_commands_parse():
    import shlex

    from mtp_tvm.cli import build_parser

    commands, python = _guide_blocks()
    assert len(commands) >= 5 and len(python) == 3
    for command in commands:
        build_parser().parse_args(shlex.split(command)[1:])  # a flag the command lacks exits 2


@pytest.mark.slow  # each block builds
@pytest.mark.parametrize("index", range(3))
def test_the_guides_python_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a failing check's dumps/ there; the guide's paths are the checkout's
    code = _guide_blocks()[1][index].replace('"tests/modules/', f'"{REPO}/tests/modules/')
    exec(compile(code, f"{GUIDE.name} block {index}", "exec"), {})


@pytest.mark.slow  # two builds of a one-op model
def test_the_users_forward_never_runs_in_this_process(tmp_path):
    """localize's op-by-op torch values and check --shape's reference are the exported program run by torch: the
    file's own code runs only in the child that loads it (``support/user_process.py``), so it cannot decide them."""
    import os

    from mtp_tvm import check, localize

    pids = tmp_path / "pids.txt"
    path = tmp_path / "pid_model.py"
    path.write_text(f"import os\nimport torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
                    f"        with open({str(pids)!r}, 'a') as f:\n            f.write(f'{{os.getpid()}}\\n')\n"
                    "        return torch.relu(x) * 2\n\n\ndef model():\n    return M()\n\n\n"
                    "def example_inputs():\n    return (torch.randn(4, 8),)\n\n\n"
                    "def dynamic_shapes():\n    return ({0: torch.export.Dim('rows', min=2, max=16)},)\n")
    assert localize(path, **QUIET).passed
    r = check(path, shapes={"x": (11, 8)}, seed=3, **QUIET)
    assert r.passed and r.shapes == {"x": [11, 8]}
    ran_in = {int(p) for p in pids.read_text().split()}
    assert ran_in and os.getpid() not in ran_in  # the children ran it (export, eager); this process never did


def test_the_old_name_localize_module_still_answers_with_a_deprecation_warning():
    import mtp_tvm

    with pytest.warns(DeprecationWarning, match=r"localize_module is deprecated: localize\(\) takes a module file"):
        assert mtp_tvm.localize_module is mtp_tvm.localize


@pytest.mark.slow  # a TVMScript module built twice (the check's and its reference)
def test_a_failing_module_check_computes_its_reference_once_for_the_verdict_and_the_reproducer(tmp_path,
                                                                                             monkeypatch):
    """Issue 43: the reproducer reuses the reference the verdict computed (a TVMScript module's is a build)."""
    from mtp_tvm import check
    from mtp_tvm.compiler.options import DebugOptions
    from mtp_tvm.passes.plugins import load_pass_plugin
    from mtp_tvm.verify import module_golden
    from mtp_tvm.verify.tolerances import Tolerance

    builds, real = [], module_golden.reference_build
    monkeypatch.setattr(module_golden, "reference_build", lambda compiled: builds.append(1) or real(compiled))
    monkeypatch.setenv("MTP_TVM_DUMPS", str(tmp_path))  # the reproducer's run folder
    plugin = DebugOptions(extra_passes=load_pass_plugin(MODULES / "loose_epsilon.py"))
    result = check(REPO / "examples" / "tvmscript_module.py", plugin, tolerance=Tolerance(exact=True), **QUIET)
    assert not result.passed and result.repro_dir and len(builds) == 1
