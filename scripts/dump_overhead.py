"""What dumping every pass costs, against the plain build of the same case (docs/benchmarks.md, "Dump overhead").

    python scripts/dump_overhead.py [--case tail] [--preset flash] [--frontend tir] [--rounds 7]

The plain build is measured to a *runnable binary*: ``mtp_tvm.compile()`` plus the LLVM JIT that turns its
module into machine code (TVM defers that to the first call; ``relax.VirtualMachine`` forces it). A dumping
``compile(dump_passes=DIR)`` does both itself (every pass dumped, diffs, index, HTML, LLVM IR and assembly) and
returns a binary with its machine code already generated, so the two are the same work plus the dumps.
Plain and dumping runs are alternated and medians reported:

1. in process: the build to a runnable binary, plain vs dumping (the headline ratio); also ``compile()`` alone,
   whose plain figure leaves the JIT out;
2. end to end: the ``mtp-tvm check`` command a user runs (process start, imports, build, run, golden), plain
   vs ``--dump-passes``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _median(values) -> float:
    return statistics.median(values)


def in_process(case: str, preset: str, frontend: str, rounds: int, out: Path) -> dict:
    import tvm
    from tvm import relax

    import mtp_tvm

    mtp_tvm.compile(case=case, preset=preset, frontend=frontend)  # warm: kernels parsed, LLVM initialised
    times = {k: [] for k in ("plain_compile", "plain", "dump", "dump_build", "dump_write")}
    for _ in range(rounds):
        t = time.perf_counter()
        m = mtp_tvm.compile(case=case, preset=preset, frontend=frontend)
        times["plain_compile"].append(time.perf_counter() - t)
        relax.VirtualMachine(m.executable, tvm.cpu(0))
        times["plain"].append(time.perf_counter() - t)
        t = time.perf_counter()
        d = mtp_tvm.compile(case=case, preset=preset, frontend=frontend, dump_passes=out)
        times["dump"].append(time.perf_counter() - t)
        assert d._vm is not None, "a dumping CPU build returns its binary JIT-compiled"
        times["dump_build"].append(d.build_seconds)
        times["dump_write"].append(d.dump_seconds)
    return {k: _median(v) for k, v in times.items()}


def end_to_end(case: str, preset: str, frontend: str, rounds: int, out: Path) -> dict:
    base = [sys.executable, "-m", "mtp_tvm", "check", "--case", case, "--preset", preset, "--frontend", frontend]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    times = {"plain": [], "dump": []}
    for _ in range(rounds):
        for mode, extra in (("plain", []), ("dump", ["--dump-passes", str(out)])):
            t = time.perf_counter()
            subprocess.run(base + extra, check=True, capture_output=True, env=env, cwd=ROOT)
            times[mode].append(time.perf_counter() - t)
    return {k: _median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="tail")
    ap.add_argument("--preset", default="flash")
    ap.add_argument("--frontend", default="tir")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ip = in_process(a.case, a.preset, a.frontend, a.rounds, Path(tmp))
        e2e = end_to_end(a.case, a.preset, a.frontend, max(a.rounds // 2, 1), Path(tmp))
    print(f"{a.case} / {a.preset} / {a.frontend} on llvm, medians of {a.rounds} alternated rounds")
    print(f"to a runnable binary: plain {ip['plain']:.3f} s (compile {ip['plain_compile']:.3f} s + JIT), dumping "
          f"{ip['dump']:.3f} s -> {ip['dump'] / ip['plain']:.2f}x  (dumping run: build {ip['dump_build']:.3f} s + "
          f"dumps with the JIT meanwhile {ip['dump_write']:.3f} s)")
    print(f"compile() alone:      plain {ip['plain_compile']:.3f} s (no JIT), dumping {ip['dump']:.3f} s (with it) "
          f"-> {ip['dump'] / ip['plain_compile']:.2f}x")
    print(f"mtp-tvm check:        plain {e2e['plain']:.2f} s, --dump-passes {e2e['dump']:.2f} s -> "
          f"{e2e['dump'] / e2e['plain']:.2f}x")

if __name__ == "__main__":
    main()
