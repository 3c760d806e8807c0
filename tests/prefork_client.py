"""The ``python`` / ``mtp-tvm`` shims' client of the prefork server (``tests/prefork.py``): standard library only,
started with ``python -S -I`` (a few ms).

``prefork_client.py SOCKET console ARGS``: the console script ``mtp-tvm ARGS``. ``prefork_client.py SOCKET python
ARGS``: ``python ARGS`` where ARGS is ``-c CODE ...``, ``-m mtp_tvm ...`` or ``SCRIPT ...``; anything else (an
interpreter option, another module) execs a plain ``python``, since the server has not imported it."""

import json
import os
import signal
import socket
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def forkable(mode: str, args: list[str]) -> bool:
    if mode == "console":
        return True
    if not args:
        return False
    if args[0] == "-c":
        return len(args) > 1
    if args[0] == "-m":
        return args[1:2] == ["mtp_tvm"]
    return not args[0].startswith("-") and os.path.isfile(args[0])


def main(argv: list[str]) -> None:
    path, mode, args = argv[1], argv[2], argv[3:]
    if not forkable(mode, args):
        os.execv(sys.executable, [sys.executable, *args])
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = json.dumps({"mode": mode, "argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    message = len(request).to_bytes(8, "big") + request
    sent = socket.send_fds(conn, [message], [0, 1, 2])
    conn.sendall(message[sent:])
    for signum in FORWARDED:
        signal.signal(signum, lambda s, _f: conn.sendall(f"sig {s}\n".encode()))
    lines = conn.makefile("r")
    for line in lines:
        if line.startswith("exit "):
            code = os.waitstatus_to_exitcode(int(line[5:]))
            if code < 0:  # killed by a signal: so is this process
                if -code != signal.SIGKILL:
                    signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            sys.exit(code)
    print("prefork: the server went away before the command ended", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main(sys.argv)
