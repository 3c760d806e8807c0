"""The race of a bench, a case's (``bench.py``) or a module file's (``user_model.py``): TVM and every peer in a
worker process of its own (``worker.py``), started, set up one after the other, checked against the golden
(``PEER_CHECK``, BF16-level) before they are timed side by side in rounds, the load watched around them; a peer
whose worker fails is dropped with why."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from ...support.load_average import LoadWatch
from ...support.timing import phase
from ...verify.comparators import ratio_allclose
from ...verify.tolerances import RatioTolerance
from .options import shared_compile_cache
from .peer_isa import wider
from .tvm_worker import TVM
from .worker import Ready, Worker, WorkerFailed

# BF16-level: peers round differently
PEER_CHECK = ratio_allclose(RatioTolerance(atol=5e-2, rtol=5e-2, max_error_ratio=0.05))
TIME_LIMIT_S = 600.0  # one timed batch; a worker silent this long is hung


def golden_mismatch(actual, expected, where: str) -> str | None:
    """Why an output is not the golden's (``PEER_CHECK``), or None; ``where``: the size it ran at ("at T=2")."""
    c = PEER_CHECK(actual, expected)
    if c.passed:
        return None
    return (f"wrong result {where}: {c.detail or f'{c.mismatches} of {c.numel} values'} off the golden "
            f"beyond {c.comparator}, max abs diff {c.max_abs_diff:.3g}")


class Race:
    """The workers of one bench: started, opened (imports done) and set up one after the other, their outputs
    checked against the golden, then timed in rounds. A peer whose worker fails is dropped, unavailable at every
    T from then on (its samples with it); the TVM worker's failure ends the bench."""

    def __init__(self, folder: Path, threads: int, sweep: tuple[int, ...], running: contextlib.ExitStack,
                 log: Callable[[str], None], where: Callable[[int], str] = "at T={}".format):
        self.folder, self.threads, self.sweep, self.running, self.log = folder, threads, sweep, running, log
        self.where = where  # a size of the sweep as a message names it
        self.workers: dict[str, Worker] = {}
        self.pids: dict[str, int] = {}
        self.ready: dict[str, Ready] = {}
        self.unavailable: dict[int, dict[str, str]] = {t: {} for t in sweep}
        self.samples: dict[int, dict[str, list[float]]] = {t: {} for t in sweep}

    def start(self, name: str, job, env: dict[str, str] | None = None) -> None:
        self.workers[name] = Worker(name, job, self.threads, self.folder, env)
        self.running.callback(self.workers[name].close)

    @contextlib.contextmanager
    def _dropping(self, name: str, when: str = ""):
        try:
            yield
        except WorkerFailed as e:
            if name == TVM:
                raise
            self.workers.pop(name)
            for t in self.sweep:
                self.unavailable[t][name] = e.summary + when
                self.samples[t].pop(name, None)

    def set_up(self) -> None:
        """Every worker opened (so no import runs during another's setup), then set up in turn."""
        for name, w in list(self.workers.items()):
            with self._dropping(name):
                self.pids[name] = w.opened()
        self.log(f"bench: {len(self.pids)} workers started ({self.threads} threads each)")
        for name, w in list(self.workers.items()):
            t0 = time.perf_counter()
            with self._dropping(name):
                self.ready[name] = w.call("setup")
                self.log(f"bench: {name} ready in {time.perf_counter() - t0:.1f} s")
        for r in self.ready.values():
            for name, per_t in r.unavailable.items():
                for t, why in per_t.items():
                    self.unavailable[t][name] = why

    def check(self, golden: dict[int, object]) -> None:
        """A build or peer whose output at T is not the golden's is not timed at T."""
        for r in self.ready.values():
            for name, per_t in r.outputs.items():
                for t, out in per_t.items():
                    why = golden_mismatch(out, golden[t], self.where(t))
                    if why:
                        self.unavailable[t][name] = why

    def refuse_wider_peers(self, held_to: str | None) -> None:
        """A peer held to the build's ISA ``held_to`` that ran wider code (a library that ignored its setting) is
        not timed: its figure would be another ISA's."""
        if held_to is None:
            return
        for name, ready in self.ready.items():
            ran = ready.details.get("isa")
            if name != TVM and ran is not None and wider(ran["name"], held_to):
                which = "; ".join(f"{lib} {isa} ({what})" for lib, (isa, what) in ran["seen"].items()
                                  if wider(isa, held_to))
                for t in self.sweep:
                    self.unavailable[t][name] = f"ran {ran['name']} code under an {held_to} build: {which}"

    def run(self, golden: dict, held_to: str | None, rounds: int, warmup: float,
            bandwidth: bool) -> tuple[dict, list[float]]:
        """The race once every worker is started: set up, checked against ``golden`` (size -> output), the peers
        that ran wider code than ``held_to`` refused, then timed (``time``)."""
        with phase("build"):  # each worker builds or compiles what it times, one after the other
            self.set_up()
        with phase("run"):
            self.check(golden)
            self.refuse_wider_peers(held_to)
            return self.time(rounds, warmup, bandwidth)

    def time(self, rounds: int, warmup: float, bandwidth: bool) -> tuple[dict, list[float]]:
        """``rounds`` rounds, each asking TVM and every peer in turn at every T for a batch (and, with
        ``bandwidth``, the TVM worker for a read-bandwidth sample first), the first batch of each warmed up for
        ``warmup`` seconds just before, and each worker quiet before the next batch or probe (``Worker.settle``);
        the load around and during them (``LoadWatch.report``), and the bandwidth samples."""
        timed = [(name, worker) for worker, r in self.ready.items() for name in r.outputs]
        load, bandwidths = LoadWatch.start(), []
        for r in range(rounds):
            self.log(f"bench: round {r + 1} of {rounds}")
            if bandwidth:
                bandwidths.append(self.workers[TVM].call("bandwidth_gbs", timeout=TIME_LIMIT_S))
                self.workers[TVM].settle()  # its pool spins after the probe, as after a batch
            for t in self.sweep:
                for name, worker in timed:
                    if name in self.unavailable[t]:
                        continue
                    with self._dropping(worker, " while timed"):
                        w = self.workers[worker]
                        _warm_up(w, name, t, warmup if r == 0 else 0.0)
                        self.samples[t].setdefault(name, []).append(w.call("time_ms", name, t, timeout=TIME_LIMIT_S))
                        w.settle()
            load.sample()
        return load.report(), bandwidths


def _warm_up(w: Worker, name: str, tokens: int, seconds: float) -> None:
    """Batches of ``name`` at ``tokens``, untimed: at least one, and for at least ``seconds``."""
    end = time.monotonic() + seconds
    w.call("time_ms", name, tokens, timeout=TIME_LIMIT_S)
    while time.monotonic() < end:
        w.call("time_ms", name, tokens, timeout=TIME_LIMIT_S)


def compile_cache(folder: Path, peer: str) -> dict[str, str]:
    """A compiled peer's inductor (and Triton) cache: an empty one of its own, so its compile time is a cold
    compile's, or the one every bench shares under ``$MTP_TVM_INDUCTOR_CACHE`` (``shared_compile_cache``)."""
    shared = shared_compile_cache()
    root, suffix = (folder, f"-{peer}") if shared is None else (shared, "")
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / f"inductor{suffix}"),
            "TRITON_CACHE_DIR": str(root / f"triton{suffix}")}
