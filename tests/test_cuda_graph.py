"""``BuildSpec.cuda_graph``: main's kernels captured as CUDA graphs (the option, its size bound, the flag), and
the kernel launches a CUDA build makes per call with and without it (nvcc builds; the replay itself needs a GPU:
scripts/gpu_check_artifacts benches it)."""

import shutil

import pytest

import mtp_tvm
from mtp_tvm.artifact.manifest import manifest_spec
from mtp_tvm.compiler.options import CUDA_GRAPH_ROWS, BuildSpec, check_graph_rows
from mtp_tvm.support.errors import UsageError


def test_the_option_is_typed_and_restated_as_its_flag():
    with pytest.raises(UsageError, match="^cuda_graph must be True or False, got 'yes'$"):
        BuildSpec(cuda_graph="yes")
    assert BuildSpec(target="cuda", cuda_graph=True).as_argv()[-1] == "--cuda-graph"
    assert "--cuda-graph" not in BuildSpec().as_argv()


def test_sizes_over_the_graphs_rows_are_refused():
    check_graph_rows({"T": CUDA_GRAPH_ROWS}, "case 'tail'")
    with pytest.raises(UsageError, match=rf"^case 'tail' was built with cuda_graph for at most {CUDA_GRAPH_ROWS} "
                                         r"token rows, got T=17; build without --cuda-graph for more$"):
        check_graph_rows({"T": 17}, "case 'tail'")


def test_a_cpu_target_is_refused_before_building():
    with pytest.raises(UsageError, match="^cuda_graph needs a CUDA target, got llvm$"):
        mtp_tvm.compile(case="norm", preset="tiny", cuda_graph=True)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_tails_kernels_between_pad_and_unpad_become_two_graphs(tmp_path):
    """The tail launches 14 kernels per call (pad x2, norm x2, quantize x2 of 3 kernels each, the fused dual GEMM,
    the logits, unpad x2: one of each GEMV's kernels for the call's T); with ``cuda_graph`` the 10 between the
    pads and the unpads replay as 2 graphs (the projected rows are an output, unpadded between them), leaving 4
    direct launches. Its artifact says so."""
    plain = mtp_tvm.compile(case="tail", target="cuda", preset="tiny")
    built = mtp_tvm.build(tmp_path / "graph", case="tail", target="cuda", preset="tiny", cuda_graph=True)
    graph = built.compiled
    assert built.manifest["build"]["cuda_graph"] is True and manifest_spec(built.manifest).cuda_graph
    before, after = (m.launches() for m in (plain, graph))
    assert (before.direct, before.graphs, before.in_graphs) == (14, 0, 0)
    assert (after.direct, after.graphs, after.in_graphs) == (4, 2, 10)
    assert before.per_function == after.per_function
    assert "vm.builtin.cuda_graph.run_or_capture" in graph.executable.as_text()
    assert after.describe() == "14 kernels per call: 4 launched directly, 2 CUDA graph(s) holding 10"
