"""What ``bench`` does only for a module file (``bench("FILE.py")``, ``bench --module FILE.py``): build the user's
own model into an artifact (or take a module file's prebuilt one), and race it against what they would run
instead, the model eagerly in torch (``torch_eager``) and through ``torch.compile`` (inductor, ``freezing``,
default and ``max-autotune``), on the file's example inputs. The race, its workers, options and result are
``bench``'s own (``race.py``, ``tvm_worker.py``, ``peer_worker.py``, ``options.py``, ``result.py``). What differs
from a case:

- **One size**, ``worker.EXAMPLE``: a module file is timed at its example inputs (its symbolic sizes have no
  sweep).
- **TVM runs an artifact.** The build happens here, once (its time is the compile time), into an artifact folder
  (``artifact.module_artifact``); the TVM worker loads it with the runtime, so it runs no torch op and no export,
  and times ``main`` with the parameters packed once.
- **The peers run the file's own model**, ``model()`` with the parameters of the model the build exported
  (``state_dict``: a model that initialises randomly is still the same model), on the same example inputs.
- **The reference** is the golden of ``check --module`` (torch eagerly, or a TVMScript module's unscheduled CPU
  build); every output of TVM and of each peer must match it (``race.PEER_CHECK``, BF16-level) before it is timed. A
  TVMScript module has no torch model: its peers are unavailable.
- **The roofline** is its memory term, the floor: every input, parameter and output moved once at the bandwidth of
  a device copy sampled each round (a module declares no GEMMs, so its FLOPs are not counted).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ...compiler.options import MODULE_FILES, DebugOptions, ModuleSpec
from ...contract.presets import NO_PRESET
from ...passes.target import cpu_isa, is_gpu, require_runs_here, target_json, usable_cores
from ...support.errors import MtpError, UsageError
from ...verify.comparators import flat_outputs
from ...verify.subject import ModuleSubject, subject_of
from .options import MODULE_PEERS, BenchOptions
from .peer_isa import held_to, peer_env
from .race import Race, compile_cache
from .result import BenchResult, size_figures
from .tvm_worker import TVM, TvmJob, isa_record
from .worker import EXAMPLE, InputFiles

STATE_DICT = "state_dict.pt"


# ---- the race ---------------------------------------------------------------------------------------------

def race_user_model(spec: ModuleSubject | ModuleSpec | str | os.PathLike | None, options: BenchOptions, *,
                    debug: DebugOptions | None = None, log: Callable[[str], None] | None = None,
                    **keywords) -> BenchResult:
    """``bench``'s race of a module file: build it (keywords: ``module``, ``target``, ``schedule`` and the fields of
    ``DebugOptions``: a pass disabled or added, dumps) and race it against its torch peers as ``options`` (made
    ``for_kind(MODULE_FILE)``) say; see the module docstring. ``options.artifact``: a module file's artifact timed
    instead of a build, on its stored example inputs against its stored reference; the peers run the module file
    the manifest names while its sha256 is the one built (else they are unavailable, with why)."""
    artifact = options.artifact
    if artifact is None:
        subject, debug = subject_of(spec, debug, keywords, "bench", MODULE_FILES)
        spec = subject.spec
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
        build = _build(subject, debug, folder) if artifact is None else prebuilt
        race = Race(folder, threads, (EXAMPLE,), running, log, where=lambda _size: "on the example inputs")
        race.start(TVM, TvmJob(None, options.number, artifact=str(build.artifact)))
        _start_peers(race, build, options, folder, "cuda" if is_gpu(tgt) else "cpu", threads, peers_held_to)
        load, bandwidths = race.run({EXAMPLE: build.golden}, peers_held_to, options.rounds, options.warmup,
                                    bandwidth=True)
    return _result(spec, tgt, options, race, build, load, bandwidths, peers_held_to)


@dataclasses.dataclass(frozen=True)
class _Build:
    """The module's artifact and what the race needs of it: the loaded file (None where the peers cannot run:
    ``no_peers`` says why), what it is (path, name, kind, example shapes), the example inputs the peers run, the
    reference outputs as one vector (the golden), the bytes ``main`` must move (every input, parameter and output once),
    the build's seconds."""

    artifact: Path
    module_file: object  # ir.module_file.ModuleFile, or None
    module: str
    name: str
    kind: str
    shapes: dict[str, list[int]]
    examples: dict[str, np.ndarray]
    golden: np.ndarray
    moved: float
    seconds: float
    spec: ModuleSpec | None = None  # a prebuilt artifact's, from its manifest
    no_peers: str | None = None


def _build(subject: ModuleSubject, debug: DebugOptions, folder: Path) -> _Build:
    from ...artifact.export import build
    from ...artifact.module_reference import REFERENCE_OUTPUTS
    from ...compiler.arrays import read_npz

    built = build(folder / "artifact", subject, debug, log=lambda *_: None)
    user = built.compiled.module_file
    outputs = built.manifest["outputs"]
    reference = read_npz(built.path / REFERENCE_OUTPUTS, {n: s["dtype"] for n, s in outputs.items()})
    moved = float(sum(a.nbytes for a in (*user.examples.values(), *reference.values())))
    return _Build(built.path, user, str(user.path), user.name, user.kind, user.example_shapes, dict(user.examples),
                  flat_outputs([reference[n] for n in user.output_names]), moved, built.compiled.build_seconds,
                  no_peers=_no_torch_model(user.kind))


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
    return _Build(path, user, m["module"]["path"], m["case"], m["module"]["kind"], m["shapes"], inputs,
                  flat_outputs([reference[n] for n in m["outputs"]]), moved, m["build"]["compile_seconds"], spec, why)


def _built_from(module: dict):
    """The module file an artifact was built from, loaded, or None and why the peers cannot run it: a TVMScript
    module has no torch model, and a file that is gone or changed since the build (its sha256) is not the model
    the artifact holds."""
    from ...artifact.manifest import sha256_file
    from ...ir.module_file import load_module_file

    source = Path(module["path"])
    if _no_torch_model(module["kind"]):
        return None, _no_torch_model(module["kind"])
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


def _no_torch_model(kind: str) -> str | None:
    """Why a module file of ``kind`` has no model for the torch peers to run (None: it has one)."""
    from ...ir.module_file import TORCH  # the loader: imported where a module file is read

    return None if kind == TORCH else "a TVMScript module file has no torch model to run"


def _start_peers(race: Race, build: _Build, options: BenchOptions, folder: Path, device: str,
                 threads: int, isa: str | None) -> None:
    """A worker per torch peer, on the inputs TVM runs (none where the model cannot run: unavailable, with why),
    held to ``isa`` (``peer_isa.held_to``; None: native) as a case's peers are."""
    peers, user = list(options.peers), build.module_file
    if build.no_peers:
        for p in peers:
            race.unavailable[EXAMPLE][p] = build.no_peers
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
                       {**(compile_cache(folder, p) if MODULE_PEERS[p] else {}), **peer_env(isa)})


def _result(spec: ModuleSpec, tgt, options: BenchOptions, race: Race, build: _Build,
            load: dict, bandwidths: list[float], peers_held_to: str | None) -> BenchResult:
    """The race as ``bench``'s result: one size, ``EXAMPLE``, against its memory floor."""
    bandwidth = statistics.median(bandwidths)
    figures = size_figures(EXAMPLE, build.shapes, [TVM, *options.peers], race.samples[EXAMPLE],
                           race.unavailable[EXAMPLE], 0.0, build.moved, None, bandwidth)
    return BenchResult(
        case=build.name, target=target_json(tgt), preset=NO_PRESET, frontend=build.kind, schedule=spec.schedule,
        shapes=build.shapes, tokens=[EXAMPLE], per_tokens={EXAMPLE: figures},
        compile_seconds={TVM: build.seconds, **{n: v for r in race.ready.values()
                                                for n, v in r.compile_seconds.items()}},
        threads=race.threads, warmup_s=options.warmup, load_average=load, workers=race.pids, peak_gflops=None,
        peak_kind=None, peaks={},
        bandwidth_gbs=bandwidth, bandwidth_samples_gbs=bandwidths,
        probes="bandwidth: a device copy, the median of one sample a round", numpy_blas=[], isa=isa_record(tgt, None),
        instruction_mix={}, peers_held_to=peers_held_to,
        peer_isa={n: r.details["isa"] for n, r in race.ready.items() if n != TVM and "isa" in r.details},
        module=build.module)
