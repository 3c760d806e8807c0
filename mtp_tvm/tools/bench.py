"""``bench``: time a case's TVM build against the libraries a user would call instead, interleaved in one run,
next to this machine's measured FMA peak and memory bandwidth (``tools/roofline.py``).

Contenders (each computes the whole case, stage after stage, from the same seeded inputs; a stage's peers are
its ``Stage.peers``):

- ``tvm``: the compiled module's ``main`` (``time_evaluator``), weights already packed (``main_transform_params``
  runs once, at load, outside the timing);
- ``torch_bf16``: the matching torch ops in BF16 (``F.linear`` for the GEMMs, ``F.rms_norm``);
- ``torch_fp32`` / ``numpy_fp32``: the same in FP32 (weights converted once, outside the timing);
- ``torch_golden``: the golden implementation (``mtp_tvm.golden``), what the checks compare against.

Rounds interleave the contenders (round r times every contender once), so drift in clock speed or load hits
all of them alike; medians over rounds are reported.

FLOP/s of a contender counts the useful ``2*T*K*N`` of its GEMMs (``Stage.gemms``); the roofline uses the
FLOPs TVM executes (rows padded to 16) and the bytes it must read (weights once, activations, outputs).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import time
from typing import Callable

import torch

from ..compiler.driver import CompiledCase, compile
from ..compiler.options import BuildSpec, split_options
from ..compiler.tensors import NUMPY_DTYPES, to_numpy
from ..passes.target import device_for, target_json
from ..spec.cases import TOKENS, Case, Stage
from ..spec.presets import Shapes
from ..support.atomic_file import write_user_file
from ..support.errors import MtpError, UsageError
from ..support.text_table import text_table
from .roofline import measure_probes

BENCH_CASES = ("logits", "projection", "norm", "tail")  # every stage of each has ``peers``


# ---- FLOPs and bytes -------------------------------------------------------------------------------------

def flops(case: Case, s: Shapes, rows: int) -> float:
    """``2*M*K*N`` over every GEMM of the case's stages (``Stage.gemms``), token rows counted as ``rows``."""
    return float(sum(2 * (rows if m == TOKENS else m) * k * n for st in case.chain for m, k, n in st.gemms(s)))


def bytes_moved(compiled: CompiledCase) -> float:
    """Every input read once and every output written once: the least traffic any implementation needs."""
    t = compiled.shapes.tokens
    specs = (*compiled.input_specs.values(), *compiled.output_specs.values())
    return float(sum(math.prod(sp.concrete(t)) * NUMPY_DTYPES[sp.dtype].itemsize for sp in specs))


# ---- contenders ------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Peer:
    """A non-TVM contender: ``stage(st, inputs, shapes) -> f(x) -> y`` (weights prepared there, once, outside
    the timing) and ``activation(hidden)``, the case's hidden input as this contender reads it."""

    stage: Callable[[Stage, dict, Shapes], Callable]
    activation: Callable[[torch.Tensor], object]


def _torch_peer(dtype: torch.dtype) -> _Peer:
    return _Peer(lambda st, t, s: st.peers.torch(t, s, dtype), lambda x: x.to(dtype))


def _golden_peer(st: Stage, t: dict, s: Shapes) -> Callable:
    return lambda x: st.golden(x, t, s)[0]


PEERS = {"torch_bf16": _torch_peer(torch.bfloat16), "torch_fp32": _torch_peer(torch.float32),
         "numpy_fp32": _Peer(lambda st, t, s: st.peers.numpy(t, s), lambda x: x.float().numpy()),
         "torch_golden": _Peer(_golden_peer, lambda x: x)}
CONTENDERS = ("tvm", *PEERS)


def peer_runner(case: Case, peer: str, inputs: dict[str, torch.Tensor], s: Shapes) -> Callable[[], object]:
    """The whole case (its stage chain, each stage's ``Stage.peers``) for one peer, as a zero-argument callable."""
    how = PEERS[peer]
    stages = [how.stage(st, inputs, s) for st in case.chain]
    opening = case.chain[0].hidden_input
    x0 = None if opening is None else how.activation(inputs[opening.name])

    def run():
        x = x0
        for f in stages:
            x = f(x)
        return x

    return run


# ---- timing ----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class BenchResult:
    case: str
    target: dict
    preset: str
    schedule: str
    shapes: dict
    median_ms: dict[str, float | None]  # None: the contender could not run here (see ``unavailable``)
    samples_ms: dict[str, list[float]]
    unavailable: dict[str, str]
    gflops: dict[str, float]
    gbs: dict[str, float]
    speedup: dict[str, float]  # peer median / tvm median
    peak_gflops: float
    bandwidth_gbs: float
    roofline_gflops: float
    roofline_fraction: float
    peak_fraction: float
    build_seconds: float
    probes: str
    numpy_blas: list[dict]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def write_json(self, path: str | os.PathLike) -> None:
        write_user_file(path, lambda p: p.write_text(json.dumps(self.as_dict(), indent=1)))

    def table(self) -> str:
        rows = [("contender", "median ms", "GFLOP/s", "GB/s", "tvm speed-up")]
        for name, ms in self.median_ms.items():
            if ms is None:
                rows.append((name, "-", "-", "-", self.unavailable[name]))
                continue
            rows.append((name if name != "tvm" else f"tvm:{self.schedule}", f"{ms:.3f}", f"{self.gflops[name]:.1f}",
                         f"{self.gbs[name]:.1f}", "-" if name == "tvm" else f"{self.speedup[name]:.2f}x"))
        lines = text_table(rows)
        s = self.shapes
        head = (f"case={self.case} target={self.target['kind']} preset={self.preset} schedule={self.schedule} "
                f"T={s['tokens']} (padded {s['tokens_padded']}) D={s['hidden']} V={s['vocab_shard']} "
                f"build={self.build_seconds:.2f}s")
        tail = (f"peak {self.peak_gflops:.1f} GFLOP/s, bandwidth {self.bandwidth_gbs:.1f} GB/s (measured); "
                f"tvm at {100 * self.peak_fraction:.0f}% of peak and {100 * self.roofline_fraction:.0f}% of the "
                f"roofline ({self.roofline_gflops:.1f} GFLOP/s) on the {s['tokens']} useful rows (the peak is the FP32 "
                "FMA probe's: dot-product instructions, 2 products a lane, can pass it)")
        return "\n".join([head, *lines, tail])

    def plot(self, path: str | os.PathLike) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = [n for n, ms in self.median_ms.items() if ms is not None]
        fig, ax = plt.subplots(figsize=(7, 3.5))
        bars = ax.bar(names, [self.median_ms[n] for n in names],
                      color=["tab:green" if n == "tvm" else "tab:gray" for n in names])
        ax.bar_label(bars, labels=[f"{self.median_ms[n]:.2f} ms\n{self.gflops[n]:.0f} GF/s" for n in names],
                     fontsize=8)
        ax.set_ylabel("median ms (lower is better)")
        s = self.shapes
        ax.set_title(f"{self.case} {self.preset} T={s['tokens']} V={s['vocab_shard']} on {self.target['kind']} "
                     f"(schedule {self.schedule})", fontsize=9)
        ax.margins(y=0.25)
        fig.tight_layout()
        write_user_file(path, lambda p: fig.savefig(p, format="png", dpi=120))
        plt.close(fig)


def peer_unavailable(peer: str, gpu: bool) -> str | None:
    """Why ``peer`` cannot run against a GPU build here, or None."""
    if gpu and peer == "numpy_fp32":
        return "numpy runs on the host CPU, not the GPU"
    if gpu and peer != "tvm" and not torch.cuda.is_available():
        return f"this torch ({torch.__version__}) has no CUDA"
    return None


def _time_python(fn: Callable, number: int, sync: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    sync()
    return (time.perf_counter() - t0) / number


def numpy_blas_info() -> list[dict]:
    """Which BLAS kernels numpy runs (threadpoolctl), so the numpy figure can be read correctly."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [{k: str(v) for k, v in i.items() if k in ("internal_api", "version", "architecture", "num_threads")}
            for i in threadpool_info()]


def bench(spec: BuildSpec | None = None, *, rounds: int = 7, number: int | None = None,
          contenders: tuple[str, ...] = CONTENDERS, seed: int = 0, compare_schedules: tuple[str, ...] = (),
          **options) -> BenchResult:
    """Build ``spec`` (default: the ``logits`` case; keywords: the fields of ``BuildSpec`` and ``DebugOptions``,
    as for ``compile``), then time every contender ``rounds`` times, interleaved; see the module docstring.

    ``compare_schedules`` adds one TVM contender ``tvm:<name>`` per other schedule (``none``, ``tuned``,
    ``dlight`` ...), timed in the same rounds; one that cannot be built here is listed as unavailable, with why.
    """
    spec, debug = split_options(spec or BuildSpec(case="logits"), None, options, "bench")
    if spec.case not in BENCH_CASES:
        raise UsageError(f"bench case must be one of {', '.join(BENCH_CASES)}, got {spec.case!r}")
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown or "tvm" not in contenders:
        raise UsageError(f"contenders must include tvm and come from {', '.join(CONTENDERS)}; got {unknown}")
    if rounds < 1:
        raise UsageError(f"rounds must be >= 1, got {rounds}")
    schedule = spec.schedule
    compiled = compile(spec, debug)
    c, s, tgt = compiled.case, compiled.shapes, compiled.target
    gpu = tgt.kind.name == "cuda"
    torch.set_num_threads(int(tgt.attrs.get("num-cores", os.cpu_count() or 1)) if not gpu else torch.get_num_threads())
    inputs = c.make_inputs(s, seed)
    dev = device_for(tgt)
    args = compiled.device_args([to_numpy(inputs[n]) for n in compiled.input_specs])
    vm = compiled.vm
    tvm_once = lambda: vm.time_evaluator("main", dev, number=1, repeat=1)(*args).mean  # noqa: E731
    first = tvm_once()  # warm up, and size the batch of calls per sample to about 50 ms
    n = number or max(1, min(200, int(0.05 / max(first, 1e-6))))
    tdev = "cuda" if gpu and torch.cuda.is_available() else "cpu"
    peer_inputs = {k: v.to(tdev) for k, v in inputs.items()}
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    unavailable = {p: why for p in contenders if (why := peer_unavailable(p, gpu))}
    runners = {p: peer_runner(c, p, peer_inputs, s) for p in contenders if p != "tvm" and p not in unavailable}
    variants = {"tvm": (vm, args)}
    for other in dict.fromkeys(compare_schedules):
        if other == schedule:
            continue
        try:
            alt = compile(dataclasses.replace(spec, schedule=other))
        except MtpError as e:  # e.g. no tuning database yet, or dlight on a CPU target
            unavailable[f"tvm:{other}"] = str(e)
            continue
        variants[f"tvm:{other}"] = (alt.vm, alt.device_args([to_numpy(inputs[k]) for k in alt.input_specs]))
    for r in runners.values():
        r()
    sync()
    samples: dict[str, list[float]] = {p: [] for p in (*variants, *runners)}
    for _ in range(rounds):
        for p, (v, a) in variants.items():
            samples[p].append(v.time_evaluator("main", dev, number=n, repeat=1)(*a).mean * 1e3)
        for p, r in runners.items():
            samples[p].append(_time_python(r, n, sync) * 1e3)
    probes = measure_probes(tgt)
    median = {p: statistics.median(v) for p, v in samples.items()}
    timed = dict(median)
    median.update(dict.fromkeys(unavailable))  # every contender is a key; None where it could not run
    useful = flops(c, s, s.tokens)
    moved = bytes_moved(compiled)
    tvm_s = median["tvm"] / 1e3
    # attainable = min(peak, intensity x bandwidth) on the useful rows only (the padded ones are not work a
    # user asked for); a kernel without GEMMs (the norm) is judged on bandwidth
    roofline = min(probes.peak_gflops, useful / moved * probes.bandwidth_gbs)
    fraction = (useful / tvm_s / 1e9) / roofline if useful else (moved / tvm_s / 1e9) / probes.bandwidth_gbs
    return BenchResult(
        case=c.name, target=target_json(tgt), preset=s.preset.name, schedule=schedule, shapes=s.as_dict(),
        median_ms=median, samples_ms=samples,
        unavailable=unavailable,
        gflops={p: useful / (ms / 1e3) / 1e9 for p, ms in timed.items()},
        gbs={p: moved / (ms / 1e3) / 1e9 for p, ms in timed.items()},
        speedup={p: ms / median["tvm"] for p, ms in timed.items()},
        peak_gflops=probes.peak_gflops, bandwidth_gbs=probes.bandwidth_gbs, roofline_gflops=roofline,
        roofline_fraction=fraction,
        peak_fraction=(useful / tvm_s / 1e9) / probes.peak_gflops,
        build_seconds=compiled.build_seconds, probes=probes.how, numpy_blas=numpy_blas_info())
