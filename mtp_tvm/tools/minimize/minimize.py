"""``mtp-tvm minimize --module FILE.py``: the smallest piece of the user's exported graph that still fails
``check --module`` with the same build options (a pass plugin, a disabled pass, a schedule), written as a module
file of its own, as torch.compile's accuracy minifier does for Inductor. When the file's build itself fails, the
failure kept is that build failure, in the same pass on the same op (``BuildError.place`` less its binding, and
TVM's line), as torch's minifier does for compile errors.

A piece is a set of the graph's call nodes; a node left out whose value a kept node reads becomes an input of
the piece, fed the value torch computed there on the file's example inputs ("inputs recorded at the cut"; a
size or a scalar is written in as a constant; an input's symbolic sizes stay symbolic, under the user's ``Dim``
names and bounds, since a failure may need them). The piece's outputs are its nodes no other kept node reads. The
search starts from the first op ``localize --module`` names and everything it depends on (the whole graph when
no op differs, when that piece passes, or when the build fails), then delta debugging (Zeller's ddmin) over its
nodes: a chunk or its complement that still fails replaces the set, until no single node can go. Each try writes
the piece as a module file and checks it as ``check --module`` does (one export, import and build; no run folder,
no reproducer). A piece that cannot be made (a tuple cut in two) or built counts as passing: only a failure of the
check itself (or the same build failure) is kept.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import re
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ...compiler.arrays import to_numpy
from ...compiler.options import MODULE_FILES, DebugOptions, ModuleSpec
from ...ir.graph_nodes import ExportedGraph, node_values
from ...ir.module_file import TORCH, to_torch
from ...passes.target import require_runs_here
from ...support.atomic_file import write_user_file
from ...support.errors import BuildError, MtpError, UsageError
from ...support.lazy import lazy_module
from ...verify.module_golden import golden_check_module
from ...verify.subject import ModuleSubject, subject_of
from ...verify.tolerances import ModuleTolerance, Tolerance
from ..check.torch_reference import compare_with_torch

torch = lazy_module("torch")

_FILE = '''"""Minimised by mtp-tvm minimize from {origin}: {kept} of its {total} graph ops, which still fail
{failure} with {options}. The inputs are the values torch computed at the cut on the original's
example inputs; the ops are torch.export's (ATen), as the original's exported graph ran them."""

import base64
import io

import numpy as np
import torch
from torch import device, inf, nan  # noqa: F401 (names the generated forward may use)

_INPUTS = (
{blob}
)
_DTYPES = {dtypes!r}


class Minimized(torch.nn.Module):
{forward}


def model():
    return Minimized()


def example_inputs():
    arrays = np.load(io.BytesIO(base64.b64decode("".join(_INPUTS))))
    return tuple(torch.from_numpy(arrays[name]).to(getattr(torch, dtype)) for name, dtype in _DTYPES.items())
{dynamic}'''

_DYNAMIC = '''

def dynamic_shapes():
{dims}
    return {shapes}
'''

CHECK_FAILS = "`mtp-tvm check --module`"


class NotAPiece(Exception):
    """A set of nodes that cannot be written as a module file (why: its message)."""


def _dynamic_shapes(graph: ExportedGraph, inputs: list[str], dim_names: dict[str, str]) -> str:
    """The piece's ``dynamic_shapes()``: each input dim that is one of the program's symbols, as a ``Dim`` of the
    user's name (torch's symbol where it has none) and the program's bounds; empty when no dim is symbolic."""
    nodes = {n.name: n for n in graph.program.graph.nodes}
    bounds = {str(k): v for k, v in graph.program.range_constraints.items()}
    dims: dict[str, str] = {}
    shapes = []
    for name in inputs:
        shape = getattr(nodes[name].meta.get("val"), "shape", ())
        symbolic = {d: str(size) for d, size in enumerate(shape) if str(size) in bounds}
        for symbol in symbolic.values():
            low, high = bounds[symbol].lower, bounds[symbol].upper
            limits = "".join([f", min={int(low)}" if low >= 2 else "",
                              f", max={int(high)}" if getattr(high, "is_finite", True) and high < 2 ** 62 else ""])
            dims.setdefault(symbol, f"    {symbol} = torch.export.Dim({dim_names.get(symbol, symbol)!r}{limits})")
        shapes.append("{" + ", ".join(f"{d}: {symbol}" for d, symbol in symbolic.items()) + "}" if symbolic else "None")
    if not dims:
        return ""
    return _DYNAMIC.format(dims="\n".join(dims.values()), shapes="(" + ", ".join(shapes) + ",)")


def piece_source(graph: ExportedGraph, keep: list[str], values: dict, origin: str, options: str,
                 failure: str = CHECK_FAILS, dim_names: dict[str, str] | None = None) -> str:
    """The module file of the nodes ``keep`` (see the module docstring), which still fail ``failure``."""
    fx = torch.fx
    kept = [n for n in graph.program.graph.nodes if n.name in set(keep)]
    g = fx.Graph()
    env: dict = {}
    inputs: dict = {}
    for node in kept:
        for src in node.all_input_nodes:
            if src.name in env or src.name in keep:
                continue
            value = values.get(src.name)
            if isinstance(value, torch.Tensor):
                env[src.name] = g.placeholder(src.name)
                inputs[src.name] = value
            elif not isinstance(value, (int, float, bool)):
                raise NotAPiece(f"{node.name} reads {src.name}, a {type(value).__name__} that cannot be an input")
    for node in kept:
        env[node.name] = g.node_copy(node, lambda n: env[n.name] if n.name in env else values[n.name])
    read = {src.name for node in kept for src in node.all_input_nodes}
    sinks = [env[n.name] for n in kept if n.name not in read and isinstance(values.get(n.name), torch.Tensor)]
    if not sinks or not inputs:
        raise NotAPiece("no tensor goes in or comes out")
    g.output(tuple(sinks))
    code = fx.GraphModule(torch.nn.Module(), g).code.strip()
    buffer = io.BytesIO()
    np.savez(buffer, **{k: to_numpy(v.float() if v.dtype == torch.bfloat16 else v) for k, v in inputs.items()})
    text = base64.b64encode(buffer.getvalue()).decode()
    blob = "\n".join(f'    "{text[i:i + 100]}"' for i in range(0, len(text), 100))
    dtypes = {k: str(v.dtype).removeprefix("torch.") for k, v in inputs.items()}
    forward = "\n".join(f"    {line}".rstrip() for line in code.splitlines())
    return _FILE.format(origin=origin, kept=len(kept), total=len(graph.nodes), failure=failure, options=options,
                        blob=blob, dtypes=dtypes, forward=forward,
                        dynamic=_dynamic_shapes(graph, list(inputs), dim_names or {}))


def ddmin(items: list[str], fails) -> list[str]:
    """Zeller's delta debugging: a 1-minimal sublist of ``items`` for which ``fails`` holds (it holds for
    ``items``); order kept."""
    n = 2
    while len(items) >= 2:
        size = -(-len(items) // n)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        for candidate in chunks + [[x for x in items if x not in c] for c in chunks]:
            if candidate and len(candidate) < len(items) and fails(candidate):
                items, n = candidate, 2 if candidate in chunks else max(n - 1, 2)
                break
        else:
            if n >= len(items):
                return items
            n = min(len(items), 2 * n)
    return items


@dataclasses.dataclass(frozen=True)
class MinimizeResult:
    """The piece written: its nodes (by name, graph order), how many the graph and the start had, the tries, the
    failure it keeps (``check --module``, or the build's own failure)."""

    module: str
    out: Path
    nodes: tuple[str, ...]
    ops: tuple[str, ...]           # each kept node's ATen op
    graph_nodes: int
    start_nodes: int
    started_from: str              # what the search started from
    tries: int
    seconds: float
    failure: str = CHECK_FAILS

    def summary(self) -> str:
        fails = "still fail" if self.failure == CHECK_FAILS else f"still fail {self.failure}"
        return (f"minimize {self.module}: {len(self.nodes)} of {self.graph_nodes} graph ops {fails} "
                f"({self.started_from}: {self.start_nodes} ops; {self.tries} tries, {self.seconds:.0f}s)\n"
                f"  kept: {', '.join(f'{n} ({op})' for n, op in zip(self.nodes, self.ops))}\n"
                f"  written: {self.out} (mtp-tvm check --module {self.out} ... fails the same way)")


def _build_failure(error: BuildError) -> tuple[str, str]:
    """What makes two build failures the same: the pass and what it was processing (less the binding's name,
    which a piece may rename), and TVM's line."""
    return re.sub(r" \(binding [^)]*\)", "", error.place), error.cause


def _ancestors(graph: ExportedGraph, name: str) -> list[str]:
    """``name`` and the call nodes it depends on, in graph order."""
    nodes = {n.name: n for n in graph.program.graph.nodes}
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n in seen or n not in graph.nodes:
            continue
        seen.add(n)
        todo += [src.name for src in nodes[n].all_input_nodes]
    return [n for n in graph.nodes if n in seen]


def minimize_module(module: str | Path | ModuleSpec | ModuleSubject | None = None, debug: DebugOptions | None = None, *,
                    tolerance: Tolerance | ModuleTolerance | Mapping | None = None, out: str | Path | None = None,
                    log=print, **options) -> MinimizeResult:
    """Cut the module file ``module``'s exported graph down to the smallest piece whose ``check`` (same
    keywords: ``target``, ``schedule``, the fields of ``DebugOptions``; ``tolerance``) still fails, or whose build
    fails as the file's does, and write it to ``out`` (default ``<file>_min.py`` in the current folder) as a module
    file."""
    subject, debug = subject_of(module, debug, options, "minimize_module", MODULE_FILES)
    spec, tolerance = subject.spec, subject.tolerance(tolerance)
    out = Path(out) if out is not None else Path.cwd() / f"{Path(spec.module).stem}_min.py"
    if out.suffix != ".py":
        raise UsageError(f"--out {out}: a module file must end in .py")
    require_runs_here(spec.resolved_target)
    t0 = time.perf_counter()
    user = subject.loaded
    if user.kind != TORCH or user.graph is None:
        raise UsageError(f"minimize cuts a torch model's exported graph: {user.path.name} defines module() (a "
                         "TVMScript module)")
    log(f"[BUILD] {subject.describe()}: localize the first op that differs from torch")
    try:
        first, build_fails = compare_with_torch(subject.build(debug), tolerance).first, None
    except BuildError as e:
        first, build_fails = None, _build_failure(e)
        log(f"[MINIMIZE] its build fails {e.place or ''}: keep that failure ({e.cause})")
    graph = user.graph
    with tempfile.TemporaryDirectory(prefix="mtp-minimize-") as tmp:
        pieces = _Pieces(Path(tmp), spec, debug, tolerance, user, build_fails, log)
        start, where = list(graph.nodes), "the whole graph"
        if first is not None:
            start, where = _ancestors(graph, first.node.name), f"{first.node.name} and what it depends on"
            if not pieces.fails(start):
                start, where = list(graph.nodes), "the whole graph (the first differing op's piece passes)"
        if where.startswith("the whole graph") and not pieces.fails(start):
            raise UsageError(f"module file {user.path.name} does not fail {pieces.failure} as a piece of its own "
                             "graph with these options: nothing to minimize")
        kept = ddmin(start, pieces.fails)
    source = pieces.source(kept)
    write_user_file(out, lambda p: p.write_text(source), what="minimized module ")
    nodes = {n.name: n for n in graph.program.graph.nodes}
    return MinimizeResult(user.path.name, out, tuple(kept), tuple(str(nodes[n].target) for n in kept),
                          len(graph.nodes), len(start), where, pieces.tries, time.perf_counter() - t0,
                          pieces.failure)


class _Pieces:
    """The tries of one minimisation: a piece (a list of node names) written as a module file under ``folder``,
    loaded and built as ``check --module`` does (no run folder, no reproducer), and judged: it fails when its
    check fails, or, where the file's own build failed (``build_fails``), when its build fails the same way. Each
    piece is tried once."""

    def __init__(self, folder: Path, spec: ModuleSpec, debug: DebugOptions, tolerance: ModuleTolerance, user,
                 build_fails: tuple[str, str] | None, log):
        self.folder, self.spec, self.tolerance, self.user, self.build_fails, self.log = (
            folder, spec, tolerance, user, build_fails, log)
        self.debug = debug.replace(dump_passes=None)  # no run folder per try
        self.described = " ".join(["--schedule", spec.schedule, *self.debug.as_argv()])
        self.failure = CHECK_FAILS if build_fails is None else " ".join(
            filter(None, ("the build", build_fails[0], f"({build_fails[1]})")))
        self.values = node_values(user.graph, tuple(to_torch(user.examples[n]) for n in user.activation_names))
        self.tries = 0
        self.seen: dict[tuple[str, ...], bool] = {}

    def source(self, keep: list[str]) -> str:
        return piece_source(self.user.graph, keep, self.values, self.user.path.name, self.described, self.failure,
                            self.user.dim_names)

    def fails(self, keep: list[str]) -> bool:
        if tuple(keep) not in self.seen:
            self.seen[tuple(keep)] = self._try(keep)
        return self.seen[tuple(keep)]

    def _try(self, keep: list[str]) -> bool:
        self.tries += 1
        said = f"[MINIMIZE] try {self.tries}: {len(keep)} ops:"
        path = self.folder / f"piece{self.tries}.py"
        try:
            path.write_text(self.source(keep))
            built = ModuleSubject(dataclasses.replace(self.spec, module=path)).build(self.debug)
            passed = self.build_fails is not None or golden_check_module(built, self.tolerance, lambda *_: None).passed
        except BuildError as e:
            same = self.build_fails is not None and _build_failure(e) == self.build_fails
            self.log(f"{said} {'FAILS (the same build failure)' if same else f'not a failing piece ({e})'}")
            return same
        except (NotAPiece, MtpError) as e:
            self.log(f"{said} not a failing piece ({e})")
            return False
        self.log(f"{said} {'FAILS' if not passed else 'passes'}")
        return not passed
