"""A build's ``main`` timed on a remote device through a TVM RPC tracker (``bench --rpc-tracker``), the way
``tune`` measures candidates: the library is exported here, uploaded to a server registered under the key,
loaded there, and timed with the remote ``time_evaluator`` on ``main``'s arguments made here (the weights packed
by ``main_transform_params`` here: the RPC call cannot carry its tuple argument), copied to the remote device
once per token count T.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import tvm
from tvm import relax

from ..passes.target import is_gpu
from ..support.errors import UsageError
from .tune import parse_tracker, require_tracker

SESSION_TIMEOUT_S = 600  # one bench holds its server this long at most


class RemoteMain:
    """``main`` of one build, loaded on a server the tracker hands out for ``key``, with its arguments for each
    token count (``args``: T -> ``main``'s arguments made here) there."""

    def __init__(self, executable, target, args: dict[int, list], tracker: str, key: str):
        host, port = parse_tracker(tracker)
        require_tracker(host, port, key)  # fails in seconds, with one line, before anything is exported
        try:
            session = tvm.rpc.connect_tracker(host, port).request(key, session_timeout=SESSION_TIMEOUT_S)
        except (RuntimeError, OSError) as e:
            raise UsageError(f"RPC tracker {tracker} gave no server for {key!r}: {e}") from None
        with tempfile.TemporaryDirectory() as tmp:
            lib = Path(tmp) / "main.so"
            executable.export_library(str(lib))
            session.upload(str(lib))
        self.device = session.cuda() if is_gpu(target) else session.cpu()
        self.vm = relax.VirtualMachine(session.load_module(lib.name), self.device)
        self.args = {t: [tvm.runtime.tensor(a.numpy(), self.device) for a in t_args] for t, t_args in args.items()}
        self.session = session  # the server is held while this object lives

    def timer(self, tokens: int):
        """``time_ms(number)``: mean milliseconds per call over ``number`` calls at ``tokens``, measured on the
        remote device."""
        args = self.args[tokens]
        return lambda number: self.vm.time_evaluator("main", self.device, number=number, repeat=1)(*args).mean * 1e3
