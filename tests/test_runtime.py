"""The runtime's thread count follows the cores the process may use; TVM_NUM_THREADS overrides it. Bound weights
give bitwise run's outputs; run packs a set of weight objects once; a changed weight is never served stale; bad
weights and activations are one-line errors."""

import dataclasses
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
import tvm

from mtp_tvm.compiler.arrays import to_numpy
from mtp_tvm.compiler.runtime import TRANSFORM_PARAMS
from mtp_tvm.compiler.tensors import to_device
from mtp_tvm.compiler.weights import WeightCache
from mtp_tvm.contract.presets import make_shapes
from mtp_tvm.support.errors import UsageError

SCRIPT = """
import os, sys
if sys.argv[1] != "all":
    os.sched_setaffinity(0, {{int(c) for c in sys.argv[1].split(",")}})
import mtp_tvm
from mtp_tvm.compiler.runtime import runtime_threads
mtp_tvm.compile(case="norm", preset="tiny").vm
print(runtime_threads())
"""


def _threads(cores: str, **env) -> int:
    base = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(), cores], env={**base, **env}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a subprocess that imports TVM
def test_every_usable_core_by_default():
    assert _threads("all") == len(os.sched_getaffinity(0))


@pytest.mark.slow  # a subprocess that imports TVM
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to narrow the affinity to one")
def test_a_narrowed_affinity_narrows_the_pool():
    assert _threads(str(min(os.sched_getaffinity(0)))) == 1


@pytest.mark.slow  # a subprocess that imports TVM
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="with one core the default is already 1")
def test_tvm_num_threads_overrides():
    assert _threads("all", TVM_NUM_THREADS="1") == 1  # (TVM caps it at the cores there are)


# ---- bind(weights) and the weight cache -------------------------------------------------------------------------

WEIGHT = "lm_head_weight"


class CountingVM:
    """A VM that counts the calls of ``main_transform_params`` (the weight packing)."""

    def __init__(self, vm):
        self.vm, self.packs = vm, 0

    def __getitem__(self, name):
        self.packs += name == TRANSFORM_PARAMS
        return self.vm[name]

    def __getattr__(self, name):
        return getattr(self.vm, name)


@pytest.fixture
def logits(compiled):
    """The session's tiny logits build with a fresh VM that counts its packings, and a fresh weight cache."""
    m = dataclasses.replace(compiled("logits", "tir"), _vm=None, _weights=WeightCache())
    m._vm = CountingVM(m.vm)
    return m


def _split(m, inputs: dict) -> tuple[dict, dict]:
    return {n: inputs[n] for n in m.activation_specs}, {n: inputs[n] for n in m.weight_specs}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)) for k in a)


def test_bound_runs_are_bitwise_the_runs_and_bind_reuses_runs_packing(logits):
    inputs = logits.case.make_inputs(logits.shapes, 0)
    acts, weights = _split(logits, inputs)
    assert list(acts) == ["hidden_states"] and list(weights) == [WEIGHT]
    bound = logits.bind(weights)
    for t in (1, 5, logits.shapes.tokens):
        rows = {"hidden_states": inputs["hidden_states"][:t]}
        assert _same(bound.run(rows), logits.run({**inputs, **rows}))
    assert logits.bind(weights).run(acts).keys() == {"candidate_logits"}
    assert logits.vm.packs == 1  # one weight set, packed once for bind, run and the second bind


def test_run_packs_a_set_of_weight_objects_once(logits):
    inputs = logits.case.make_inputs(logits.shapes, 0)
    first = logits.run(inputs)
    assert _same(logits.run(inputs), first) and logits.vm.packs == 1
    as_numpy = {n: to_numpy(v) for n, v in inputs.items()}
    logits.run(as_numpy)
    assert _same(logits.run(as_numpy), first) and logits.vm.packs == 2
    copy = to_numpy(inputs[WEIGHT]).copy()  # another array, equal bytes: packed again (identity, not content)
    assert _same(logits.run({**inputs, WEIGHT: copy}), first) and logits.vm.packs == 3


def test_a_torch_weight_changed_in_place_is_packed_again_by_run_and_refused_by_a_bound_run(logits):
    inputs = logits.case.make_inputs(logits.shapes, 0)
    acts, weights = _split(logits, inputs)
    before = logits.run(inputs)
    bound = logits.bind(weights)
    inputs[WEIGHT].mul_(0.5)
    with pytest.raises(UsageError, match=rf"^weight '{WEIGHT}' changed in place since bind; call rebind$"):
        bound.run(acts)
    after = logits.run(inputs)  # the same object, changed: packed again
    assert not _same(after, before) and _same(after, logits.run({**inputs, WEIGHT: inputs[WEIGHT].clone()}))
    bound.rebind(weights)
    assert _same(bound.run(acts), after)


def test_making_a_numpy_weight_read_only_is_said_once_and_torch_weights_are_left_alone(logits, monkeypatch):
    from mtp_tvm.compiler import weights

    monkeypatch.setattr(weights, "_warned", [])
    inputs = logits.case.make_inputs(logits.shapes, 0)
    acts, _ = _split(logits, inputs)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        logits.run({**acts, WEIGHT: inputs[WEIGHT]})  # a torch tensor: watched by its version counter, untouched
        assert not said
        for _ in range(2):
            logits.run({**acts, WEIGHT: to_numpy(inputs[WEIGHT]).copy()})
    assert [w.category for w in said] == [weights.ReadOnlyWeightWarning]
    assert f"numpy weight '{WEIGHT}' read-only" in str(said[0].message) and said[0].filename == __file__


def test_a_check_warns_of_no_array_the_user_never_gave(monkeypatch):
    """The README's first line: check draws its own inputs, so there is no array of the user's to speak of."""
    import mtp_tvm
    from mtp_tvm.compiler import weights

    monkeypatch.setattr(weights, "_warned", [])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert mtp_tvm.check(case="logits", preset="tiny", log=lambda *_: None).passed
    assert [w for w in said if w.category is weights.ReadOnlyWeightWarning] == []


def test_a_bound_numpy_weight_is_read_only_and_made_writeable_it_is_refused(logits):
    inputs = logits.case.make_inputs(logits.shapes, 0)
    acts, _ = _split(logits, inputs)
    w = to_numpy(inputs[WEIGHT]).copy()
    bound = logits.bind({WEIGHT: w})
    with pytest.raises(ValueError, match="read-only"):
        w[0, 0] = 1
    w.flags.writeable = True
    w *= 2
    with pytest.raises(UsageError, match=rf"^weight '{WEIGHT}' was made writeable again since bind; call rebind$"):
        bound.run(acts)
    assert _same(logits.run({**acts, WEIGHT: w}), logits.run({**acts, WEIGHT: w.copy()}))  # packed again
    bound.rebind({WEIGHT: w})
    assert _same(bound.run(acts), logits.run({**acts, WEIGHT: w}))


def test_activations_are_read_in_place_or_copied_alike_and_outputs_stay_the_callers(logits):
    inputs = logits.case.make_inputs(logits.shapes, 0)
    acts, weights = _split(logits, inputs)
    bound = logits.bind(weights)
    h = inputs["hidden_states"]
    first = bound.run(acts)  # an aligned torch tensor: shared with the kernels through DLPack
    kept = {k: v.copy() for k, v in first.items()}
    flat = torch.empty(h.numel() + 1, dtype=h.dtype)
    misaligned = flat[1:].view(h.shape)  # 2 bytes past an aligned buffer: copied
    misaligned.copy_(h)
    strided = h.t().contiguous().t()
    for same in (misaligned, to_numpy(h), strided):  # copied
        assert _same(bound.run({"hidden_states": same}), first)
    bound.run({"hidden_states": h * 2})
    assert _same(first, kept)  # an output is the caller's: a later call does not write into it


def _nan_at(w: torch.Tensor, where: tuple) -> torch.Tensor:
    w = w.clone()
    w[where] = float("nan")
    return w


def _inference(w: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return w.clone()


@pytest.mark.parametrize("make, message", [
    (lambda w: {}, rf"weights do not match case 'logits': missing \['{WEIGHT}'\], unexpected \[\]"),
    (lambda w: {WEIGHT: w, "hidden_states": w}, r"unexpected \['hidden_states'\]"),
    (lambda w: {WEIGHT: w.float()}, rf"input '{WEIGHT}' has dtype float32, expected bfloat16"),
    (lambda w: {WEIGHT: w[:3]}, rf"input '{WEIGHT}' has shape \(3, 256\), expected \(512, 256\)"),
    (lambda w: {WEIGHT: _nan_at(w, (3, 5))}, rf"input '{WEIGHT}' has 1 non-finite values \(NaN/Inf\), the first at "
                                             r"\(3, 5\)"),
    (lambda w: {WEIGHT: to_numpy(_nan_at(w, (7, 1)))}, r"1 non-finite values \(NaN/Inf\), the first at \(7, 1\)"),
    (lambda w: {WEIGHT: _inference(w)}, rf"weight '{WEIGHT}' is a torch inference tensor"),
    (lambda w: {WEIGHT: w.to("meta")}, r"^a torch.strided tensor on the meta device \(512, 256\) has no values"),
    (lambda w: {WEIGHT: w.float().to_sparse()}, r"a torch.sparse_coo tensor on the cpu device"),
])
def test_bad_weights_at_bind_are_one_line_usage_errors(logits, make, message):
    weights = make(logits.case.make_inputs(logits.shapes, 0)[WEIGHT])
    with pytest.raises(UsageError, match=message) as e:
        logits.bind(weights)
    assert len(str(e.value).splitlines()) == 1 and logits.vm.packs == 0


@pytest.mark.parametrize("make, message", [
    (lambda h, w: {}, r"activations do not match case 'logits': missing \['hidden_states'\]"),
    (lambda h, w: {"hidden_states": h, WEIGHT: w}, rf"unexpected \['{WEIGHT}'\]"),
    (lambda h, w: {"hidden_states": h.float()}, "input 'hidden_states' has dtype float32, expected bfloat16"),
    (lambda h, w: {"hidden_states": _nan_at(h, (1, 2))}, r"'hidden_states' has 1 non-finite .* first at \(1, 2\)"),
    (lambda h, w: {"hidden_states": h[:0]}, "0 tokens"),
    (lambda h, w: {"hidden_states": h.to("meta")}, r"^a torch.strided tensor on the meta device \(8, 256\) has no "
                                                   "values"),
])
def test_bad_activations_of_a_bound_run_are_one_line_usage_errors(logits, make, message):
    inputs = logits.case.make_inputs(logits.shapes, 0)
    bound = logits.bind({WEIGHT: inputs[WEIGHT]})
    with pytest.raises(UsageError, match=message) as e:
        bound.run(make(inputs["hidden_states"], inputs[WEIGHT]))
    assert len(str(e.value).splitlines()) == 1


def test_tensors_on_the_binarys_device_run_in_place_and_outputs_can_stay_there(logits):
    """The GPU user path's dispatch, on the CPU: a TVM tensor on the binary's device (here the CPU) is passed as it
    is, and ``outputs`` picks numpy, torch (through DLPack) or TVM tensors; all bitwise the numpy run."""
    inputs = logits.case.make_inputs(logits.shapes, 0)
    acts, weights = _split(logits, inputs)
    dev = logits._plan.device
    expected = logits.run(inputs)
    resident = {n: to_device(to_numpy(v), dev) for n, v in inputs.items()}
    assert _same(logits.run(resident), expected)  # weights and activations on the device, no host copy made
    bound = logits.bind({n: resident[n] for n in weights})
    as_torch = bound.run({"hidden_states": resident["hidden_states"]}, outputs="torch")
    as_tvm = bound.run(acts, outputs="tvm")
    assert all(isinstance(v, torch.Tensor) for v in as_torch.values())
    assert all(isinstance(v, tvm.runtime.Tensor) and v.device == dev for v in as_tvm.values())
    assert _same({k: to_numpy(v) for k, v in as_torch.items()}, expected)
    assert _same({k: v.numpy() for k, v in as_tvm.items()}, expected)
    with pytest.raises(UsageError, match="^outputs must be one of numpy, torch, tvm, got 'host'$"):
        bound.run(acts, outputs="host")


def test_a_tensor_on_another_device_is_refused_naming_both(logits):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    inputs = logits.case.make_inputs(logits.shapes, 0)
    acts, weights = _split(logits, inputs)
    elsewhere = inputs["hidden_states"].cuda()
    with pytest.raises(UsageError, match=r"^input 'hidden_states' is on cuda:0, but this binary runs on cpu: pass it "
                                         r"there$"):
        logits.bind(weights).run({"hidden_states": elsewhere})
    with pytest.raises(UsageError, match=rf"^input '{WEIGHT}' is on cuda:0"):
        logits.bind({WEIGHT: torch.empty_like(inputs[WEIGHT], device=elsewhere.device)})


def test_a_meta_tensor_given_to_run_is_a_usage_error(logits):
    """A meta tensor has no values, so no device would do: round four's one line, not "pass it there" (the
    refusal of a tensor on another device, which said so of meta after the merge of the GPU user path)."""
    inputs = logits.case.make_inputs(logits.shapes, 0)
    message = r"^a torch.strided tensor on the meta device \(8, 256\) has no values to run on: give dense tensors"
    with pytest.raises(UsageError, match=message):
        logits.run({**inputs, "hidden_states": inputs["hidden_states"].to("meta")})
    with pytest.raises(UsageError, match=message):
        logits.bind({WEIGHT: inputs[WEIGHT]}).run({"hidden_states": inputs["hidden_states"].to("meta")})


def test_make_inputs_are_the_seeded_inputs_check_draws_on_builds_and_artifacts(compiled, tmp_path):
    """``m.make_inputs(tokens, seed)`` is what ``check`` feeds the binary: the case's seeded draw at the build's
    sizes (any T), on a fresh build and on its loaded artifact alike; a T the binary cannot run is refused."""
    import mtp_tvm
    from mtp_tvm.artifact import export

    m = compiled("lm-head", "tir")
    a = mtp_tvm.load(export.export(m, tmp_path / "a").path)
    drawn = m.case.make_inputs(make_shapes("tiny", tokens=4), seed=7)
    for runnable in (m, a):
        inputs = runnable.make_inputs(tokens=4, seed=7)
        assert list(inputs) == list(m.input_specs)
        assert all(torch.equal(inputs[k], drawn[k]) for k in drawn)
        assert runnable.make_inputs()["hidden_out"].shape[:2] == (2, m.shapes.tokens // 2)  # the build's T
        with pytest.raises(UsageError, match="not a multiple"):
            runnable.make_inputs(tokens=3)
        with pytest.raises(UsageError, match="seed must be"):
            runnable.make_inputs(seed=-1)
    out = a.run(a.make_inputs(tokens=4, seed=7))
    assert out["logits"].shape == tuple(a.output_specs["logits"].shape)


@pytest.mark.slow
@pytest.mark.skipif(not (tvm.cuda(0).exist and torch.cuda.is_available()), reason="needs a CUDA GPU (TVM and torch)")
def test_cuda_tensors_run_in_place_and_outputs_stay_on_the_gpu():
    import mtp_tvm

    m = mtp_tvm.compile(case="logits", target="cuda", preset="tiny")
    inputs = m.make_inputs()
    expected = m.run(inputs)
    on_gpu = {n: v.cuda() for n, v in inputs.items()}
    bound = m.bind({n: on_gpu[n] for n in m.weight_specs})
    out = bound.run({n: on_gpu[n] for n in m.activation_specs}, outputs="torch")
    assert all(v.device == on_gpu[WEIGHT].device for v in out.values())
    assert _same({k: to_numpy(v) for k, v in out.items()}, expected)


def test_a_cuda_graph_binary_replays_only_the_weights_it_captured(logits):
    """A CUDA graph holds its weights' device pointers: new weights get a fresh VM (graphs captured anew); the
    same ones keep it. (The VM logic, on the CPU build, with the spec saying ``cuda_graph``.)"""
    m = dataclasses.replace(logits, spec=dataclasses.replace(logits.spec, cuda_graph=True))
    inputs = m.case.make_inputs(m.shapes, 0)
    acts, weights = _split(m, inputs)
    bound = m.bind(weights)
    bound.run(acts)
    first = m.vm
    assert _same(bound.run(acts), m.run(inputs)) and m.vm is first
    bound.rebind({WEIGHT: inputs[WEIGHT].clone()})
    bound.run(acts)
    assert m.vm is not first
    with pytest.raises(UsageError, match="built with cuda_graph for at most 16 token rows"):
        bound.run({"hidden_states": torch.cat([inputs["hidden_states"]] * 3)})
