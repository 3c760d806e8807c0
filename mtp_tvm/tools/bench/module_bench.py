"""``bench("FILE.py")``, ``bench --module FILE.py``: the user's own model as TVM builds it, timed against what they
would run instead: the model eagerly in torch (``torch_eager``) and through ``torch.compile`` (inductor,
``freezing``, default and ``max-autotune``), on the file's example inputs.

The rules are ``bench``'s (``tools/bench/bench.py``): TVM and every peer in a worker process of its own with the same
thread count, set up one after the other, checked before it is timed, timed side by side in rounds, medians reported,
compile times apart, the load average around the rounds. What differs:

- **One size.** A module file is timed at its example inputs (its symbolic sizes have no sweep).
- **TVM runs an artifact.** The build happens here, once (its time is the compile time), into an
  artifact folder (``artifact.module_artifact``); the TVM worker loads it with the runtime, so it runs no torch
  op and no export, and times ``main`` with the parameters packed once.
- **The peers run the file's own model**, ``model()`` with the parameters of the model the build exported
  (``state_dict``: a model that initialises randomly is still the same model), on the same example inputs.
- **The reference** is the golden of ``check --module`` (torch eagerly, or a TVMScript module's unscheduled CPU
  build); every output of TVM and of each peer must match it (``race.PEER_CHECK``, BF16-level) before it is timed. A
  TVMScript module has no torch model: its peers are unavailable.
- **The floor** is the memory term of a roofline: every input, parameter and output moved once at the bandwidth of
  a device copy sampled each round (a module's FLOPs are not counted).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ...compiler.options import MODULE_FILES, DebugOptions, ModuleSpec, split_options
from ...passes.target import cpu_isa, is_gpu, require_runs_here, target_json, usable_cores
from ...support.atomic_file import write_user_file
from ...support.errors import MtpError, UsageError
from ...support.text_table import text_table
from ...support.timing import phase
from ...verify.comparators import flat_outputs
from .options import MODULE_PEERS, BenchOptions
from .peer_isa import held_to, peer_env
from .race import Race, cold_cache
from .tvm_worker import TVM, TvmJob
from .worker import EXAMPLE, InputFiles

STATE_DICT = "state_dict.pt"


# ---- the result -------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ModuleBenchResult:
    """A ``bench --module`` run: TVM's and every peer's median ms (None: ``unavailable`` says why) and samples, the
    memory floor (``bytes`` at the median copy bandwidth), the best peer and its ratio to TVM (above 1: TVM is
    faster), compile seconds apart, and how it was measured."""

    module: str
    kind: str
    target: dict
    schedule: str
    inputs: dict[str, list[int]]
    threads: int
    load_average: dict
    workers: dict[str, int]
    median_ms: dict[str, float | None]
    samples_ms: dict[str, list[float]]
    unavailable: dict[str, str]
    compile_seconds: dict[str, float]
    bytes: float
    bandwidth_gbs: float
    floor_ms: float
    best_peer: str | None
    tvm_vs_best_peer: float | None
    isolation: str = "process"
    peers_held_to: str | None = None  # the build's ISA, which the peers were held to (None: native)
    peer_isa: dict[str, dict] = dataclasses.field(default_factory=dict)  # peer -> ``peer_isa.ran_isa``

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def write_json(self, path: str | os.PathLike) -> None:
        write_user_file(path, lambda p: p.write_text(json.dumps(self.as_dict(), indent=1)))

    def table(self) -> str:
        la = self.load_average
        shapes = ", ".join(f"{n}{s}" for n, s in self.inputs.items())
        head = [f"module {self.module} ({self.kind}) target={self.target['kind']} schedule={self.schedule} "
                f"inputs {shapes}; TVM and every peer in its own process, {self.threads} thread"
                f"{'s' if self.threads > 1 else ''} each",
                f"load average (1 min) {la['before']:.2f} before the rounds, {la['after']:.2f} after"
                + (f"; WARNING: {la['warning']}" if la["warning"] else "")]
        rows = [("timed", "median ms", "samples")]
        for name, ms in self.median_ms.items():
            rows.append((f"tvm:{self.schedule}" if name == TVM else name, "-" if ms is None else f"{ms:.4f}",
                         str(len(self.samples_ms.get(name, [])))))
        rows.append(("memory floor", f"{self.floor_ms:.4f}", "-"))
        notes = [f"unavailable: {name}: {why}" for name, why in self.unavailable.items()]
        if self.best_peer is not None and self.tvm_vs_best_peer is not None:
            notes.append(f"best peer {self.best_peer}; best peer / tvm {self.tvm_vs_best_peer:.2f}x"
                         + (" (UNRELIABLE: the load exceeded the cores)" if la.get("unreliable") else ""))
        if self.peer_isa:
            notes.append("isa: each peer's the widest its code ran (JSON peer_isa: "
                         + ", ".join(f"{n} {isa['name']}" for n, isa in self.peer_isa.items()) + "); peers "
                         + (f"held to {self.peers_held_to}" if self.peers_held_to else "native"))
        notes.append("compile s (apart from the figures): "
                     + "; ".join(f"{n} {s:.1f}" for n, s in self.compile_seconds.items()))
        notes.append(f"memory floor: {self.bytes / 1e6:.2f} MB (inputs, parameters, outputs once) / "
                     f"{self.bandwidth_gbs:.1f} GB/s (a device copy, the median of one sample a round); a module's "
                     "FLOPs are not counted")
        return "\n".join([*head, *text_table(rows, align_right=frozenset({1, 2})), *notes])


# ---- the race ---------------------------------------------------------------------------------------------

def bench_module_file(spec: ModuleSpec | str | os.PathLike | None, options: BenchOptions, *,
                      debug: DebugOptions | None = None, log: Callable[[str], None] | None = None,
                      **keywords) -> ModuleBenchResult:
    """``bench`` of a module file: build it (keywords: ``module``, ``target``, ``schedule`` and the fields of
    ``DebugOptions``: a pass disabled or added, dumps) and race it against its torch peers as ``options`` (made
    ``for_kind(MODULE_FILE)``) say; see the module docstring. ``options.artifact``: a module file's artifact timed
    instead of a build, on its stored example inputs against its stored reference; the peers run the module file
    the manifest names while its sha256 is the one built (else they are unavailable, with why)."""
    artifact = options.artifact
    if artifact is None:
        spec, debug = split_options(spec, debug, keywords, "bench", MODULE_FILES)
    elif spec is not None or keywords:
        raise UsageError("bench() takes a module file (with target, schedule) or a module artifact, not both")
    elif debug is not None and debug != DebugOptions():
        raise UsageError("bench: an artifact is built already; debugging options (how TVM builds) cannot apply")
    else:
        prebuilt = _prebuilt(Path(artifact))
        spec = prebuilt.spec
    tgt = spec.resolved_target
    require_runs_here(tgt)
    peers_held_to = held_to(None if is_gpu(tgt) else cpu_isa(tgt).name)
    log = log or (lambda _message: None)
    threads = options.threads or usable_cores()
    with tempfile.TemporaryDirectory(prefix="mtp-bench-module-") as tmp, contextlib.ExitStack() as running:
        folder = Path(tmp)
        build = _build(spec, debug, folder) if artifact is None else prebuilt
        race = Race(folder, threads, (EXAMPLE,), running, log, where=lambda _size: "on the example inputs")
        race.start(TVM, TvmJob(None, options.number, artifact=str(build.artifact)))
        _start_peers(race, build, options, folder, "cuda" if is_gpu(tgt) else "cpu", threads, peers_held_to)
        with phase("build"):
            race.set_up()
        with phase("run"):
            race.check({EXAMPLE: build.golden})
            race.refuse_wider_peers(peers_held_to)
            load, bandwidths = race.time(options.rounds, bandwidth=True)
    return _result(spec, tgt, options, race, build, load, bandwidths, peers_held_to)


@dataclasses.dataclass(frozen=True)
class _Build:
    """The module's artifact and what the race needs of it: the loaded file (None where the peers cannot run:
    ``no_peers`` says why), what it is (path, kind, example shapes), the example inputs the peers run, the reference
    outputs as one vector (the golden), the bytes ``main`` must move (every input, parameter and output once), the
    build's seconds."""

    artifact: Path
    module_file: object  # ir.module_file.ModuleFile, or None
    module: str
    kind: str
    shapes: dict[str, list[int]]
    examples: dict[str, np.ndarray]
    golden: np.ndarray
    moved: float
    seconds: float
    spec: ModuleSpec | None = None  # a prebuilt artifact's, from its manifest
    no_peers: str | None = None


def _build(spec: ModuleSpec, debug: DebugOptions, folder: Path) -> _Build:
    from ...artifact.export import build
    from ...artifact.module_reference import REFERENCE_OUTPUTS
    from ...compiler.arrays import read_npz

    built = build(folder / "artifact", spec, debug, log=lambda *_: None)
    user = built.compiled.module_file
    outputs = built.manifest["outputs"]
    reference = read_npz(built.path / REFERENCE_OUTPUTS, {n: s["dtype"] for n, s in outputs.items()})
    moved = float(sum(a.nbytes for a in (*user.examples.values(), *reference.values())))
    return _Build(built.path, user, str(user.path), user.kind, user.example_shapes, dict(user.examples),
                  flat_outputs([reference[n] for n in user.output_names]), moved, built.compiled.build_seconds)


def _prebuilt(path: Path) -> _Build:
    """A module file's artifact as the race needs it, from its manifest and stored arrays (refused unless it is
    one), with the module file it was built from while that is unchanged (the peers' model)."""
    from ...artifact.manifest import read_manifest
    from ...artifact.module_reference import stored_arrays

    m = read_manifest(path)
    if "module" not in m:
        raise UsageError(f"{path} is a case's artifact, not a module file's")
    inputs, reference = stored_arrays(path, m, "example_inputs"), stored_arrays(path, m, "reference_outputs")
    moved = float(sum(a.nbytes for a in (*inputs.values(), *reference.values())))
    spec = ModuleSpec(m["module"]["path"], m["target"], m["schedule"]["name"])
    user, why = _built_from(m["module"])
    return _Build(path, user, m["module"]["path"], m["module"]["kind"], m["shapes"], inputs,
                  flat_outputs([reference[n] for n in m["outputs"]]), moved, m["build"]["compile_seconds"], spec, why)


def _built_from(module: dict):
    """The module file an artifact was built from, loaded, or None and why the peers cannot run it: a TVMScript
    module has no torch model, and a file that is gone or changed since the build (its sha256) is not the model
    the artifact holds."""
    from ...artifact.manifest import sha256_file
    from ...ir.module_file import load_module_file

    source = Path(module["path"])
    if module["kind"] != "torch":
        return None, "a TVMScript module file has no torch model to run"
    if "sha256" not in module:
        return None, "the artifact records no sha256 of its module file (built before bench --artifact ran peers)"
    if not source.is_file():
        return None, f"its module file {source} is gone"
    if sha256_file(source) != module["sha256"]:
        return None, f"its module file {source} changed since the build (sha256 differs)"
    try:
        return load_module_file(source), None
    except MtpError as e:
        return None, f"its module file {source} no longer loads: {e}"


def _start_peers(race: Race, build: _Build, options: BenchOptions, folder: Path, device: str,
                 threads: int, isa: str | None) -> None:
    """A worker per torch peer, on the inputs TVM runs (none where the model cannot run: unavailable, with why),
    held to ``isa`` (``peer_isa.held_to``; None: native) as a case's peers are."""
    peers, user = list(options.peers), build.module_file
    why = build.no_peers or (None if user.kind == "torch" else "a TVMScript module file has no torch model to run")
    if why:
        for p in peers:
            race.unavailable[EXAMPLE][p] = why
        return
    import torch

    from .peer_worker import ModelPeerJob, peer_unavailable

    torch.save(dict(user.program.state_dict), folder / STATE_DICT)
    files = InputFiles.write(folder, {n: s.dtype for n, s in user.input_specs.items()}, user.activation_names,
                             {EXAMPLE: build.examples})
    for p in peers:
        why = peer_unavailable(p, device == "cuda")
        if why:
            race.unavailable[EXAMPLE][p] = why
        else:
            race.start(p, ModelPeerJob(p, MODULE_PEERS[p], str(user.path), str(folder / STATE_DICT), files, device,
                                       threads, options.number),
                       {**(cold_cache(folder, p) if MODULE_PEERS[p] else {}), **peer_env(isa)})


def _result(spec: ModuleSpec, tgt, options: BenchOptions, race: Race, build: _Build,
            load: dict, bandwidths: list[float], peers_held_to: str | None) -> ModuleBenchResult:
    samples, unavailable = race.samples[EXAMPLE], race.unavailable[EXAMPLE]
    names = [TVM, *options.peers]
    median = {n: statistics.median(samples[n]) if samples.get(n) else None for n in names}
    peers = {n: ms for n, ms in median.items() if n != TVM and ms is not None}
    best = min(peers, key=peers.get) if peers else None
    bandwidth = statistics.median(bandwidths)
    return ModuleBenchResult(
        module=build.module, kind=build.kind, target=target_json(tgt), schedule=spec.schedule,
        inputs=build.shapes, threads=race.threads,
        load_average=load,
        workers=race.pids, median_ms=median, samples_ms=dict(samples), unavailable=dict(unavailable),
        compile_seconds={TVM: build.seconds, **{n: v for r in race.ready.values()
                                                for n, v in r.compile_seconds.items()}},
        bytes=build.moved, bandwidth_gbs=bandwidth, floor_ms=build.moved / bandwidth / 1e6, best_peer=best,
        tvm_vs_best_peer=None if best is None or median[TVM] is None else peers[best] / median[TVM],
        peers_held_to=peers_held_to,
        peer_isa={n: r.details["isa"] for n, r in race.ready.items() if n != TVM and "isa" in r.details})
