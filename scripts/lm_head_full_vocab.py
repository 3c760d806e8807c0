"""Full-vocabulary LM head benchmark: FLASH D=4096, VOCAB=129280 (TP 2 x 64640), owners 2, 8 rows each.

Golden-checks ``lm-head`` and ``tail-lm-head`` at the full vocabulary (``mtp_tvm.check``, seed 0) and times
the TVM module alone (VM ``time_evaluator``, inputs already on the device) against the torch reference
projection ``compute_lm_head_logits`` on the same inputs; then times the hand kernel with and without its
CPU schedule at VOCAB 8192 (the unscheduled one is too slow for the full vocabulary). Prints medians and
writes JSON with ``--json``.

    PYTHONPATH=. python scripts/lm_head_full_vocab.py [--frontend tir] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time

import numpy as np
import tvm
from tvm import relax

import mtp_tvm
from mtp_tvm.compiler.arrays import to_numpy
from mtp_tvm.compiler.tensors import to_device
from mtp_tvm.contract.golden import compute_lm_head_logits
from mtp_tvm.contract.presets import MAX_LOGIT_ROWS, PRESETS, tp_vocab_shard
from mtp_tvm.ir.tir_kernels import lm_head_tp
from mtp_tvm.passes.target import device_for

OWNERS, TP = 2, 2
TOKENS = OWNERS * MAX_LOGIT_ROWS  # every owner has 8 rows, so all 8 logit rows are used


def _median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _schedule_speedup(m, repeat: int, shard: int = 4096) -> dict:
    """The hand kernel unscheduled vs scheduled on one set of inputs (VOCAB = TP x ``shard``)."""
    s = m.shapes
    inputs = m.case.make_inputs(dataclasses.replace(s, vocab_shard=shard), 0)
    x = to_numpy(inputs["hidden_out"]).reshape(-1, s.hidden)
    dev = device_for(m.target)
    result = {"vocab": TP * shard}
    outputs = []
    for scheduled in (False, True):
        func = lm_head_tp(s.hidden, shard, TP, s.ranks, OWNERS, cpu_schedule=scheduled)
        lib = tvm.compile(tvm.IRModule({"lm_head_tp": func.with_attr("global_symbol", "lm_head_tp")}), m.target)
        args = [to_device(a, dev) for a in (x, to_numpy(inputs["lm_head_weight"]), to_numpy(
            inputs["logit_row_indices"]), np.zeros((OWNERS, MAX_LOGIT_ROWS, TP * shard), np.float32),
            np.zeros((OWNERS, MAX_LOGIT_ROWS), np.int32))]
        key = "scheduled_median_s" if scheduled else "unscheduled_median_s"
        result[key] = lib.jit().time_evaluator("lm_head_tp", dev, number=1, repeat=repeat)(*args).median
        outputs.append(args[3].numpy())
    result["bitwise_equal"] = bool(np.array_equal(*outputs))
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frontend", default="tir", choices=("tir", "relax"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None, metavar="FILE")
    args = p.parse_args(argv)
    shard = tp_vocab_shard(PRESETS["flash"], TP)
    sizes = dict(preset="flash", frontend=args.frontend, tokens=TOKENS, vocab_shard=shard, owners=OWNERS, tp=TP)
    record = {"preset": "flash", "frontend": args.frontend, "owners": OWNERS, "tp": TP, "vocab": TP * shard,
              "tokens": TOKENS, "repeat": args.repeat}

    for case in ("lm-head", "tail-lm-head"):
        t0 = time.perf_counter()
        r = mtp_tvm.check(case=case, log=lambda *_: None, **sizes)
        record[case] = {"passed": r.passed, "check_wall_s": time.perf_counter() - t0, "build_s": r.build_seconds,
                        "first_call_s": r.first_call_seconds, "run_s": r.run_seconds,
                        "logits": {k: r.outputs["logits"].checks[0].as_dict()[k]
                                   for k in ("mismatches", "numel", "max_abs_diff", "passed")}}
        print(f"{case:13s} check {'PASSED' if r.passed else 'FAILED'} in {record[case]['check_wall_s']:.1f} s "
              f"(build {r.build_seconds:.2f} s, first call {r.first_call_seconds:.2f} s, "
              f"run {r.run_seconds:.2f} s); logits "
              f"{r.outputs['logits'].checks[0].mismatches}/{r.outputs['logits'].checks[0].numel} outliers, "
              f"max |diff| {r.outputs['logits'].checks[0].max_abs_diff:.3g}", flush=True)

    m = mtp_tvm.compile(case="lm-head", **{k: v for k, v in sizes.items()})
    inputs = m.case.make_inputs(m.shapes, 0)
    dev = device_for(m.target)
    vm = relax.VirtualMachine(m.executable, dev)
    on_device = [to_device(to_numpy(inputs[name]), dev) for name in m.input_specs]
    tvm_s = vm.time_evaluator("main", dev, number=1, repeat=args.repeat)(*on_device).median
    torch_s = _median_seconds(lambda: compute_lm_head_logits(
        inputs["hidden_out"], inputs["lm_head_weight"], inputs["logit_row_indices"], TP), args.repeat)
    gflop = 2.0 * OWNERS * MAX_LOGIT_ROWS * TP * shard * m.shapes.hidden / 1e9
    weight_gb = inputs["lm_head_weight"][:TP].numel() * 2 / 1e9
    record["lm-head kernel"] = {"tvm_median_s": tvm_s, "torch_reference_median_s": torch_s, "gflop": gflop,
                                "tvm_gflops": gflop / tvm_s, "tvm_weight_gbps": weight_gb / tvm_s,
                                "torch_over_tvm": torch_s / tvm_s}
    print(f"lm-head module ({args.frontend}): median {tvm_s * 1e3:.0f} ms = {gflop / tvm_s:.1f} GFLOP/s, "
          f"{weight_gb / tvm_s:.2f} GB/s of weight; torch compute_lm_head_logits: median {torch_s * 1e3:.0f} ms "
          f"(torch / TVM = {torch_s / tvm_s:.2f}x); {args.repeat} runs each, {tvm.runtime.num_threads()} threads")
    if args.frontend == "tir":
        sched = record["schedule"] = _schedule_speedup(m, args.repeat)
        print(f"lm_head_tp kernel at VOCAB {sched['vocab']}: unscheduled {sched['unscheduled_median_s'] * 1e3:.0f} ms, "
              f"scheduled {sched['scheduled_median_s'] * 1e3:.0f} ms "
              f"({sched['unscheduled_median_s'] / sched['scheduled_median_s']:.1f}x), "
              f"logits bitwise equal: {sched['bitwise_equal']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    return 0 if record["lm-head"]["passed"] and record["tail-lm-head"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
