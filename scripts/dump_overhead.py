"""What dumping every pass costs, against the plain build of the same case (docs/benchmarks.md, "Dump overhead").

    python scripts/dump_overhead.py [--case tail] [--preset flash] [--frontend tir] [--rounds 5]

Two measurements, plain and dumping runs alternated, medians reported:

1. in process: ``mtp_tvm.compile()`` wall time, plain vs ``dump_passes=DIR`` (every pass dumped, diffs, index,
   HTML, LLVM IR and assembly), with the dumping run split into its build and its writing, and the writing's
   share for the assembly (one more LLVM backend run) measured on its own;
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
    import mtp_tvm

    mtp_tvm.compile(case=case, preset=preset, frontend=frontend)  # warm: kernels parsed, LLVM initialised
    plain, dump, dump_build, dump_write, asm = [], [], [], [], []
    for _ in range(rounds):
        t = time.perf_counter()
        m = mtp_tvm.compile(case=case, preset=preset, frontend=frontend)
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        d = mtp_tvm.compile(case=case, preset=preset, frontend=frontend, dump_passes=out)
        dump.append(time.perf_counter() - t)
        dump_build.append(d.build_seconds)
        dump_write.append(d.dump_seconds)
        llvm = next(mod for mod in [m.executable.mod, *m.executable.mod.imports] if mod.kind == "llvm")
        t = time.perf_counter()
        llvm.inspect_source("asm")
        asm.append(time.perf_counter() - t)
    return {"plain": _median(plain), "dump": _median(dump), "dump_build": _median(dump_build),
            "dump_write": _median(dump_write), "asm": _median(asm)}


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
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ip = in_process(a.case, a.preset, a.frontend, a.rounds, Path(tmp))
        e2e = end_to_end(a.case, a.preset, a.frontend, max(a.rounds // 2, 1), Path(tmp))
    print(f"{a.case} / {a.preset} / {a.frontend} on llvm, medians of {a.rounds} alternated rounds")
    print(f"compile():       plain {ip['plain']:.3f} s, dumping {ip['dump']:.3f} s -> {ip['dump'] / ip['plain']:.2f}x"
          f"  (dumping run: build {ip['dump_build']:.3f} s + writing {ip['dump_write']:.3f} s, of which the "
          f"assembly alone {ip['asm']:.3f} s)")
    print(f"without the assembly: {(ip['dump'] - ip['asm']) / ip['plain']:.2f}x")
    print(f"mtp-tvm check:   plain {e2e['plain']:.2f} s, --dump-passes {e2e['dump']:.2f} s -> "
          f"{e2e['dump'] / e2e['plain']:.2f}x")


if __name__ == "__main__":
    main()
