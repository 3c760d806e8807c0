"""The numeric bisect names exactly the injected culprit: a broken pass, and a broken schedule step."""

import importlib.util
import io
from pathlib import Path

import pytest
import tvm
from tvm import s_tir

import mtp_tvm
from helpers import INT32_ACCUMULATOR_PLUGIN
from mtp_tvm.ir import tir_kernels as kernels
from mtp_tvm.schedule.steps import fresh_copy
from mtp_tvm.tools.bisect.bisection import Probe, Verdict, _search, bisect_passes, bisect_schedule


def _example():
    spec = importlib.util.spec_from_file_location("int32_logits_accumulator", INT32_ACCUMULATOR_PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _searcher(verdicts):
    """probe(k) from a list of verdicts; records which prefixes were built."""
    probes = []

    def probe(k):
        p = Probe(k, f"#{k}", Verdict(verdicts[k]))
        probes.append(p)
        return p

    return probe, probes


@pytest.mark.parametrize("search", ["binary", "linear"])
def test_search_finds_the_first_failure_when_failure_is_monotone(search):
    probe, probes = _searcher(["pass"] * 6 + ["fail"] * 5)
    assert _search(10, probe, search, probes)[0] == 6


def test_binary_search_finds_a_transition_and_linear_the_first_when_not_monotone():
    verdicts = ["pass", "fail", "pass", "pass", "pass", "pass", "fail", "fail", "fail"]  # a later pass repairs #1
    probe, probes = _searcher(verdicts)
    k, _ = _search(8, probe, "binary", probes)
    assert verdicts[k - 1] == "pass" and verdicts[k] == "fail" and k == 6
    probe, probes = _searcher(verdicts)
    assert _search(8, probe, "linear", probes)[0] == 1


def test_binary_search_falls_back_to_linear_when_a_probe_cannot_build():
    verdicts = ["pass"] * 6 + ["error", "fail", "fail"]
    probe, probes = _searcher(verdicts)
    k, how = _search(8, probe, "binary", probes)
    assert k == 7 and "linear" in how
    assert [p.applied for p in probes] == [4, 6, 5, 7]  # 6 gave no verdict: linear on from lo = 4


@pytest.mark.slow  # over 10 s on 2 cores
def test_pass_bisect_names_exactly_the_broken_pass(tmp_path):
    # The Relax frontend's LM-head kernel is `matmul1`; put the broken pass between FuseOps and the TIR passes
    # so that there are optional candidates on both sides of it.
    broken = _example().int32_accumulator("matmul1", "matmul")
    progress = io.StringIO()
    r = bisect_passes(case="tail", preset="tiny", frontend="relax", extra_passes={"schedule": [broken]},
                      progress=progress, dump_passes=tmp_path)
    assert r.found and r.culprit["name"] == "Int32LogitsAccumulator" and r.culprit["phase"] == "schedule"
    # the probes do not dump; the first failing build is checked again with its dumps: one run folder, whose
    # culprit's diff the result names (the CLI prints it)
    assert [p.name for p in tmp_path.iterdir()] == [Path(r.dump_dir).name]
    assert Path(r.culprit_diff).is_file() and Path(r.culprit_diff).parent == Path(r.dump_dir)
    assert "Int32LogitsAccumulator" in Path(r.culprit_diff).name
    assert r.candidates >= 3 and len(r.probes) < r.candidates + 1  # binary: fewer builds than candidates
    good, bad = r.limits
    assert bad == r.culprit["index"] and good < bad
    assert "[bisect] [" in progress.getvalue() and "FAIL" in progress.getvalue()


def test_pass_bisect_reports_nothing_to_bisect_when_the_golden_passes():
    r = bisect_passes(case="logits", preset="tiny", progress=io.StringIO())
    assert not r.found and "nothing to bisect" in r.message


def _schedule_with_one_wrong_step():
    """A hand schedule of the LM head whose 5th transforming step (an INT32 accumulator) breaks numerics."""
    sch = s_tir.Schedule(tvm.IRModule({"lm_head_logits": fresh_copy(kernels.lm_head_logits(256, 512))}))
    block = sch.get_sblock("logits", func_name="lm_head_logits")
    t, v, k = sch.get_loops(block)
    vo, vi = sch.split(v, factors=[None, 16])
    kc, ki = sch.split(k, factors=[None, 128])
    sch.reorder(t, vo, kc, ki, vi)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, vo)
    sch.unsafe_set_dtype(block, 0, "int32")  # the wrong step
    sch.vectorize(vi)
    sch.decompose_reduction(block, kc)
    return sch


@pytest.mark.slow  # a build per probe
@pytest.mark.parametrize("as_text", [False, True])
def test_schedule_bisect_names_exactly_the_wrong_step(as_text):
    sch = _schedule_with_one_wrong_step()
    trace = str(sch.trace) if as_text else sch.trace  # str(sch.trace) is how schedules are recorded
    r = bisect_schedule("lm_head_logits", trace, case="logits", preset="tiny", progress=io.StringIO())
    assert r.found, r.message
    assert r.culprit["kind"] == "UnsafeSetDType" and "unsafe_set_dtype" in r.culprit["python"]
    assert r.culprit["step"] == 8  # get_sblock, get_loops, split, split, reorder, cache_write, reverse_compute_at, *
    assert r.candidates == 8  # the getters change nothing and are not candidates


def test_schedule_bisect_needs_a_function_that_is_scheduled():
    with pytest.raises(mtp_tvm.UsageError, match="no PrimFunc named .nope."):
        bisect_schedule("nope", _schedule_with_one_wrong_step().trace, case="logits", preset="tiny",
                        progress=io.StringIO())


def test_a_trace_that_does_not_apply_to_the_entering_kernel_is_a_one_line_error(compiled):
    """A GEMM's recorded trace starts from its small-T row variants (made before the trace), so it does not
    replay on the kernel as it enters the schedule phase: said in one line, not a ScheduleError's pages."""
    from mtp_tvm.support.errors import UsageError
    from mtp_tvm.tools.bisect.bisection import bisect_schedule

    trace = compiled("logits", "tir").schedule_traces["lm_head_logits"]
    with pytest.raises(UsageError, match=r"does not apply to lm_head_logits as it enters the schedule phase: .*"
                                         r"logits_rows1") as e:
        bisect_schedule("lm_head_logits", trace, case="logits", preset="tiny")
    assert "\n" not in str(e.value)
