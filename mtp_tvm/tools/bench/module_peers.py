"""``bench --module``'s torch peers in their worker process: the module file's own model, loaded with the
parameters the TVM build exported (``state_dict``), eagerly or through ``torch.compile`` (inductor, ``freezing``),
on the example activations (``tools/bench/module_bench.py``)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from ...support.user_code import load_user_file, run_user_code
from ...verify.comparators import flat_outputs
from .peer_worker import TorchWorker, as_torch, failure_reason
from .worker import EXAMPLE, InputFiles, Ready, calls_per_batch


@dataclasses.dataclass(frozen=True)
class ModulePeerJob:
    """The module file's torch model as ``peer`` runs it: eagerly (``mode`` None) or through ``torch.compile`` in
    ``mode`` ("default", "max-autotune"), its parameters from ``state_dict``, its example activations from
    ``inputs``, on ``device``, on ``threads`` torch threads."""

    peer: str
    mode: str | None
    path: str
    state_dict: str
    inputs: InputFiles
    device: str
    threads: int
    number: int | None

    def open(self) -> ModulePeerWorker:
        return ModulePeerWorker(self)


class ModulePeerWorker(TorchWorker):
    """The model prepared (loaded, compiled) by ``setup`` and timed by ``time_ms``."""

    def __init__(self, job: ModulePeerJob):
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
        self.run = run
        self.calls = calls_per_batch(lambda calls: self.batch_ms(run, calls), job.number)
        return ready

    def time_ms(self, _name: str, _tokens: int) -> float:
        return self.batch_ms(self.run, self.calls)
