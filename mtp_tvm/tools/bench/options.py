"""How ``bench`` races, apart from the race (which imports TVM and torch): ``BenchOptions``, one class for a case
and a module file (``for_kind`` resolves its peers for the kind and refuses what only a case has), and the
peers' names. The command line declares its flags from these fields (``support.flags``) without loading the
bench."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from ...ir.frontend_names import FRONTEND_NAMES
from ...support.env import env_float, env_path
from ...support.errors import UsageError
from ...support.flags import comma_list, option
from ...support.load_average import usable_cores

if TYPE_CHECKING:
    from ..measure.profile import ProfileOptions

# the peers of a case (``peer_worker.PEERS`` runs them), in the tables' order
CASE_PEERS = ("torch_bf16", "torch_fp32", "numpy_fp32", "torch_golden", "torch_compile", "torch_compile_max_autotune")
# the peers of a module file (``peer_worker.ModelPeerJob`` runs them) -> their torch.compile mode
MODULE_PEERS = {"torch_eager": None, "torch_compile": "default", "torch_compile_max_autotune": "max-autotune"}


def require_count(name: str, value, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{name} must be an integer >= 1, got {value!r}")


def check_race_counts(rounds, number, threads) -> None:
    """A race's ``rounds``, calls per batch (``number``, None: sized) and threads per worker (None: every core),
    checked: the threads become every worker's TVM_NUM_THREADS, so no more than this process may use."""
    require_count("rounds", rounds)
    require_count("number", number, optional=True)
    require_count("threads", threads, optional=True)
    if threads is not None and threads > usable_cores():
        raise UsageError(f"threads must be at most the {usable_cores()} cores this process may use, got {threads}")


# untimed calls of each contender at each size just before its first timed batch, as a user's stopwatch warms up
# (the first seconds of a fresh worker run 1.5-25x its steady time: caches, allocator, OpenMP and BLAS pools)
STOPWATCH_WARMUP_S = 1.5
MAX_WARMUP_S = 60.0
WARMUP_ENV = "MTP_TVM_BENCH_WARMUP_S"


def default_warmup() -> float:
    """``STOPWATCH_WARMUP_S``, unless ``$MTP_TVM_BENCH_WARMUP_S`` sets another default: a test suite's or a smoke
    run's, which checks what bench does rather than how fast (its table then says the warm-up was short)."""
    return env_float(WARMUP_ENV, 0.0, MAX_WARMUP_S, STOPWATCH_WARMUP_S, " (seconds)")


COMPILE_CACHE_ENV = "MTP_TVM_INDUCTOR_CACHE"


def shared_compile_cache() -> Path | None:
    """``$MTP_TVM_INDUCTOR_CACHE``: a folder whose inductor (and Triton) cache every compiled peer of every bench
    shares, so a bench run again (a test suite, a tuning loop) compiles from a warm cache, and its compile
    times say so; None (unset): each peer compiles into an empty cache of its own, a cold compile."""
    return env_path(COMPILE_CACHE_ENV)


CASE, MODULE_FILE = "a case", "a module file"
# the fields only a case's bench reads: a module file is timed once, at its example inputs, on this machine
CASE_ONLY = ("tokens", "seed", "compare_schedules", "compare_frontends", "profile", "rpc", "api")


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """How ``bench`` races (what it builds is a ``BuildSpec`` or a module file's ``ModuleSpec``): ``peers`` those that
    race TVM (TVM always runs; None: every peer of the kind, ``CASE_PEERS`` or ``MODULE_PEERS``; empty: TVM alone);
    ``rounds`` timing rounds; ``number`` calls per timed batch (None: about 50 ms of each); ``threads`` every worker's
    thread count (None: every usable core); ``warmup`` seconds of untimed calls of each contender at each size before
    its first timed batch (default ``STOPWATCH_WARMUP_S``). A case's only (``CASE_ONLY``): ``tokens`` the T sweep (an
    int or a sequence; empty: the spec's T; the flag is ``BuildSpec``'s ``--tokens``, a comma list here); ``seed`` of
    the inputs; ``compare_schedules`` and ``compare_frontends`` more TVM builds (other schedules, other frontends) timed
    in the same rounds; ``profile`` (True or ``ProfileOptions``) every kernel of ``main`` at the first T; ``rpc =
    (HOST:PORT, key)`` TVM timed on a server of a TVM RPC tracker (``tools/remote.py``); ``api`` also times the public
    API path (``tvm:api``, beside the kernel: ``bench_tvm.API``). ``artifact``: a prebuilt artifact folder timed instead
    of a build (its manifest says what it is, a case's or a module file's; TVM's runtime alone will do, as on a
    deployment machine)."""

    peers: tuple[str, ...] | None = option(
        None, help="the peers that race TVM, '' for none", type=comma_list, metavar="A,B,...",
        shown=f"all: {', '.join(CASE_PEERS)}; with --module: {', '.join(MODULE_PEERS)}", text=",".join,
        deprecated=("--contenders",))
    rounds: int = option(7, help="timing rounds, each timing TVM and every peer in turn; medians over them",
                         type=int, metavar="N")
    number: int | None = None
    threads: int | None = option(None, help="threads of every worker process, TVM's and each peer's",
                                 shown="every usable core", type=int, metavar="N")
    warmup: float | None = option(None, type=float, metavar="S", shown=f"{STOPWATCH_WARMUP_S:g}, or ${WARMUP_ENV}",
                                  help="seconds of untimed calls of each contender at each size before its first "
                                  "timed batch, as a stopwatch warms up")
    tokens: tuple[int, ...] = ()
    seed: int = 0
    compare_schedules: tuple[str, ...] = option(
        (), help="also time TVM with these schedules in the same rounds, e.g. none,default,tuned,dlight",
        type=comma_list, metavar="A,B,...", text=",".join)
    compare_frontends: tuple[str, ...] = option(
        (), help=f"also time TVM built from these frontends ({', '.join(FRONTEND_NAMES)}) in the same rounds, e.g. "
        "torch,tir (the case imported from torch.export against the hand-written kernels)", type=comma_list,
        metavar="A,B,...", text=",".join)
    profile: bool | ProfileOptions = False  # --profile, check's too
    rpc: tuple[str, str] | None = None  # --rpc-tracker and --rpc-key (cli/common.py: tune's too)
    artifact: str | None = None  # --artifact, a keyword flag of several commands
    api: bool = option(False, help="also time the public API path beside the kernel (tvm:api): bound.run on "
                       "activations already on the binary's device (torch tensors), outputs left there")

    def __post_init__(self):
        if self.peers is not None:
            peers = (self.peers,) if isinstance(self.peers, str) else tuple(self.peers)
            known = (*CASE_PEERS, *MODULE_PEERS)
            unknown = [p for p in peers if p not in known]
            if unknown:
                raise UsageError(f"unknown peer {unknown[0]!r}; choose from {', '.join(CASE_PEERS)} (a case) or "
                                 f"{', '.join(MODULE_PEERS)} (a module file); TVM always runs")
            object.__setattr__(self, "peers", tuple(dict.fromkeys(peers)))
        check_race_counts(self.rounds, self.number, self.threads)
        if self.warmup is None:  # read here, not where the command line is declared: a bad value fails bench alone
            object.__setattr__(self, "warmup", default_warmup())
        if (isinstance(self.warmup, bool) or not isinstance(self.warmup, (int, float))
                or not 0 <= self.warmup <= MAX_WARMUP_S):
            raise UsageError(f"warmup must be a number of seconds in [0, {MAX_WARMUP_S:g}], got {self.warmup!r}")
        if not isinstance(self.api, bool):
            raise UsageError(f"api must be True or False, got {self.api!r}")
        if self.api and self.rpc is not None:
            raise UsageError("api times the Python API here; it cannot go with rpc")
        tokens = (self.tokens,) if isinstance(self.tokens, int) else tuple(self.tokens)
        for t in tokens:
            require_count("tokens", t)
        if self.artifact is not None:
            clash = [flag for flag, given in (("compare_schedules", self.compare_schedules),
                                              ("compare_frontends", self.compare_frontends),
                                              ("profile", self.profile), ("rpc", self.rpc)) if given]
            if clash:
                raise UsageError(f"artifact: a prebuilt binary is timed as it is; {clash[0]} needs a build")
        object.__setattr__(self, "tokens", tuple(dict.fromkeys(tokens)))
        object.__setattr__(self, "compare_schedules", tuple(self.compare_schedules))
        object.__setattr__(self, "compare_frontends", tuple(self.compare_frontends))
        unknown = [f for f in self.compare_frontends if f not in FRONTEND_NAMES]
        if unknown:
            raise UsageError(f"compare_frontends: unknown frontend {unknown[0]!r}; choose from "
                             f"{', '.join(FRONTEND_NAMES)}")

    def for_kind(self, kind: str) -> BenchOptions:
        """These options for ``kind`` (``CASE`` or ``MODULE_FILE``): the peers resolved to that kind's (in its
        tables' order; a peer of the other kind refused by name), and for a module file a case's only option
        refused by name."""
        names = CASE_PEERS if kind == CASE else tuple(MODULE_PEERS)
        peers = names if self.peers is None else self.peers
        unknown = [p for p in peers if p not in names]
        if unknown:
            raise UsageError(f"unknown peer {unknown[0]!r} for {kind}; choose from {', '.join(names)} (TVM always "
                             "runs)")
        if kind == MODULE_FILE:
            given = [f for f in CASE_ONLY if getattr(self, f) != _DEFAULTS[f]]
            if given:
                raise UsageError(f"bench of a module file times it once, at its example inputs, here: {given[0]} "
                                 "applies to a case; drop it")
        return dataclasses.replace(self, peers=tuple(p for p in names if p in peers))


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(BenchOptions)}  # CASE_ONLY's: plain defaults
