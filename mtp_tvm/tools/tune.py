"""``mtp-tvm tune``: schedule search with TVM's MetaSchedule; records persist under ``schedule.tuned.tuned_root()``
(``schedules/tuned/<target>/<case>/`` in a checkout), where ``--schedule tuned`` reads them back.

What this module adds to MetaSchedule, and why:

- ``case_kernels``: the case's PrimFuncs after legalisation and fusion, specialised to a static token count
  (MetaSchedule tunes and looks records up on static shapes only; ``specialize.py``).
- ``load_tensor_intrinsics``: ``TuneContext`` imports every tensor intrinsic TVM ships, and the CUDA ones alone
  take ~30-60 s on this machine; we import the package shell plus the target's own intrinsics (x86 or CUDA).
- ``fast_build``: MetaSchedule's default builder re-does that import in each fresh worker, so every candidate
  timed out at 30 s (cookbook §5.1); ours builds without it.
- ``ProgressCallback``: trials done and best latency per kernel, printed after each measured batch.
- RPC: ``rpc=("host:port", key)`` measures on servers registered with a TVM RPC tracker (``RPCRunner``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import socket
import struct
import sys
import time
import types
from pathlib import Path
from typing import Callable

import tvm
from tvm import tirx
from tvm.target import Target

from ..passes.target import is_gpu
from ..schedule.tuned import tuned_dir, workload
from ..support.errors import UsageError

_INTRINSICS = "tvm.s_tir.tensor_intrin"


_MS_LOGGER = "tvm.s_tir.meta_schedule"  # its console handler prints at this logger's level


def load_tensor_intrinsics(target: Target) -> None:
    """Register only ``target``'s tensor intrinsics, and make ``import tvm.s_tir.tensor_intrin`` a no-op."""
    if _INTRINSICS not in sys.modules:
        spec = importlib.util.find_spec(_INTRINSICS)
        shell = types.ModuleType(_INTRINSICS)
        shell.__path__ = list(spec.submodule_search_locations)
        shell.__package__ = _INTRINSICS
        sys.modules[_INTRINSICS] = shell
    importlib.import_module(f"{_INTRINSICS}.{'cuda' if is_gpu(target) else 'x86'}")


def fast_build(mod: tvm.IRModule, target: Target, _params):
    """MetaSchedule builder function: a plain ``tvm.compile`` (no tensor-intrinsic import in the worker)."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.compile(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target).mod


def case_kernels(case: str, target: Target, preset: str, frontend: str, tokens: int | None,
                 vocab_shard: int | None) -> tvm.IRModule:
    """The case's kernels as an IRModule of static PrimFuncs, named as in the built module."""
    from ..ir.model import build_relax_module
    from ..passes.pipeline import fuse_passes, legalize_passes
    from ..schedule.specialize import specialize_to_call_sites
    from ..spec.cases import get_case
    from ..spec.presets import make_shapes

    shapes = make_shapes(preset, tokens, vocab_shard)
    mod = build_relax_module(get_case(case), shapes, frontend, static_tokens=True)
    with target:
        mod = tvm.transform.Sequential(legalize_passes(target) + fuse_passes(target))(mod)
    mod = specialize_to_call_sites(mod)
    return tvm.IRModule({gv: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)})


@dataclasses.dataclass
class KernelProgress:
    trials: int = 0
    best_ms: float = float("inf")


class ProgressCallback:
    """A ``PyMeasureCallback`` body: after every measured batch, report trials and best latency per kernel."""

    def __init__(self, total: int, log: Callable[[str], None]):
        self.total, self.log = total, log
        self.kernels: dict[str, KernelProgress] = {}
        self.start = time.perf_counter()

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        if not runner_results:  # a task whose space is exhausted still gets scheduled: nothing new to say
            return
        name = task_scheduler.tasks_[task_id].ctx.task_name
        prog = self.kernels.setdefault(name, KernelProgress())
        for res in runner_results:
            prog.trials += 1
            if res.run_secs:
                prog.best_ms = min(prog.best_ms, 1e3 * sum(float(s) for s in res.run_secs) / len(res.run_secs))
        done = sum(k.trials for k in self.kernels.values())
        self.log(f"[tune] {done}/{self.total} trials, {time.perf_counter() - self.start:.0f}s | {name}: "
                 f"{prog.trials} trials, best {prog.best_ms:.4g} ms")


@dataclasses.dataclass
class TuneResult:
    work_dir: Path
    trials: int
    seconds: float
    best_ms: dict[str, float]  # kernel -> best measured latency over all records in the database


TRACKER_TIMEOUT_S = 10  # connecting to the tracker and hearing its summary; MetaSchedule would retry forever


def require_tracker(host: str, port: int, key: str, timeout: float = TRACKER_TIMEOUT_S) -> None:
    """Before tuning: the tracker answers within ``timeout`` seconds and has a server for ``key``. Otherwise
    MetaSchedule retries every 5 s forever (nothing listening) or records every trial as failed (``best inf``)."""
    from tvm.rpc import base

    where = f"RPC tracker {host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            if struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
                raise UsageError(f"{host}:{port} is not a TVM RPC tracker (it answered, but not the tracker magic)")
            base.sendjson(sock, [base.TrackerCode.SUMMARY])
            reply = base.recvjson(sock)
    except UsageError:
        raise
    except (OSError, ValueError, struct.error) as e:  # refused, unreachable, unknown host, timed out, garbage
        raise UsageError(f"cannot reach the {where} within {timeout:g} s: {getattr(e, 'strerror', None) or e}"
                         ) from None
    summary = reply[1] if isinstance(reply, list) and len(reply) == 2 and isinstance(reply[1], dict) else {}
    if key not in summary.get("queue_info", {}):
        raise UsageError(f"the {where} has no server registered with key {key!r} (registered: "
                         f"{', '.join(sorted(summary.get('queue_info', {}))) or 'none'})")


def _runner(rpc: tuple[str, str] | None):
    from tvm.s_tir import meta_schedule as ms

    evaluator = ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=0, enable_cpu_cache_flush=False)
    if rpc is None:
        return ms.runner.LocalRunner(evaluator_config=evaluator)
    host, _, port = rpc[0].rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--rpc-tracker must be HOST:PORT, got {rpc[0]!r}")
    require_tracker(host, int(port), rpc[1])
    return ms.runner.RPCRunner(ms.runner.RPCConfig(tracker_host=host, tracker_port=int(port), tracker_key=rpc[1],
                                                   session_timeout_sec=120), evaluator)


def tune(case: str = "logits", target="llvm", preset: str = "tiny", frontend: str = "tir", trials: int = 16,
         tokens: int | None = None, vocab_shard: int | None = None, work_dir: str | os.PathLike | None = None,
         seed: int = 0, rpc: tuple[str, str] | None = None, log: Callable[[str], None] = print) -> TuneResult:
    """Tune ``case``'s kernels for ``trials`` trials in all; warm-starts from the database in ``work_dir``."""
    from tvm.s_tir import meta_schedule as ms

    from ..passes.target import resolve_target

    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise UsageError(f"trials must be a positive integer, got {trials!r}")
    tgt = resolve_target(target)
    if tgt.kind.name == "llvm" and "num-cores" not in tgt.export():
        raise UsageError("MetaSchedule needs the llvm target's num-cores; use --target llvm or set it in the JSON")
    runner = _runner(rpc)  # an unreachable tracker fails here, in seconds, before anything is built
    out = Path(work_dir) if work_dir is not None else tuned_dir(tgt, case)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot use {out} as the tuning work dir: {e.strerror}") from None
    kernels = case_kernels(case, tgt, preset, frontend, tokens, vocab_shard)
    load_tensor_intrinsics(tgt)
    logging.getLogger(_MS_LOGGER).setLevel(logging.WARNING)  # full logs still go to <work_dir>/logs
    progress = ProgressCallback(trials, log)
    callbacks = [*ms.measure_callback.MeasureCallback.create("default"), _py_callback(progress)]
    t0 = time.perf_counter()
    database = ms.tune_tir(kernels, tgt, str(out), max_trials_global=trials, num_trials_per_iter=min(trials, 16),
                           builder=ms.builder.LocalBuilder(f_build=fast_build, timeout_sec=120),
                           runner=runner, database=ms.database.JSONDatabase(work_dir=str(out)),
                           measure_callbacks=callbacks, seed=seed, num_tuning_cores=os.cpu_count() or 1)
    seconds = time.perf_counter() - t0
    best = {}
    for gv, func in kernels.functions_items():
        rec = database.query_tuning_record(workload(func), tgt, "main")
        if rec is not None and rec.run_secs:
            best[gv.name_hint] = 1e3 * min(float(s) for s in rec.run_secs)
    return TuneResult(out, trials, seconds, best)


def _py_callback(progress: ProgressCallback):
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class _Progress(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            progress.apply(task_scheduler, task_id, measure_candidates, builder_results, runner_results)

    return _Progress()
