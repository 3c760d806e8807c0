"""The exported graph behind a torch module file's Relax module: every Relax binding that holds an FX node's value
is named after that node (``mean``, ``rsqrt``, ``mul_5``), and each node keeps what torch.export recorded about it
(its op, the user's source line, the ``nn.Module`` it ran in), so a kernel of the build can be named back to the
op and the line that wrote it (``localize --module``, ``minimize``).

TVM's ``from_exported_program`` names every binding ``lv``; its importer keeps an FX node -> Relax var table
while it translates, which this module reads (the one private name it uses, ``_translate_fx_graph``) and then
renames those bindings. The names survive legalisation and fusion: a fused kernel's call in ``main`` binds the
var of the last op of its group.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import tvm
from tvm import relax


@dataclasses.dataclass(frozen=True)
class GraphNode:
    """One FX node of the exported (decomposed) graph: its name, op, the user's source line
    (``file:line: code``, None when torch.export recorded none) and the ``nn.Module`` path it ran in."""

    name: str
    op: str
    source: str | None
    module: str | None

    def describe(self) -> str:
        where = f" in {self.module}" if self.module else ""
        line = f" at {self.source}" if self.source else " (no source line recorded)"
        return f"{self.name} ({self.op}){where}{line}"


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)(?:\n[ \t]*(?!File ")(.*))?')


def source_line(node, path: Path) -> str | None:
    """Where the user wrote ``node``: the last frame of ``path`` in its stack trace (else its last frame), as
    ``FILE:LINE in FUNC: CODE``; None when torch.export recorded none."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return None
    file, line, func, code = ([f for f in frames if Path(f[0]).resolve() == path] or frames)[-1]
    return f"{file}:{line} in {func}: {code.strip()}"


def graph_node(node, user_file: Path) -> GraphNode:
    stack = node.meta.get("nn_module_stack") or {}
    module = None
    if stack:
        path, cls = list(stack.values())[-1]
        module = f"{path or 'model'} ({getattr(cls, '__name__', str(cls).rsplit('.', 1)[-1])})"
    return GraphNode(node.name, str(node.target), source_line(node, user_file), module)


@relax.expr_functor.mutator
class _Rename(relax.PyExprMutator):
    """Each binding of ``names`` (var -> new name) rebound to a var of that name, its uses following."""

    def __init__(self, names: dict, mod: tvm.IRModule):
        super().__init__(mod)
        self.names = names

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        name = self.names.get(binding.var)
        if name is None:
            super().visit_var_binding_(binding)
            return
        value = self.visit_expr(binding.value)
        kind = relax.DataflowVar if isinstance(binding.var, relax.DataflowVar) else relax.Var
        var = kind(name, binding.var.ty)
        self.builder_.emit_normalized(relax.VarBinding(var, value))
        self.set_var_remap(binding.var, var)


@dataclasses.dataclass(frozen=True)
class ExportedGraph:
    """The decomposed program TVM imported (torch runs it node by node: ``node_values``) and its call nodes by
    name."""

    program: object  # torch.export.ExportedProgram
    nodes: dict[str, GraphNode]


def import_named(program, user_file: Path, custom_convert_map: dict) -> tuple[tvm.IRModule, ExportedGraph]:
    """The importer's ``from_exported_program(program, keep_params_as_input=True, custom_convert_map=...)`` of an
    already decomposed ``program``, with the bindings named after their FX nodes, and the graph it imported."""
    from tvm.relax.frontend.torch import exported_program_translator as ept

    table: dict = {}

    class Importer(ept.ExportedProgramImporter):
        def _translate_fx_graph(self, graph_module, nodes, inputs_vars, custom_ops=None):
            out = super()._translate_fx_graph(graph_module, nodes, inputs_vars, custom_ops)
            table.update(self.env)
            return out

    mod = Importer().from_exported_program(program, True, False, False, custom_convert_map)
    nodes = {n.name: graph_node(n, user_file) for n in program.graph.nodes if n.op == "call_function"}
    names = {var: node.name for node, var in table.items()
             if node.name in nodes and isinstance(var, relax.Var) and var.name != node.name}
    main = _Rename(names, mod).visit_expr(mod["main"])
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    out["main"] = main
    return out, ExportedGraph(program, nodes)


def node_values(graph: ExportedGraph, inputs: tuple) -> dict:
    """Every node's value when torch runs the decomposed graph on ``inputs`` (the user inputs, torch tensors):
    name -> tensor (a parameter's, an input's; a node with several results: the tuple; a size: the int)."""
    import torch

    program = graph.program
    kinds = torch.export.graph_signature.InputKind
    user = iter(inputs)
    args = []
    for spec in program.graph_signature.input_specs:
        if spec.kind == kinds.USER_INPUT:
            args.append(next(user))
        elif spec.target in program.state_dict:
            args.append(program.state_dict[spec.target])
        else:
            args.append(program.constants[spec.target])
    values: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if n.op in ("placeholder", "call_function"):
                values[n.name] = out
            return out

    with torch.no_grad():
        Recorder(program.graph_module).run(*args)
    return values
