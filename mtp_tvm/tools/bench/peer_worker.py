"""``bench``'s peers: the case computed the way a user would without TVM, each one timed in its own worker
process (``tools/bench/worker.py``).

- ``torch_bf16`` / ``torch_fp32``: each stage's torch peer (``tools/bench/stage_peers.py``: ``F.linear``,
  ``F.rms_norm``) in BF16 or FP32, weights converted once;
- ``numpy_fp32``: each stage's numpy peer in FP32;
- ``torch_golden``: the golden implementation (``contract/golden.py``), what the checks compare against;
- ``torch_compile`` / ``torch_compile_max_autotune``: the BF16 peer's chain as one ``nn.Module``
  (``ChainModule``: the weights frozen parameters, the activations its arguments) through ``torch.compile``
  (inductor, ``freezing``, static shapes: one compile per T, as a user with a fixed T gets), default mode and
  ``max-autotune``. The compile happens while the worker is set up; its time is reported apart.

- a module file's ``torch_eager``, ``torch_compile``, ``torch_compile_max_autotune``: the file's own model
  (``ModelPeerJob``), eagerly or through ``torch.compile``, on its example activations.

A peer computes the whole chain (the projection with its norms and quantisation, the tail end to end) and its
output is checked against the golden before it is timed (``bench``): a peer that computes garbage fast does not
win.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ...compiler.arrays import dtype_name
from ...contract.cases import TOKENS, Case, get_case
from ...contract.presets import Shapes
from ...support.user_code import load_user_file, run_user_code
from ...verify.comparators import as_float32, flat_outputs
from .peer_isa import INDUCTOR, NUMPY_LIBRARIES, TORCH_LIBRARIES, ran_isa
from .stage_peers import STAGE_PEERS
from .worker import EXAMPLE, InputFiles, Ready, calls_per_batch

Run = Callable[[], object]
# Dynamo keeps one compiled graph per T (the guards fail on a new shape or module) up to its recompile limit (8),
# then runs eager without a word: a T sweep must never reach it
RECOMPILE_LIMIT = 1 << 10


@dataclasses.dataclass(frozen=True)
class Peer:
    """``prepare(case, inputs, shapes)`` -> a zero-argument callable computing the whole case from ``inputs``
    (torch tensors on the peer's device); what is not per-call work (weight conversion, compilation) is done
    there, once. ``compiles``: prepare compiles, and its time is the peer's compile time. ``libraries``: those
    whose code it runs, as ``peer_isa.ran_isa`` reads them."""

    prepare: Callable[[Case, dict[str, torch.Tensor], Shapes], Run]
    compiles: bool = False
    libraries: tuple[str, ...] = TORCH_LIBRARIES


def _stage_chain(make_stage: Callable, activation: Callable) -> Callable[[Case, dict, Shapes], Run]:
    """A peer that runs the case's stages one after the other: ``make_stage(stage, inputs, shapes) -> f(x)``,
    the case's hidden input as the peer reads it: ``activation(hidden)``."""

    def prepare(case: Case, inputs: dict, s: Shapes) -> Run:
        stages = [make_stage(st, inputs, s) for st in case.chain]
        opening = case.chain[0].hidden_input
        x0 = None if opening is None else activation(inputs[opening.name])

        def run():
            x = x0
            for f in stages:
                x = f(x)
            return x

        return run

    return prepare


def _torch_peer(dtype: torch.dtype) -> Peer:
    return Peer(_stage_chain(lambda st, t, s: STAGE_PEERS[st.name].torch(t, s, dtype), lambda x: x.to(dtype)))


class ChainModule(torch.nn.Module):
    """The eager torch peer's stage chain as one module, for ``torch.compile``: every weight a frozen parameter
    (converted to ``dtype`` once, as the eager peer converts it), the activations (token-major inputs) the
    arguments of ``forward``, so the compiler may fold the weights but never the activations."""

    def __init__(self, case: Case, inputs: dict[str, torch.Tensor], s: Shapes, dtype: torch.dtype):
        super().__init__()
        self.case, self.shapes, self.dtype = case, s, dtype
        self.activation_names = tuple(n for n, spec in case.input_specs(s).items() if TOKENS in spec.shape)
        self.weight_names = tuple(n for n in case.input_specs(s) if n not in self.activation_names)
        for n in self.weight_names:
            self.register_parameter(n, torch.nn.Parameter(inputs[n].to(dtype), requires_grad=False))

    def forward(self, *activations: torch.Tensor) -> torch.Tensor:
        t = {**{n: getattr(self, n) for n in self.weight_names}, **dict(zip(self.activation_names, activations))}
        opening = self.case.chain[0].hidden_input
        x = None if opening is None else t[opening.name].to(self.dtype)
        for st in self.case.chain:
            x = STAGE_PEERS[st.name].torch(t, self.shapes, self.dtype)(x)
        return x


def _compiled_peer(mode: str | None) -> Peer:
    def prepare(case: Case, inputs: dict, s: Shapes) -> Run:
        module = ChainModule(case, inputs, s, torch.bfloat16).eval()
        compiled = torch.compile(module, mode=mode, dynamic=False, fullgraph=True)
        activations = [inputs[n] for n in module.activation_names]

        def run():
            with torch.no_grad():
                return compiled(*activations)

        with torch._inductor.config.patch(freezing=True), torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            run()  # the compile, here: prepare's time is the compile time
        return run

    return Peer(prepare, compiles=True, libraries=(*TORCH_LIBRARIES, INDUCTOR))


PEERS: dict[str, Peer] = {
    "torch_bf16": _torch_peer(torch.bfloat16),
    "torch_fp32": _torch_peer(torch.float32),
    "numpy_fp32": Peer(_stage_chain(lambda st, t, s: STAGE_PEERS[st.name].numpy(t, s), lambda x: x.float().numpy()),
                       libraries=NUMPY_LIBRARIES),
    "torch_golden": Peer(_stage_chain(lambda st, t, s: lambda x: st.golden(x, t, s)[0], lambda x: x)),
    "torch_compile": _compiled_peer(None),
    "torch_compile_max_autotune": _compiled_peer("max-autotune"),
}


def peer_runner(case: Case, peer: str, inputs: dict[str, torch.Tensor], s: Shapes) -> Run:
    """The whole case for one peer (prepared: weights converted, compiled), as a zero-argument callable."""
    return PEERS[peer].prepare(case, inputs, s)


def peer_unavailable(peer: str, gpu: bool) -> str | None:
    """Why ``peer`` cannot race a GPU build here, or None."""
    if gpu and peer == "numpy_fp32":
        return "numpy runs on the host CPU, not the GPU"
    if gpu and not torch.cuda.is_available():
        return f"this torch ({torch.__version__}) has no CUDA"
    return None


def numpy_blas_info() -> list[dict]:
    """Which BLAS kernels numpy runs (threadpoolctl), so the numpy figure can be read correctly."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [{k: str(v) for k, v in i.items() if k in ("internal_api", "version", "architecture", "num_threads")}
            for i in threadpool_info()]


def failure_reason(e: BaseException) -> str:
    """One line for an exception out of torch (a compile that raised): its innermost cause's type and first
    line (inductor wraps the cause in ``BackendCompilerFailed`` with advice around it)."""
    while (inner := getattr(e, "inner_exception", None) or e.__cause__) is not None:
        e = inner
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0].strip()}" if lines else type(e).__name__


def as_torch(a: np.ndarray) -> torch.Tensor:
    """A numpy input as torch, BF16 bit-exactly (``ml_dtypes.bfloat16`` has no torch twin)."""
    if dtype_name(a) == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


# ---- the worker's side ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PeerJob:
    """One peer in its worker: ``case`` at every T of ``shapes``, on ``device``, on ``threads`` torch threads;
    ``number`` calls per timed batch (None: about ``bench_worker.SAMPLE_MS``)."""

    peer: str
    case: str
    shapes: dict[int, Shapes]
    inputs: InputFiles
    device: str
    threads: int
    number: int | None

    def open(self) -> PeerWorker:
        return PeerWorker(self)


class TorchWorker:
    """What every torch peer's worker does alike: run on ``threads`` torch threads, and time a batch of calls to
    the end of the device's work."""

    def __init__(self, threads: int, device: str):
        torch.set_num_threads(threads)
        self.sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def batch_ms(self, run: Run, calls: int) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        self.sync()
        return (time.perf_counter() - t0) / calls * 1e3


class PeerWorker(TorchWorker):
    """A peer's runs, one per T, prepared by ``setup`` and timed by ``time_ms``."""

    def __init__(self, job: PeerJob):
        super().__init__(job.threads, job.device)
        self.job = job
        self.runs: dict[int, tuple[Run, int]] = {}  # T -> (run, calls per batch)

    def setup(self) -> Ready:
        job, peer = self.job, PEERS[self.job.peer]
        case = get_case(job.case)
        weights = {k: as_torch(v).to(job.device) for k, v in job.inputs.weights().items()}
        ready = Ready()
        for tokens, s in job.shapes.items():
            acts = {k: as_torch(v).to(job.device) for k, v in job.inputs.activations_of(tokens).items()}
            t0 = time.perf_counter()
            try:
                run = peer.prepare(case, {**acts, **weights}, s)
                self.sync()
            except Exception as e:  # noqa: BLE001  (a compile that fails: this peer cannot run here, say why)
                step = "compile" if peer.compiles else "setup"
                ready.unavailable.setdefault(job.peer, {})[tokens] = f"{step} failed: {failure_reason(e)}"
                continue
            if peer.compiles:
                ready.compile_seconds.setdefault(job.peer, {})[tokens] = time.perf_counter() - t0
            ready.outputs.setdefault(job.peer, {})[tokens] = as_float32(run())
            self.runs[tokens] = (run, calls_per_batch(lambda calls, run=run: self.batch_ms(run, calls), job.number))
        blas = numpy_blas_info() if job.peer == "numpy_fp32" else []
        if job.peer == "numpy_fp32":
            ready.details["numpy_blas"] = blas
        if job.device == "cpu" and self.runs:
            ready.details["isa"] = ran_isa([run for run, _ in self.runs.values()], peer.libraries, blas)
        return ready

    def time_ms(self, name: str, tokens: int) -> float:
        """Milliseconds per call over one batch at ``tokens``."""
        return self.batch_ms(*self.runs[tokens])


@dataclasses.dataclass(frozen=True)
class ModelPeerJob:
    """A module file's own torch model as ``peer`` runs it (``bench`` of a module file): eagerly (``mode`` None)
    or through ``torch.compile`` in ``mode`` ("default", "max-autotune"), its parameters from ``state_dict``, its
    example activations from ``inputs``, on ``device``, on ``threads`` torch threads."""

    peer: str
    mode: str | None
    path: str
    state_dict: str
    inputs: InputFiles
    device: str
    threads: int
    number: int | None

    def open(self) -> ModelPeerWorker:
        return ModelPeerWorker(self)


class ModelPeerWorker(TorchWorker):
    """The user's model prepared (loaded, compiled) by ``setup`` and timed by ``time_ms``."""

    def __init__(self, job: ModelPeerJob):
        super().__init__(job.threads, job.device)
        self.job = job

    def _model(self):
        job = self.job
        file = load_user_file(Path(job.path), "module file")
        model = run_user_code(f"module file {job.path}: model()", file.model)
        model.load_state_dict(torch.load(job.state_dict, weights_only=True))
        return model.eval().to(job.device)

    def setup(self) -> Ready:
        job, ready = self.job, Ready()
        args = [as_torch(a).to(job.device) for a in job.inputs.activations_of(EXAMPLE).values()]
        t0 = time.perf_counter()
        try:
            model = self._model()
            if job.mode is not None:
                model = torch.compile(model, mode=None if job.mode == "default" else job.mode, dynamic=False)

            def run():
                with torch.no_grad():
                    return model(*args)

            with torch._inductor.config.patch(freezing=True):
                out = run()  # a compiled peer compiles here: its compile time
            self.sync()
        except Exception as e:  # noqa: BLE001  (the user's model or a compile that fails: say why, time the rest)
            ready.unavailable[job.peer] = {EXAMPLE: f"setup failed: {failure_reason(e)}"}
            return ready
        if job.mode is not None:
            ready.compile_seconds[job.peer] = time.perf_counter() - t0
        leaves, _ = torch.utils._pytree.tree_flatten(out)
        ready.outputs[job.peer] = {EXAMPLE: flat_outputs(leaves)}
        if job.device == "cpu":
            ready.details["isa"] = ran_isa([run], (*TORCH_LIBRARIES, *((INDUCTOR,) if job.mode else ())), [])
        self.run = run
        self.calls = calls_per_batch(lambda calls: self.batch_ms(run, calls), job.number)
        return ready

    def time_ms(self, _name: str, _tokens: int) -> float:
        return self.batch_ms(self.run, self.calls)
