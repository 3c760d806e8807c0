"""``compile``: a case or a user's module file -> one TVM binary with typed input/output specs and ``run(dict) ->
dict``: a ``CompiledCase`` or a ``CompiledModule`` (``compiler.module_build``), both holding the same build record
(``compiler.compiled.Compiled``). A case's Relax module is built here (``ir``); either goes through
``compiler.compiled.build_ir`` (the named phases, the schedule applier, the pass recorder, the run folder).
"""

from __future__ import annotations

import dataclasses

import tvm

from ..contract.cases import ROWS, TOKENS, Case, TensorDecl
from ..contract.presets import Shapes, make_shapes
from ..ir.model import build_relax_module
from ..ir.module_file import ModuleFile
from ..passes.pipeline import plan_graph_capture
from ..passes.target import device_for, is_gpu, target_json
from ..schedule.apply import ApplySchedules
from ..schedule.files import TUNED
from ..schedule.tuned import tuned_dir
from ..support.errors import UsageError
from ..support.native_log import native_stderr
from ..support.timing import phase
from .compiled import Compiled, build_ir, finish_run
from .module_build import CompiledModule, compile_module_file
from .options import CUDA_GRAPH_ROWS, EITHER, BuildSpec, DebugOptions, ModuleSpec, Spec, split_options

NATIVE_LOG = "tvm.log"  # in the run folder: what TVM and LLVM printed themselves during the build


@dataclasses.dataclass
class CompiledCase(Compiled):
    """One built case. ``run`` takes any token count T (the binary's token dim is symbolic). What was asked is
    ``spec`` (its frontend and schedule are this build's); ``case``, ``shapes`` and ``target`` are it resolved."""

    case: Case
    shapes: Shapes
    spec: BuildSpec  # as asked (sizes may be None: defaults)

    @property
    def frontend(self) -> str:
        return self.spec.frontend

    @property
    def name(self) -> str:
        return self.case.name

    @property
    def input_specs(self) -> dict[str, TensorDecl]:
        return self.case.input_specs(self.shapes)

    @property
    def output_specs(self) -> dict[str, TensorDecl]:
        return self.case.output_specs(self.shapes)

    def _runtime(self):
        return self.executable, device_for(self.target), f"case {self.case.name!r}"

    @property
    def cuda_graph(self) -> bool:
        return self.spec.cuda_graph

    def _check_sizes(self, bound: dict[str, int]) -> None:
        tokens = bound.get(TOKENS, bound.get(ROWS, 0) * self.shapes.owners)  # T directly, or R rows per owner
        self.case.check_shapes(self.shapes, tokens)

    def sized(self, tokens: int | None = None) -> tuple[Case, Shapes]:
        s = self.shapes
        shapes = make_shapes(s.preset, s.tokens if tokens is None else tokens, s.vocab_shard, s.owners, s.tp)
        self.case.check_shapes(shapes)
        return self.case, shapes


def compile(spec: Spec | str | None = None, debug: DebugOptions | None = None, *, loaded: ModuleFile | None = None,
            **options) -> CompiledCase | CompiledModule:
    """Build ``spec`` for its target with the named schedule (``mtp_tvm.schedule``), recording what ``debug`` asks
    for: a case (``BuildSpec``) -> ``CompiledCase``, or a module file (its path, a ``ModuleSpec`` or the keyword
    ``module``) -> ``CompiledModule``. Keywords are the fields of the spec and of ``DebugOptions``
    (``compile(case="tail", preset="tiny", dump_passes=True)``, ``compile("model.py", schedule="none")``) and
    override ``spec``/``debug``. ``loaded``: the module file already loaded (``ir.module_file.load_module_file``)."""
    compiled = compile_open(spec, debug, loaded=loaded, **options)
    finish_run(compiled)
    return compiled


def compile_open(spec: Spec | str | None = None, debug: DebugOptions | None = None, *,
                 loaded: ModuleFile | None = None, **options) -> CompiledCase | CompiledModule:
    """``compile`` leaving a run folder open (not ``complete``, so no retention removes it) for the caller to
    add to and then ``finish_run``; a failed build's run folder is complete when the error is raised."""
    spec, debug = split_options(spec, debug, options, "compile", EITHER)
    if loaded is not None and not isinstance(spec, ModuleSpec):
        raise UsageError("compile(loaded=...) is a loaded module file; a case has none")
    debug = debug.from_environment()
    with phase("build"), native_stderr() as native:  # TVM's and LLVM's own lines: into the run folder
        compiled = (compile_module_file(spec, debug, loaded) if isinstance(spec, ModuleSpec)
                    else _compile_case(spec, debug))
    if native.text and compiled.dump_dir is not None:
        with phase("dumps"):
            (compiled.dump_dir / NATIVE_LOG).write_text(native.text)
    return compiled


def _compile_case(spec: BuildSpec, debug: DebugOptions) -> CompiledCase:
    c, shapes = spec.resolve()
    tgt = spec.resolved_target
    applier = ApplySchedules(tgt, spec.schedule, tuned_dir(tgt, c.name) if spec.schedule == TUNED else None)
    meta = {"case": c.name, "target": target_json(tgt), "preset": shapes.preset.name, "frontend": spec.frontend,
            "schedule": spec.schedule, "shapes": shapes.as_dict(), "cuda_graph": spec.cuda_graph}
    if spec.cuda_graph and not is_gpu(tgt):
        raise UsageError(f"cuda_graph needs a CUDA target, got {tgt.kind.name}")

    def module() -> tvm.IRModule:
        mod = build_relax_module(c, shapes, spec.frontend)
        return plan_graph_capture(mod, CUDA_GRAPH_ROWS) if spec.cuda_graph else mod

    return build_ir(module, c.name, tgt, applier, debug, meta, lambda **built: CompiledCase(c, shapes, spec, **built))
