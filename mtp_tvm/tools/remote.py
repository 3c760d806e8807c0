"""TVM RPC, shared by ``tune`` and ``bench``: the tracker checked before any work (``parse_tracker``,
``require_tracker``: one line, in seconds, where MetaSchedule would retry forever), and a build's ``main`` timed
on a remote device through a TVM RPC tracker (``bench --rpc-tracker``), the way
``tune`` measures candidates: the library is exported here, uploaded to a server registered under the key,
loaded there, and timed with the remote ``time_evaluator`` on ``main``'s arguments made here (the weights packed
by ``main_transform_params`` here: the RPC call cannot carry its tuple argument), copied to the remote device
once per token count T.
"""

from __future__ import annotations

import socket
import struct
import tempfile
from pathlib import Path

import tvm
from tvm import relax

from ..passes.target import is_gpu
from ..support.errors import UsageError

SESSION_TIMEOUT_S = 600  # one bench holds its server this long at most
TRACKER_TIMEOUT_S = 10  # connecting to the tracker and hearing its summary; MetaSchedule would retry forever


def parse_tracker(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); anything else is a one-line ``UsageError``."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--rpc-tracker must be HOST:PORT, got {address!r}")
    return host, int(port)


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
