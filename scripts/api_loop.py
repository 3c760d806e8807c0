"""What the Python API costs in a decode loop, against its kernel (docs/benchmarks.md, issue 21).

    python scripts/api_loop.py [--case logits] [--preset flash] [--vocab-shard 16160] [--rounds 5] [--calls 20]

The "fast path" of docs/guides/python-api.md timed in one process: the kernel alone (``time_evaluator`` on
``main`` with the bound weights' device arguments), ``m.run(inputs)`` (every input on every call: the held weights are recognised, not
hashed or packed again) and ``bound.run(activations)``. Rounds alternate the three; medians of the per-round
medians, each call timed by ``perf_counter``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import tvm

import mtp_tvm


def median_ms(call, calls: int) -> float:
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="logits")
    ap.add_argument("--preset", default="flash")
    ap.add_argument("--vocab-shard", type=int, default=16160)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    m = mtp_tvm.compile(case=args.case, preset=args.preset, vocab_shard=args.vocab_shard)
    inputs = m.case.make_inputs(m.shapes, seed=0)
    bound = m.bind({name: inputs[name] for name in m.weight_specs})
    activations = {name: inputs[name] for name in m.activation_specs}
    device_args = bound.device_args(activations)
    m.run(inputs)  # warm: the first run packs
    bound.run(activations)
    kernel = m.vm.time_evaluator("main", tvm.cpu(), number=args.calls, repeat=1)
    rounds = [(kernel(*device_args).mean * 1e3, median_ms(lambda: m.run(inputs), args.calls),
               median_ms(lambda: bound.run(activations), args.calls)) for _ in range(args.rounds)]
    k, run, fast = (statistics.median(column) for column in zip(*rounds))
    print(f"{args.case} {args.preset} T={m.shapes.tokens}, load {os.getloadavg()[0]:.2f}: kernel {k:.2f} ms; "
          f"m.run {run:.2f} ms ({run / k:.2f}x); bound.run {fast:.2f} ms ({fast / k:.2f}x)")


if __name__ == "__main__":
    main()
