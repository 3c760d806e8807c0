"""The user's own model, ``--module FILE.py``: the file loaded, its contract checked, its Relax module made.

``FILE.py`` defines either

- ``model()`` -> ``torch.nn.Module`` and ``example_inputs()`` -> tuple of tensors (optional ``dynamic_shapes()``
  in ``torch.export``'s form): exported with ``torch.export`` and imported by TVM's ``from_exported_program``
  (parameters kept as ``main``'s inputs after the example inputs, the torch frontend's converters); or
- ``module()`` -> ``tvm.IRModule`` with a Relax ``main`` and ``example_inputs()`` -> tuple of numpy arrays.

Everything the file does is user code, run in a child process (``support.user_process``): an exception, an exit,
a signal or a wrong return is one line naming the file, the step and the line (``UsageError``), never a traceback
from deep inside the build or an exit code of the user's choosing.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import warnings
from pathlib import Path

import numpy as np
import tvm
from tvm import relax, tirx

from ..contract.cases import TensorDecl
from ..ir.graph_nodes import ExportedGraph
from ..ir.module_sizes import sized_inputs
from ..ir.op_coverage import import_program, refuse_custom_ops
from ..support.errors import UsageError
from ..support.lazy import lazy_module
from ..support.native_log import native_stderr
from ..support.user_code import import_user_file, require_python_file
from ..support.user_process import in_child

torch = lazy_module("torch")

TORCH, TVMSCRIPT = "torch", "tvmscript"  # the two kinds of module file


@dataclasses.dataclass(frozen=True)
class ModuleFile:
    """A loaded module file: its Relax module (``main(*inputs, *params)``), every input of ``main`` as a spec
    (symbolic sizes named as in the module), the example inputs and, for a torch model, its parameters, its
    outputs run eagerly (the golden), its exported program (its state dict feeds the bench's peers; torch runs it
    for a reference at another size) and that program's nodes as the Relax bindings are named
    (``ir/graph_nodes.py``: ``localize --module``, ``minimize``)."""

    path: Path
    kind: str
    mod: tvm.IRModule
    input_specs: dict[str, TensorDecl]
    output_specs: dict[str, TensorDecl]  # ``output0``, ``output1``...: ``main``'s results in order
    returns_tuple: bool                 # whether main returns a tuple (outputs ``output0``...) or one tensor
    num_input: int                      # the leading inputs that are activations (the rest: parameters)
    examples: dict[str, np.ndarray]     # every input of ``main``: example inputs, then parameters
    reference: dict[str, np.ndarray] | None = None  # a torch model's outputs run eagerly on the example inputs
    program: object | None = dataclasses.field(default=None, repr=False, compare=False)  # its ExportedProgram
    graph: ExportedGraph | None = dataclasses.field(default=None, repr=False, compare=False)  # its nodes, named
    dim_names: dict[str, str] = dataclasses.field(default_factory=dict)  # torch's symbol -> the user's Dim name

    @property
    def name(self) -> str:
        """How runs, folders and messages name it (run folder names are lower case, words joined by ``-``)."""
        return "module-" + self.path.stem.lower().replace("_", "-")

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(self.output_specs)

    @property
    def symbolic_dims(self) -> list[str]:
        """The symbolic sizes of ``main``'s inputs and outputs, by name."""
        specs = [*self.input_specs.values(), *self.output_specs.values()]
        return sorted({d for spec in specs for d in spec.shape if isinstance(d, str)})

    @property
    def activation_names(self) -> tuple[str, ...]:
        return tuple(self.input_specs)[: self.num_input]

    @property
    def dim_bounds(self) -> dict[str, tuple[int, int | None]]:
        """Each symbolic size's bounds as the import recorded them (``dynamic_shapes()``'s ``Dim`` min/max)."""
        attrs = self.mod["main"].attrs
        low = attrs.get("tir_var_lower_bound", {}) if attrs is not None else {}
        high = attrs.get("tir_var_upper_bound", {}) if attrs is not None else {}
        return {d: (int(low[d]) if d in low else 1, int(high[d]) if d in high else None) for d in self.symbolic_dims}

    def inputs_at(self, shapes: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
        """Every input of ``main`` with the activations at ``shapes`` (``ir/module_sizes.py``)."""
        return sized_inputs(self.input_specs, self.activation_names, self.examples, shapes, self.dim_bounds, seed,
                            self.dim_names)

    @property
    def example_shapes(self) -> dict[str, list[int]]:
        """The example activations' shapes: the sizes a check runs (results and run folders show them)."""
        return {name: list(self.examples[name].shape) for name in self.activation_names}


def load_module_file(path) -> ModuleFile:
    """Load ``path`` and make its Relax module (one-line ``UsageError`` for every broken contract). The file runs
    in a child process (``support.user_process``): this process gets its exported program or IRModule, the example
    inputs as they were before the model ran, and the reference outputs, and nothing the file does can end it,
    change its folder or its inputs."""
    if not isinstance(path, (str, Path)):
        raise UsageError(f"module must be a path to a .py file, got {type(path).__name__} {path!r}")
    path = Path(path).resolve()
    require_python_file(path, "module file")
    _import_torch_export_before_the_fork(path)
    with native_stderr(), in_child(path, _run_file) as folder:
        meta = json.loads((folder / META).read_text())
        arrays = _read_arrays(folder, meta)
        if meta["kind"] == TORCH:
            loaded = _from_torch(path, torch.export.load(folder / PROGRAM), arrays["inputs"], arrays["reference"])
            return dataclasses.replace(loaded, dim_names=meta["dim_names"])
        return _from_tvmscript(path, tvm.ir.load_json((folder / IR).read_text()), arrays["inputs"])


META, ARRAYS, PROGRAM, IR = "meta.json", "arrays.npz", "program.pt2", "module.json"  # what the child writes
TORCH_EXPORT_MODULES = ("torch.export", "torch._export.serde.serialize", "torch.export.pt2_archive._package")
_IMPORTS_TORCH = re.compile(r"^\s*(import|from)\s+torch\b", re.MULTILINE)


def _import_torch_export_before_the_fork(path: Path) -> None:
    """The child exports and saves a torch model and this process loads it, each with the same torch modules
    (dynamo, the serialiser: about 1.5 s to import on 2 cores). Imported here, before the fork, the child inherits
    them instead of importing them too: a fresh process loads ``examples/torch_mlp_block.py`` in 2.3-2.5 s,
    against 4.9. Only where the file imports torch (read from its text): a TVMScript file needs none of them, and
    a wrong guess costs time, never a result."""
    try:
        if not _IMPORTS_TORCH.search(path.read_text(errors="replace")):
            return
    except OSError:
        return  # the child reads it and says why it cannot
    for name in TORCH_EXPORT_MODULES:
        importlib.import_module(name)


def _run_file(child) -> None:
    """In the child: import the file, call its functions, export a torch model and run it eagerly on a copy of the
    example inputs; write what the parent needs into ``child.folder``."""
    path, folder = child.path, child.folder
    child.stage(" (loading it)")
    file = import_user_file(path, "module file")
    has = {name: callable(getattr(file, name, None)) for name in ("model", "module", "example_inputs")}
    if has["model"] and has["module"]:
        raise UsageError(f"module file {path} defines both model() and module(): define one")
    if not (has["model"] or has["module"]):
        raise UsageError(f"module file {path} defines neither model() (a torch.nn.Module) nor module() (a "
                         "tvm.IRModule)")
    if not has["example_inputs"]:
        raise UsageError(f"module file {path} defines no example_inputs() function")
    if has["module"]:
        child.stage(": module()")
        mod = file.module()
        if not isinstance(mod, tvm.IRModule):
            raise UsageError(f"module file {path}: module() must return a tvm.IRModule, got {type(mod).__name__}")
        _main(path, mod)
        child.stage(": example_inputs()")
        examples = _tuple_of(path, file.example_inputs(), "example_inputs()", (np.ndarray,), "numpy arrays")
        (folder / IR).write_text(tvm.ir.save_json(mod))
        _write_arrays(folder, TVMSCRIPT, {"inputs": [np.array(a) for a in examples]})
        return
    child.stage(": model()")
    model = file.model()
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"module file {path}: model() must return a torch.nn.Module, got {type(model).__name__}")
    model = model.eval()
    child.stage(": example_inputs()")
    examples = _tuple_of(path, file.example_inputs(), "example_inputs()", (torch.Tensor,), "torch tensors")
    inputs = [_to_numpy(path, t, f"example_inputs()[{i}]") for i, t in enumerate(examples)]  # before the model runs
    dynamic = None
    if callable(getattr(file, "dynamic_shapes", None)):
        child.stage(": dynamic_shapes()")
        dynamic = file.dynamic_shapes()
    child.stage(": torch.export of model()")
    with warnings.catch_warnings():  # torch's own deprecations inside export: not the user's
        warnings.filterwarnings("ignore", category=FutureWarning)
        program = torch.export.export(model, tuple(to_torch(a) for a in inputs), dynamic_shapes=dynamic)
        refuse_custom_ops(program, path)
        torch.export.save(program, folder / PROGRAM)
    child.stage(": model() run eagerly on example_inputs()")
    with torch.no_grad():
        out = model(*(to_torch(a) for a in inputs))
    leaves, _ = torch.utils._pytree.tree_flatten(out)
    reference = [_to_numpy(path, t, f"model()'s output {i}") for i, t in enumerate(leaves)]
    _write_arrays(folder, TORCH, {"inputs": inputs, "reference": reference}, dim_names=_dim_names(program, dynamic))


def _dim_names(program, dynamic) -> dict[str, str]:
    """torch's symbol of each size ``dynamic_shapes()`` named with a ``torch.export.Dim`` -> that name (``s77`` ->
    ``seq``): what ``--shape``'s messages say. Positional (a tuple or list a user input each) or keyed by the
    inputs' names, as ``torch.export`` takes it."""
    user_inputs = list(program.graph_signature.user_inputs)
    if isinstance(dynamic, dict):
        dynamic = [dynamic.get(name) for name in user_inputs]
    if not isinstance(dynamic, (list, tuple)):
        return {}
    values = {n.name: n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"}
    names = {}
    for name, dims in zip(user_inputs, dynamic):
        shape = getattr(values.get(name), "shape", None)
        items = dims.items() if isinstance(dims, dict) else enumerate(dims) if isinstance(dims, (list, tuple)) else ()
        for d, dim in items:
            symbol = str(shape[d]) if shape is not None and isinstance(d, int) and 0 <= d < len(shape) else ""
            if isinstance(getattr(dim, "__name__", None), str) and symbol.isidentifier():
                names[symbol] = dim.__name__
    return names


def _to_numpy(path: Path, t, what: str) -> np.ndarray:
    """A dense tensor as a numpy array of its own (bfloat16 as ml_dtypes'); refused in one line otherwise."""
    if not isinstance(t, torch.Tensor):
        raise UsageError(f"module file {path}: {what} is {type(t).__name__}, not a torch tensor")
    if t.layout != torch.strided or t.device.type == "meta":
        raise UsageError(f"module file {path}: {what} is a {t.layout} tensor on {t.device.type}: give dense "
                         "tensors with values")
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy().copy()


def to_torch(a: np.ndarray):
    """A numpy array (ml_dtypes' bfloat16 included) as a torch tensor of its own."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a.copy())


def _write_arrays(folder: Path, kind: str, groups: dict[str, list[np.ndarray]], **meta) -> None:
    """Arrays as raw bytes (ml_dtypes' bfloat16 has no .npy form) with their dtypes and shapes in ``meta.json``
    (``meta``: more of what the parent needs)."""
    flat = {f"{g}{i}": np.frombuffer(np.ascontiguousarray(a).tobytes(), np.uint8)
            for g, arrays in groups.items() for i, a in enumerate(arrays)}
    np.savez(folder / ARRAYS, **flat)
    (folder / META).write_text(json.dumps({"kind": kind, "groups": {
        g: [[a.dtype.name, list(a.shape)] for a in arrays] for g, arrays in groups.items()}, **meta}))


def _read_arrays(folder: Path, meta: dict) -> dict[str, list[np.ndarray]]:
    import ml_dtypes

    with np.load(folder / ARRAYS, allow_pickle=False) as raw:
        groups = {g: [raw[f"{g}{i}"].view(getattr(ml_dtypes, dtype, None) or np.dtype(dtype)).reshape(shape)
                      for i, (dtype, shape) in enumerate(entries)] for g, entries in meta["groups"].items()}
    for a in (a for arrays in groups.values() for a in arrays):
        a.flags.writeable = False  # the file's examples and reference, as it gave them: never written
    return groups


def _tuple_of(path: Path, value, what: str, kinds: tuple, kind_name: str) -> tuple:
    if isinstance(value, list):
        value = tuple(value)
    if isinstance(value, kinds):
        value = (value,)
    if not isinstance(value, tuple) or not value or not all(isinstance(v, kinds) for v in value):
        got = type(value).__name__ if not isinstance(value, tuple) else \
            ", ".join(type(v).__name__ for v in value) or "an empty tuple"
        raise UsageError(f"module file {path}: {what} must return a tuple of {kind_name}, got {got}")
    return value


def _spec(name: str, ty, path: Path, what: str) -> TensorDecl:
    """One tensor of ``main`` as a spec: each symbolic size by its variable's name (``validate_inputs`` binds
    it)."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise UsageError(f"module file {path}: main's {what} {name!r} is not a tensor of known shape ({ty})")
    shape = tuple(int(d) if isinstance(d, tirx.IntImm) else str(d) for d in ty.shape)
    return TensorDecl(name, shape, str(ty.dtype))


def _specs(func: relax.Function, path: Path) -> dict[str, TensorDecl]:
    return {p.name: _spec(p.name, p.ty, path, "input") for p in func.params}


def _outputs(func: relax.Function, path: Path) -> tuple[dict[str, TensorDecl], bool]:
    """``main``'s outputs as specs (``output0``, ``output1``...) and whether it returns a tuple."""
    ret = func.ret_ty
    is_tuple = isinstance(ret, relax.TupleType)
    types = list(ret.fields) if is_tuple else [ret]
    return {f"output{i}": _spec(f"output{i}", ty, path, "output") for i, ty in enumerate(types)}, is_tuple


def _from_torch(path: Path, program, examples: list[np.ndarray], reference: list[np.ndarray]) -> ModuleFile:
    mod, graph = import_program(program, path)  # an operator it cannot import or lower: a UsageError naming it
    mod, params = relax.frontend.detach_params(mod)
    func = mod["main"]
    num_input = len(examples)
    specs = _specs(func, path)
    outputs, returns_tuple = _outputs(func, path)
    if len(reference) != len(outputs):
        raise UsageError(f"module file {path}: model() returned {len(reference)} tensors eagerly, the exported "
                         f"program {len(outputs)}")
    values = [*examples, *(p.numpy() for p in params.get("main", []))]
    for v in values:
        v.flags.writeable = False  # ours, never written: packing them is no change to tell anyone of
    mod["main"] = func.with_attr("num_input", num_input)
    return ModuleFile(path, TORCH, mod, specs, outputs, returns_tuple, num_input, dict(zip(specs, values)),
                      dict(zip(outputs, reference)), program, graph)


def _main(path: Path, mod) -> relax.Function:
    main = next((f for gv, f in mod.functions_items() if gv.name_hint == "main"), None)
    if not isinstance(main, relax.Function):
        raise UsageError(f"module file {path}: module() has no Relax function 'main'")
    return main


def _from_tvmscript(path: Path, mod, examples: list[np.ndarray]) -> ModuleFile:
    main = _main(path, mod)
    specs = _specs(main, path)
    if len(examples) != len(specs):
        raise UsageError(f"module file {path}: example_inputs() returned {len(examples)} arrays, main takes "
                         f"{len(specs)} ({', '.join(specs)})")
    num_input = int(main.attrs["num_input"]) if main.attrs is not None and "num_input" in main.attrs else len(specs)
    return ModuleFile(path, TVMSCRIPT, mod, specs, *_outputs(main, path), num_input, dict(zip(specs, examples)))
