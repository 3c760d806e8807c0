"""The importer's everyday gaps filled (``ir/op_coverage.py``): a zoo of small torch blocks (``tests/module_blocks/
op_zoo.py``, 50 operators and idioms beyond the examples) exported, imported, built and run as one model, each
output against eager torch; what is still missing fails before the build, naming the torch op and the line."""

import sys

import numpy as np
import pytest

from helpers import REPO
from mtp_tvm.support.errors import UsageError

sys.path.insert(0, str(REPO / "tests" / "module_blocks"))
from op_zoo import ZOO, inputs  # noqa: E402

ZOO_FILE = REPO / "tests" / "module_blocks" / "op_zoo.py"


def _zoo_model():
    """Every zoo block in one model (one export, one build): its inputs in zoo order, its outputs flattened."""
    import torch

    class Zoo(torch.nn.Module):
        def forward(self, *xs):
            outs, at = [], 0
            for fn, shapes in ZOO.values():
                got = fn(*xs[at:at + len(shapes)])
                at += len(shapes)
                outs += list(got) if isinstance(got, tuple) else [got]
            return tuple(outs)

    return Zoo().eval(), tuple(x for _, shapes in ZOO.values() for x in inputs(shapes))


def _zoo_build(model, xs, target_name: str):
    """The zoo exported, imported and built for ``target_name`` through our pipeline."""
    import torch
    import tvm
    from tvm import relax

    from mtp_tvm.ir.op_coverage import import_program
    from mtp_tvm.passes.pipeline import compile_through_phases
    from mtp_tvm.passes.target import resolve_target
    from mtp_tvm.schedule.apply import ApplySchedules

    mod, _ = relax.frontend.detach_params(import_program(torch.export.export(model, xs), ZOO_FILE)[0])
    target = resolve_target(target_name)
    with tvm.transform.PassContext(opt_level=3):
        return compile_through_phases(mod, target, ApplySchedules(target, "default", None))


@pytest.mark.slow
def test_a_zoo_of_everyday_blocks_imports_builds_and_matches_torch():
    import tvm
    from tvm import relax

    model, xs = _zoo_model()
    ex = _zoo_build(model, xs, "llvm")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(x.numpy()) for x in xs])
    want = model(*xs)
    matched, at = [], 0
    for name, (fn, shapes) in ZOO.items():
        count = len(fn(*inputs(shapes))) if isinstance(fn(*inputs(shapes)), tuple) else 1
        pairs = [(got[k].numpy(), want[k].numpy()) for k in range(at, at + count)]
        at += count
        if all(g.dtype == w.dtype and np.allclose(g, w, rtol=1e-5, atol=1e-5) for g, w in pairs):
            matched.append(name)
    print(f"op coverage: {len(matched)}/{len(ZOO)} zoo blocks import, build and match eager torch")
    assert matched == list(ZOO) and len(ZOO) >= 25


@pytest.mark.slow
def test_the_zoo_builds_for_cuda():
    """Every zoo block has a GPU schedule too: the sorts and scans are TVM's GPU kernels (the pipeline's library
    dispatch), where TOPI's generic scan, which no dlight rule schedules, refused a ``cumsum``."""
    assert _zoo_build(*_zoo_model(), "cuda") is not None


GAP = """import torch

class Model(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        return {op}

def model():
    return Model()

def example_inputs():
    return (torch.randn(4, 8),)
"""


@pytest.mark.slow
def test_an_op_without_a_converter_is_named_with_its_source_line(tmp_path):
    from mtp_tvm.ir.module_file import load_module_file

    path = tmp_path / "gap.py"
    path.write_text(GAP.format(op="torch.kthvalue(y, 2, dim=1).values"))
    with pytest.raises(UsageError) as e:
        load_module_file(path)
    assert str(e.value) == (f"module file {path}: torch op aten.kthvalue.default at {path}:6 in forward: return "
                            "torch.kthvalue(y, 2, dim=1).values: TVM 0.27's importer has no converter for it (nor "
                            "has mtp_tvm's ir/op_coverage.py); rewrite it with supported ops")


@pytest.mark.slow
def test_an_op_the_importer_makes_unlowerable_is_named_before_the_build(tmp_path, monkeypatch):
    """An operator the importer makes that nothing lowers is refused at import, not left to fail in the VM's code
    generator: ``R.topk`` has no legalisation, so without the pipeline's library dispatch (planted here by
    leaving it out of ``DISPATCHED_OPS``) it is one."""
    from mtp_tvm.ir import op_coverage
    from mtp_tvm.ir.module_file import load_module_file

    monkeypatch.setattr(op_coverage, "DISPATCHED_OPS", op_coverage.DISPATCHED_OPS - {"relax.topk"})
    path = tmp_path / "gap.py"
    path.write_text(GAP.format(op="y.topk(2).values"))
    with pytest.raises(UsageError, match=rf"torch op aten.topk.default at {path}:6 in forward: return "
                                         r"y.topk\(2\).values: TVM's importer makes it relax.topk, which no "
                                         "legalisation lowers"):
        load_module_file(path)


@pytest.mark.slow  # two builds
@pytest.mark.parametrize("size", [8, 64])
def test_a_table_sliced_to_a_symbolic_size_in_bounds_keeps_that_size(size):
    from mtp_tvm import check

    module = REPO / "tests" / "modules" / "rope_table_slice.py"
    assert check(module, shapes={"x": (size, 16)} if size != 8 else None, log=lambda *_: None).passed
