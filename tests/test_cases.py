import pytest
import torch

from mtp_tvm.contract.cases import CASES, STAGES, Arg, ArgKind, Comparator, get_case
from mtp_tvm.contract.presets import make_shapes

SPEC_PROJECTION_ORDER = ["hidden_states", "prev_hidden_states", "enorm_w", "hnorm_w", "e_proj_w", "e_proj_w_scale",
                         "e_proj_smooth", "h_proj_w", "h_proj_w_scale", "h_proj_smooth"]


def test_inputs_are_in_spec_order():
    assert list(get_case("projection").input_specs(make_shapes("tiny"))) == SPEC_PROJECTION_ORDER
    assert list(get_case("tail").input_specs(make_shapes("tiny"))) == SPEC_PROJECTION_ORDER + ["lm_head_weight"]
    assert list(get_case("tail-norm").input_specs(make_shapes("tiny"))) == \
        SPEC_PROJECTION_ORDER + ["shared_head_norm_w", "lm_head_weight"]
    assert list(get_case("shared-head-logits").input_specs(make_shapes("tiny"))) == \
        ["hidden_states", "shared_head_norm_w", "lm_head_weight"]


def test_outputs_name_every_stage():
    s = make_shapes("tiny")
    assert list(get_case("tail-norm").output_specs(s)) == ["hidden_states_out", "normed_hidden", "candidate_logits"]
    assert get_case("logits").output_specs(s)["candidate_logits"].shape == ("T", 512)


def test_same_seed_gives_bitwise_identical_inputs_and_other_seeds_differ():
    s = make_shapes("tiny")
    for case in CASES.values():
        a, b, c = case.make_inputs(s, 7), case.make_inputs(s, 7), case.make_inputs(s, 8)
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert not torch.equal(a["lm_head_weight" if "lm_head_weight" in a else "hidden_states"],
                               c["lm_head_weight" if "lm_head_weight" in c else "hidden_states"])


def test_input_dtypes_and_shapes_follow_the_specs():
    s = make_shapes("tiny", tokens=5)
    case = get_case("tail-norm")
    inputs = case.make_inputs(s, 0)
    for name, spec in case.input_specs(s).items():
        assert tuple(inputs[name].shape) == spec.concrete(5), name
        assert str(inputs[name].dtype).removeprefix("torch.") == spec.dtype, name


def test_weight_pairs_come_from_one_draw():
    s = make_shapes("tiny")
    t = get_case("projection").make_inputs(s, 0)
    deq = t["e_proj_w"].float() * t["e_proj_w_scale"][:, None]
    assert deq.abs().max() < 1 / 16 + 1e-3  # rand/sqrt(256) < 1/16: the scale belongs to this weight
    assert t["e_proj_w"].abs().amax(dim=1).eq(127).all()


def test_stages_carry_their_facts():
    """Each stage names its frontend call in the argument vocabulary, and every output names known comparators."""
    from mtp_tvm.ir.model import FRONTENDS
    from mtp_tvm.verify.golden_check import OUTPUT_CHECKS

    assert set(OUTPUT_CHECKS) == set(Comparator)  # every comparator an output may name has its check
    s = make_shapes("tiny")
    for st in STAGES.values():
        for fe in FRONTENDS.values():
            assert callable(getattr(fe, st.frontend.method)), (st.name, fe.name)
        for a in st.frontend.args:
            assert a.kind != ArgKind.INPUT or a.name in {p.name for p in st.params}, (st.name, a.name)
            assert a.kind != ArgKind.SHAPE or hasattr(s, a.name), (st.name, a.name)
        assert all(isinstance(check, Comparator) for out in st.outputs for check in out.checks), st.name
        assert all(len(g) == 3 for g in st.gemms(s))


@pytest.mark.parametrize("kind, name", [(ArgKind.INPUT, None), (ArgKind.X, "hidden"), (ArgKind.SHAPE, ""),
                                        ("input", "w")])
def test_bad_frontend_arguments_are_refused(kind, name):
    with pytest.raises(ValueError, match="bad frontend argument"):
        Arg(kind, name)


def test_comparators_per_output():
    s = make_shapes("tiny")
    checks = {o.name: o.checks for case in CASES.values() for st in case.chain for o in st.outputs}
    assert checks == {"hidden_states_out": ("ratio_allclose",), "normed_hidden": ("ratio_allclose",),
                      "candidate_logits": ("ratio_allclose", "logits_contract"),
                      "logits": ("device_hidden_logits",), "sampled_ids": ("sampled_ids_argmax",)}
    assert [o.name for st in get_case("tail-lm-head").chain for o in st.outputs] == \
        list(get_case("tail-lm-head").output_specs(s))
