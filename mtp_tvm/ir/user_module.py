"""The user's own model, ``--module FILE.py``: the file loaded, its contract checked, its Relax module made.

``FILE.py`` defines either

- ``model()`` -> ``torch.nn.Module`` and ``example_inputs()`` -> tuple of tensors (optional ``dynamic_shapes()``
  in ``torch.export``'s form): exported with ``torch.export`` and imported by TVM's ``from_exported_program``
  (parameters kept as ``main``'s inputs after the example inputs, the torch frontend's converters); or
- ``module()`` -> ``tvm.IRModule`` with a Relax ``main`` and ``example_inputs()`` -> tuple of numpy arrays.

Everything the file does is user code: an exception, a ``sys.exit`` or a wrong return is one line naming the
file and what is missing or wrong (``UsageError``), never a traceback from deep inside the build.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import numpy as np
import tvm
from tvm import relax, tirx

from ..contract.cases import TensorSpec
from ..ir.op_coverage import import_program
from ..support.errors import UsageError
from ..support.lazy import lazy_module
from ..support.user_code import load_user_file, run_user_code

torch = lazy_module("torch")

TORCH, TVMSCRIPT = "torch", "tvmscript"  # the two kinds of module file


@dataclasses.dataclass(frozen=True)
class UserModule:
    """A loaded module file: its Relax module (``main(*inputs, *params)``), every input of ``main`` as a spec
    (symbolic sizes named as in the module), the example inputs and, for a torch model, its parameters and the
    model itself (the golden runs it)."""

    path: Path
    kind: str
    mod: tvm.IRModule
    input_specs: dict[str, TensorSpec]
    output_specs: dict[str, TensorSpec]  # ``output0``, ``output1``...: ``main``'s results in order
    returns_tuple: bool                 # whether main returns a tuple (outputs ``output0``...) or one tensor
    num_input: int                      # the leading inputs that are activations (the rest: parameters)
    examples: dict[str, np.ndarray]     # every input of ``main``: example inputs, then parameters
    model: object | None = dataclasses.field(default=None, repr=False, compare=False)  # torch.nn.Module

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
    def example_shapes(self) -> dict[str, list[int]]:
        """The example activations' shapes: the sizes a check runs (results and run folders show them)."""
        return {name: list(self.examples[name].shape) for name in self.activation_names}


def _call(path: Path, file, name: str):
    return run_user_code(f"module file {path}: {name}()", getattr(file, name))


def load_user_module(path) -> UserModule:
    """Load ``path`` and make its Relax module (one-line ``UsageError`` for every broken contract)."""
    if not isinstance(path, (str, Path)):
        raise UsageError(f"module must be a path to a .py file, got {type(path).__name__} {path!r}")
    path = Path(path).resolve()
    file = load_user_file(path, "module file")
    has = {name: callable(getattr(file, name, None)) for name in ("model", "module", "example_inputs")}
    if has["model"] and has["module"]:
        raise UsageError(f"module file {path} defines both model() and module(): define one")
    if not (has["model"] or has["module"]):
        raise UsageError(f"module file {path} defines neither model() (a torch.nn.Module) nor module() (a "
                         "tvm.IRModule)")
    if not has["example_inputs"]:
        raise UsageError(f"module file {path} defines no example_inputs() function")
    return _from_torch(path, file) if has["model"] else _from_tvmscript(path, file)


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


def _spec(name: str, ty, path: Path, what: str) -> TensorSpec:
    """One tensor of ``main`` as a spec: each symbolic size by its variable's name (``validate_inputs`` binds
    it)."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise UsageError(f"module file {path}: main's {what} {name!r} is not a tensor of known shape ({ty})")
    shape = tuple(int(d) if isinstance(d, tirx.IntImm) else str(d) for d in ty.shape)
    return TensorSpec(name, shape, str(ty.dtype))


def _specs(func: relax.Function, path: Path) -> dict[str, TensorSpec]:
    return {p.name: _spec(p.name, p.ty, path, "input") for p in func.params}


def _outputs(func: relax.Function, path: Path) -> tuple[dict[str, TensorSpec], bool]:
    """``main``'s outputs as specs (``output0``, ``output1``...) and whether it returns a tuple."""
    ret = func.ret_ty
    is_tuple = isinstance(ret, relax.TupleType)
    types = list(ret.fields) if is_tuple else [ret]
    return {f"output{i}": _spec(f"output{i}", ty, path, "output") for i, ty in enumerate(types)}, is_tuple


def _from_torch(path: Path, file) -> UserModule:
    model = _call(path, file, "model")
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"module file {path}: model() must return a torch.nn.Module, got {type(model).__name__}")
    model = model.eval()
    examples = _tuple_of(path, _call(path, file, "example_inputs"), "example_inputs()", (torch.Tensor,),
                         "torch tensors")
    dynamic = _call(path, file, "dynamic_shapes") if callable(getattr(file, "dynamic_shapes", None)) else None

    def export():
        with warnings.catch_warnings():  # torch's own deprecations inside export: not the user's
            warnings.filterwarnings("ignore", category=FutureWarning)
            return torch.export.export(model, examples, dynamic_shapes=dynamic)

    program = run_user_code(f"module file {path}: torch.export of model()", export)
    mod = import_program(program, path)  # an operator it cannot import or lower: a UsageError naming it
    mod, params = relax.frontend.detach_params(mod)
    func = mod["main"]
    num_input = len(examples)
    specs = _specs(func, path)
    values = [t.detach().cpu().numpy() if t.dtype != torch.bfloat16 else _bf16(t) for t in examples]
    values += [p.numpy() for p in params.get("main", [])]
    mod["main"] = func.with_attr("num_input", num_input)
    return UserModule(path, TORCH, mod, specs, *_outputs(func, path), num_input, dict(zip(specs, values)), model)


def _bf16(t) -> np.ndarray:
    import ml_dtypes

    return t.float().detach().cpu().numpy().astype(ml_dtypes.bfloat16)


def _from_tvmscript(path: Path, file) -> UserModule:
    mod = _call(path, file, "module")
    if not isinstance(mod, tvm.IRModule):
        raise UsageError(f"module file {path}: module() must return a tvm.IRModule, got {type(mod).__name__}")
    main = next((f for gv, f in mod.functions_items() if gv.name_hint == "main"), None)
    if not isinstance(main, relax.Function):
        raise UsageError(f"module file {path}: module() has no Relax function 'main'")
    examples = _tuple_of(path, _call(path, file, "example_inputs"), "example_inputs()", (np.ndarray,),
                         "numpy arrays")
    specs = _specs(main, path)
    if len(examples) != len(specs):
        raise UsageError(f"module file {path}: example_inputs() returned {len(examples)} arrays, main takes "
                         f"{len(specs)} ({', '.join(specs)})")
    num_input = int(main.attrs["num_input"]) if main.attrs is not None and "num_input" in main.attrs else len(specs)
    return UserModule(path, TVMSCRIPT, mod, specs, *_outputs(main, path), num_input, dict(zip(specs, examples)))
