"""The prefork server's shims behave as the programs they stand for: argv, cwd, environment, standard streams,
exit codes and signals reach the forked child and come back from it (``tests/prefork.py``)."""

import signal
import socket
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow  # the server imports TVM and torch (a few seconds, once per test process)

ECHO = """import os, sys
print(sys.argv[1:], os.getcwd(), os.environ["PREFORK_PROBE"], sys.stdin.read(), sys.path[0] == "", flush=True)
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def test_argv_cwd_environment_streams_and_exit_code_reach_the_child(prefork, tmp_path):
    out = subprocess.run([*prefork.python, "-c", ECHO, "7", "b"], cwd=tmp_path, input="typed",
                         env=prefork.env() | {"PREFORK_PROBE": "seen"}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 7
    assert out.stdout == f"['7', 'b'] {tmp_path} seen typed True\n" and out.stderr == "to stderr\n"


def test_a_script_and_an_uncaught_exception_end_as_python_ends(prefork, tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import sys\nprint(sys.argv, sys.path[0])\nraise ValueError('no')\n")
    out = subprocess.run([*prefork.python, str(script), "x"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == f"[{str(script)!r}, 'x'] {tmp_path}\n"
    assert out.stderr.startswith("Traceback") and out.stderr.endswith("ValueError: no\n")


def test_the_console_script_prints_what_the_installed_one_prints(prefork):
    plain = subprocess.run([f"{sys.prefix}/bin/mtp-tvm", "list", "--preset", "tiny"], capture_output=True, text=True)
    forked = subprocess.run(["mtp-tvm", "list", "--preset", "tiny"], env=prefork.env(), capture_output=True,
                            text=True, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    bad = subprocess.run(["mtp-tvm", "check", "--case", "nope"], env=prefork.env(), capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("mtp-tvm: error: unknown case 'nope'")


WAIT = """import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("got SIGTERM", flush=True), sys.exit(5)))
print("waiting", flush=True)
time.sleep(60)
"""


def test_a_signal_to_the_shim_reaches_the_child_and_a_killed_shim_takes_the_child_along(prefork, tmp_path):
    proc = subprocess.Popen([*prefork.python, "-c", WAIT], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "waiting\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 5 and proc.stdout.read() == "got SIGTERM\n"

    marker = tmp_path / "alive"
    proc = subprocess.Popen([*prefork.python, "-c", f"import time\nprint(1, flush=True)\ntime.sleep(2)\n"
                             f"open({str(marker)!r}, 'w')"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "1\n"
    proc.kill()
    proc.wait(timeout=30)
    time.sleep(3)
    assert not marker.exists()  # the child went with its shim

    proc = subprocess.Popen([*prefork.python, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGINT)"],
                            stderr=subprocess.PIPE, text=True)
    assert proc.wait(timeout=30) == -signal.SIGINT and "KeyboardInterrupt" in proc.stderr.read()


def test_another_interpreter_option_runs_a_plain_python(prefork):
    out = subprocess.run([*prefork.python, "-I", "-c", "import sys; print(sys.flags.isolated)"], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout == "1\n"


def test_a_client_gone_mid_request_leaves_the_server_serving(prefork):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as cut_short:
        cut_short.connect(str(prefork.socket))
        cut_short.sendall(b"\x00\x00")
    out = subprocess.run([*prefork.python, "-c", "print(2)"], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, "2\n")
