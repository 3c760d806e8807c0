"""What a CPU target offers the schedules comes from its mcpu/mattr, not from the machine that builds it."""

import pytest

from mtp_tvm import UsageError
from mtp_tvm.passes.target import cpu_isa, resolve_target


@pytest.mark.parametrize("mcpu, name, lanes, registers, bf16, int8, zen", [
    ("haswell", "avx2", 8, 16, False, "pmaddwd", 0),
    ("znver3", "avx2", 8, 16, False, "pmaddwd", 3),
    ("alderlake", "avx2", 8, 16, False, "vnni", 0),        # AVX-VNNI, no AVX-512
    ("skylake-avx512", "avx512", 16, 32, False, "pmaddwd", 0),
    ("znver4", "avx512", 16, 32, True, "vnni", 4),
    ("znver5", "avx512", 16, 32, True, "vnni", 5),
    ("sapphirerapids", "avx512", 16, 32, True, "vnni", 0),
])
def test_isa_of_x86_cpus(mcpu, name, lanes, registers, bf16, int8, zen):
    isa = cpu_isa(resolve_target({"kind": "llvm", "mcpu": mcpu}))
    assert (isa.name, isa.fp32_lanes, isa.vector_registers, isa.bf16_dot, isa.int8_dot, isa.zen) == \
        (name, lanes, registers, bf16, int8, zen)


@pytest.mark.skipif(not __import__("platform").machine() == "x86_64", reason="x86 host flags")
def test_the_host_target_adds_the_dot_products_a_vm_reports_beyond_its_cpu_name():
    """A Sapphire Rapids guest whose CPUID model LLVM maps to rocketlake (no AVX512-BF16) still reports the
    flag: the host target gets ``+avx512bf16``, so the logits take ``vdpbf16ps``, not the FMA path."""
    from mtp_tvm.passes.target import host_dot_features

    flags = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni avx_vnni\n"
    assert host_dot_features("rocketlake", flags) == ["+avx512bf16", "+avxvnni"]  # rocketlake has avx512vnni
    assert host_dot_features("sapphirerapids", flags) == []
    assert host_dot_features("rocketlake", "flags\t\t: fpu avx2 avx512f\n") == []
    isa = cpu_isa(resolve_target({"kind": "llvm", "mcpu": "rocketlake",
                                  "mattr": host_dot_features("rocketlake", flags)}))
    assert isa.bf16_dot and isa.int8_dot == "vnni"


def test_a_target_with_mattr_round_trips_through_its_json():
    """Reproducers and manifests store ``target_json``; an ``mattr`` list (the host's extra dot products) was
    written as the string of a tuple, which no build could read back."""
    import json

    from mtp_tvm.passes.target import target_json

    spec = {"kind": "llvm", "mcpu": "rocketlake", "mattr": ["+avx512bf16", "+avxvnni"], "num-cores": 2}
    stored = json.loads(json.dumps(target_json(resolve_target(spec))))
    assert stored["mattr"] == ["+avx512bf16", "+avxvnni"]
    assert cpu_isa(resolve_target(stored)).bf16_dot


def test_isa_of_the_aarch64_cross_target():
    isa = cpu_isa(resolve_target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}))
    assert (isa.name, isa.fp32_lanes, isa.int8_dot, isa.bf16_dot) == ("neon", 4, None, False)
    bf16_arm = cpu_isa(resolve_target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-v1"}))
    assert not bf16_arm.bf16_dot  # Arm BF16 exists, but the dot kernels here are x86 intrinsics


def test_an_unknown_mcpu_is_refused_with_suggestions():
    with pytest.raises(UsageError, match=r"unknown mcpu 'znver9'.*did you mean .*znver4"):
        resolve_target({"kind": "llvm", "mcpu": "znver9"})


def test_a_classic_target_string_is_refused_with_its_json_form_which_resolves():
    """TVM 0.27 takes targets as JSON; the old string form gets a message showing the JSON to use instead."""
    import json
    import re

    import pytest

    from mtp_tvm.passes.target import resolve_target
    from mtp_tvm.support.errors import UsageError

    with pytest.raises(UsageError) as e:
        resolve_target("llvm -mcpu=haswell -mattr=+avx2,+fma -num-cores=4")
    shown = re.search(r"here '(.*)'$", str(e.value)).group(1)
    assert json.loads(shown) == {"kind": "llvm", "mcpu": "haswell", "mattr": ["+avx2", "+fma"], "num-cores": 4}
    assert resolve_target(shown).attrs["mcpu"] == "haswell"
    with pytest.raises(UsageError, match=r"object$"):  # not of that form: nothing to show
        resolve_target("haswell")
