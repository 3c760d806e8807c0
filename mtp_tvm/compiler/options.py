"""What to build and how to debug the build, as frozen dataclasses that every command shares.

``BuildSpec`` says *what* binary of a case (case, target, sizes, schedule), ``ModuleSpec`` the same of a user's
module file (path, target, schedule); ``DebugOptions`` says what to record or change while building either (dumps,
timing, disabled passes, bisect limit, user passes). ``compile``, ``check``, ``build``, ``bench``, ``bisect`` and
the reproducer take them instead of re-listing the same keywords (``split_options``: either spec from keywords),
and ``as_argv()`` turns them back into the ``mtp-tvm`` flags that rebuild the same thing. A mistyped option is an
error. Both specs resolve their target once (``resolved_target``), on first use: reading them imports no TVM.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..contract.cases import CASES, Case, get_case
from ..contract.presets import PRESETS, Shapes, make_shapes
from ..ir.frontend_names import FRONTEND_NAMES, check_frontend
from ..support.errors import UsageError
from ..support.flags import as_argv, option

if TYPE_CHECKING:  # the options are read before any command needs TVM (``mtp-tvm --help`` stays instant)
    from tvm.target import Target

    from ..passes.plugins import ExtraPasses


CUDA_GRAPH_ROWS = 16  # the decode regime: a ``cuda_graph`` binary's buffers are planned for this many token rows


def check_graph_rows(bound: dict[str, int], owner: str) -> None:
    """Refuse symbolic sizes over ``CUDA_GRAPH_ROWS`` for a binary built with ``cuda_graph`` (its statically
    planned buffers would overflow)."""
    over = {dim: size for dim, size in bound.items() if size > CUDA_GRAPH_ROWS}
    _require(not over, f"{owner} was built with cuda_graph for at most {CUDA_GRAPH_ROWS} token rows, got "
                       + ", ".join(f"{d}={v}" for d, v in over.items()) + "; build without --cuda-graph for more")


def _target_text(target) -> str:
    """A target as ``--target``'s word: its name, or its JSON."""
    if isinstance(target, str):
        return target
    from ..passes.target import target_json

    return json.dumps(target if isinstance(target, dict) else target_json(target))


def _plugin_text(passes) -> str | None:
    """``--extra-passes``' word: the file of a loaded plugin; None for passes given as Python objects."""
    from ..passes.plugins import PassPlugin

    return str(passes.path) if isinstance(passes, PassPlugin) else None


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


def require_path(name: str, value, optional: bool = False) -> None:
    """``value`` is a file or folder path (str or ``os.PathLike``); an int or a list would fail deep inside."""
    _require((optional and value is None) or isinstance(value, (str, os.PathLike)),
             f"{name} must be a path, got {type(value).__name__} {value!r}")


def _optional_int(name: str, value, minimum: int) -> None:
    _require(value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= minimum),
             f"{name} must be an integer >= {minimum}, got {value!r}")


def token_counts(text: str) -> int | tuple[int, ...]:
    """``--tokens``' word, one meaning on every verb: one T (``8``) or a comma list of T (``1,2,4``), which a
    verb that sweeps takes whole and the others refuse (``make_shapes``: one T); a list of one is that T."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--tokens takes T or a comma list of T such as 1,2,4,8,16; got {text!r}") from None
    return counts[0] if len(counts) == 1 else counts


class OnTarget:
    """A spec's ``target`` as given ("llvm", "cuda", a target JSON object or string, or a ``Target``) and, as
    ``resolved_target``, the typed ``Target`` every step of the build uses: resolved once, on first use (TVM is
    imported then), so a spec stays cheap to make and to send to a worker process (which resolves its own)."""

    target: Any

    @functools.cached_property
    def resolved_target(self) -> Target:
        from ..passes.target import resolve_target

        return resolve_target(self.target)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "resolved_target"}


def _resolve_case(spec: BuildSpec) -> tuple[Case, Shapes]:
    """``BuildSpec.resolve``'s work, done once per sizing."""
    case = get_case(spec.case)
    shapes = spec.shapes()
    case.check_shapes(shapes)
    check_frontend(spec.frontend)
    return case, shapes


_RESOLVED: dict[tuple, tuple[Case, Shapes]] = {}  # BuildSpec._sizing -> its case and shapes, checked


@dataclasses.dataclass(frozen=True)
class BuildSpec(OnTarget):
    """One binary: ``case`` for ``target`` at ``preset`` sizes through ``frontend``, scheduled by ``schedule``.

    ``tokens`` only sizes seeded inputs and static (tuned) builds: the token dim of a binary is symbolic.
    ``owners`` and ``tp`` size the TP-sharded LM head (cases ``lm-head``, ``tail-lm-head``).
    ``cuda_graph`` (CUDA only): the kernels of ``main`` that read only its weights and its own buffers replay as
    CUDA graphs, captured once per token count by the runtime (``vm.builtin.cuda_graph``); those buffers are
    planned for at most ``CUDA_GRAPH_ROWS`` tokens (per owner for the LM head), so the binary refuses more."""

    case: str = option("tail", help=f"one of: {', '.join(CASES)}", metavar="CASE", groups=("case", "manifest"))
    target: Any = option("llvm", help="llvm, cuda, or a target JSON object", metavar="TARGET", text=_target_text,
                         groups=("manifest",))  # "llvm", "cuda", a target JSON dict, or a tvm Target
    preset: str = option("flash", help=f"one of: {', '.join(PRESETS)}", metavar="P",
                         groups=("case", "manifest"))
    frontend: str = option("tir", help=f"one of: {', '.join(FRONTEND_NAMES)}", metavar="F",
                           groups=("case", "manifest"))
    tokens: int | None = option(None, help="token count T", shown="the preset's B*S = 8", type=token_counts,
                                metavar="T", groups=("case",))
    vocab_shard: int | None = option(None, help="vocab shard columns", shown="512", type=int, metavar="V",
                                     groups=("case", "manifest"))
    schedule: str = option("default", help="default (the hand schedules in schedules/), none (plain lowering, CPU), "
                           "dlight (CUDA), tuned, or another name a schedule file defines", metavar="NAME",
                           groups=("manifest",))
    owners: int | None = option(None, help="LM head: token owners (EP ranks) 2, 4 or 8", shown="2", type=int,
                                metavar="O", groups=("case", "manifest"))
    tp: int | None = option(None, help="LM head: TP degree 2, 4, 8 or 16; VOCAB = TP x vocab shard", shown="2",
                            type=int, metavar="TP", groups=("case", "manifest"))
    cuda_graph: bool = option(False, help="CUDA: replay main's kernels as CUDA graphs captured once per token count "
                              f"(at most {CUDA_GRAPH_ROWS} token rows)", groups=("case", "manifest"))

    def __post_init__(self):  # sizes are checked against the preset by ``contract.presets.make_shapes``
        for name in ("case", "preset", "frontend", "schedule"):
            _require(isinstance(getattr(self, name), str), f"{name} must be a name, got {getattr(self, name)!r}")
        _require(isinstance(self.cuda_graph, bool), f"cuda_graph must be True or False, got {self.cuda_graph!r}")

    def shapes(self, tokens: int | None = None) -> Shapes:
        """This spec's sizes at ``tokens`` (default: its own T, else the preset's)."""
        return make_shapes(self.preset, self.tokens if tokens is None else tokens, self.vocab_shard, self.owners,
                           self.tp)

    @property
    def _sizing(self) -> tuple:
        """What the case and its sizes depend on: a spec that differs only in target or schedule shares them."""
        return self.case, self.preset, self.frontend, self.tokens, self.vocab_shard, self.owners, self.tp

    def resolve(self) -> tuple[Case, Shapes]:
        """The case and its sizes, every name and size checked (one-line ``UsageError``s) without importing TVM
        or torch, so a command refuses a typo at once instead of after seconds of imports. Worked out once per
        process for a sizing (``_RESOLVED``) and carried to a worker process with the spec (``__getstate__``),
        however many layers ask: the CLI to refuse early, the verb, the driver."""
        if self._sizing not in _RESOLVED:
            _RESOLVED[self._sizing] = _resolve_case(self)
        return _RESOLVED[self._sizing]

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "_resolution": _RESOLVED.get(self._sizing)}

    def __setstate__(self, state: dict) -> None:
        resolution = state.pop("_resolution", None)
        self.__dict__.update(state)
        if resolution is not None:
            _RESOLVED.setdefault(self._sizing, resolution)

    def as_argv(self, target_flag: str | None = None) -> list[str]:
        """The ``mtp-tvm`` flags of this spec (sizes left at their default are omitted); ``target_flag``
        replaces the target's spelling (e.g. the JSON of a resolved target)."""
        return as_argv(self, **({} if target_flag is None else {"target": target_flag}))


@dataclasses.dataclass(frozen=True)
class ModuleSpec(OnTarget):
    """One binary of a user's module file: ``module`` (a path) for ``target``, scheduled by ``schedule``."""

    module: str | os.PathLike
    target: Any = "llvm"  # as BuildSpec's
    schedule: str = "default"

    def __post_init__(self):
        require_path("module", self.module)
        _require(isinstance(self.schedule, str), f"schedule must be a name, got {self.schedule!r}")


DUMP_ENV = "MTP_TVM_DUMP"


@dataclasses.dataclass(frozen=True)
class DebugOptions:
    """Debugging a build. ``dump_passes``: True dumps every pass into a new folder under ``dumps/``, a path dumps
    under it (``dump_only_changed``, ``dump_filter`` regex on pass names, ``dump_func`` one function, ``dump_nested``
    also the passes run inside another pass, FoldConstant's inner TIR pipelines: folded under it by default);
    ``time_passes`` keeps per-pass records (time, changed); ``disable_passes`` skips passes by name;
    ``bisect_limit`` N skips every optional pass numbered after N; ``extra_passes`` ({phase: [Pass]}, a
    callable of the target, or a loaded ``--extra-passes`` file) adds user passes to an optimizing phase."""

    dump_passes: bool | str | os.PathLike | None = option(
        None, help="dump the IR after every pass into a new run folder under DIR (default dumps/)", metavar="DIR",
        optional_value=True, groups=("manifest",))
    dump_only_changed: bool = option(False, help="dump files only for passes that changed the IR", groups=("debug",))
    dump_filter: str | None = option(None, help="dump files only for passes whose name matches REGEX",
                                     metavar="REGEX", groups=("debug",))
    dump_func: str | None = option(None, help="dump (and compare) only function NAME, not the whole module",
                                   metavar="NAME", groups=("debug",))
    dump_nested: bool = option(False, help="also dump the passes run inside another pass (FoldConstant's TIR "
                               "pipeline per folded constant, FuseTIR's helpers); by default they are folded under "
                               "it, in the index only", groups=("debug",))
    time_passes: bool = option(False, help="print the passes taking the most time", groups=("debug",))
    disable_passes: tuple[str, ...] = option((), help="do not run pass NAME (repeatable; names as in the dump index)",
                                             metavar="NAME", repeat=True, groups=("debug",))
    bisect_limit: int | None = option(None, help="run passes 1..N, then only required ones (LLVM's "
                                      "-opt-bisect-limit)", type=int, metavar="N", groups=("debug",))
    extra_passes: ExtraPasses | None = option(
        None, help="a Python file whose passes(target) returns {phase: [passes]} to add to the pipeline (a pass "
        "plugin)", metavar="FILE", text=_plugin_text, aliases=("--pass-plugin",), compare=False, groups=("debug",))

    def __post_init__(self):
        _require(not isinstance(self.disable_passes, (str, bytes)),
                 f"disable_passes takes a list of pass names, got the string {self.disable_passes!r}")
        _require(isinstance(self.disable_passes, (list, tuple, set, frozenset)),
                 f"disable_passes takes a list of pass names, got {type(self.disable_passes).__name__} "
                 f"{self.disable_passes!r}")
        object.__setattr__(self, "disable_passes", tuple(self.disable_passes))
        _require(all(isinstance(n, str) for n in self.disable_passes),
                 f"disable_passes takes pass names, got {self.disable_passes!r}")
        for name in ("dump_only_changed", "dump_nested", "time_passes"):
            value = getattr(self, name)
            _require(isinstance(value, bool), f"{name} must be True or False, got {value!r}")
        for name in ("dump_filter", "dump_func"):
            _require(getattr(self, name) is None or isinstance(getattr(self, name), str),
                     f"{name} must be a string, got {getattr(self, name)!r}")
        _require(self.dump_passes is None or isinstance(self.dump_passes, (bool, str, os.PathLike)),
                 f"dump_passes must be True or a folder, got {self.dump_passes!r}")
        _optional_int("bisect limit", self.bisect_limit, 0)

    @property
    def dump_root(self) -> Path | None:
        """The folder that receives run folders, when it is not the default."""
        return None if self.dump_passes in (None, False, True) else Path(self.dump_passes)

    def replace(self, **changes) -> DebugOptions:
        return dataclasses.replace(self, **changes)

    def from_environment(self) -> DebugOptions:
        """``MTP_TVM_DUMP=1`` dumps a build that did not say (``dump_passes=None``) as ``--dump-passes`` would
        (under ``$MTP_TVM_DUMPS`` or ``dumps/``): how a program using the API gets run folders without a code
        change, like torch's ``TORCH_COMPILE_DEBUG=1``. ``0`` or unset: off."""
        value = os.environ.get(DUMP_ENV, "").strip()
        _require(value in ("", "0", "1"), f"{DUMP_ENV} must be 1 or 0, got {value!r} (the dumps root is MTP_TVM_DUMPS)")
        return self.replace(dump_passes=True) if value == "1" and self.dump_passes is None else self

    def as_argv(self) -> list[str]:
        """The ``mtp-tvm`` flags of these options. Passes given as Python objects have no flag: the caller
        says so (``api_only_passes``)."""
        return as_argv(self)

    @property
    def api_only_passes(self) -> bool:
        """Whether user passes were given as Python objects, which no command-line flag can restate."""
        return self.extra_passes is not None and _plugin_text(self.extra_passes) is None


_SPEC_FIELDS = {kind: {f.name for f in dataclasses.fields(kind)} for kind in (BuildSpec, ModuleSpec)}
_DEBUG_FIELDS = {f.name for f in dataclasses.fields(DebugOptions)}
CASES, MODULE_FILES, EITHER = (BuildSpec,), (ModuleSpec,), (BuildSpec, ModuleSpec)  # what a verb accepts
Spec = BuildSpec | ModuleSpec


def split_options(spec: Spec | str | os.PathLike | None, debug: DebugOptions | None, options: dict, where: str,
                  accepts: tuple[type, ...] = CASES) -> tuple[Spec, DebugOptions]:
    """The keyword form of the API (``compile(case="tail", dump_passes=True)``, ``check("m.py", schedule="none")``)
    as a spec and the debug options: keywords override ``spec``/``debug``; an unknown keyword is an error naming
    it. ``spec`` a path, or a ``module=`` keyword, means a module file (``ModuleSpec``); otherwise a case
    (``BuildSpec``). ``accepts``: which of the two the verb ``where`` takes."""
    if isinstance(spec, (str, os.PathLike)):
        spec = ModuleSpec(spec)
    _require(spec is None or isinstance(spec, EITHER),
             f"{where}() takes a BuildSpec, a ModuleSpec or a module file's path, got {type(spec).__name__}")
    kind = type(spec) if spec is not None else (
        ModuleSpec if "module" in options or accepts == MODULE_FILES else BuildSpec)
    _require(kind in accepts, f"{where}() applies to {'a case' if BuildSpec in accepts else 'a module file'}, "
                              f"not {'a module file' if kind is ModuleSpec else 'a case'}")
    _require(kind is ModuleSpec or "module" not in options, f"{where}() got a case's BuildSpec and module=")
    fields = _SPEC_FIELDS[kind]
    unknown = sorted(set(options) - fields - _DEBUG_FIELDS)
    _require(not unknown, f"{where}() got unknown option(s) {', '.join(unknown)}"
                          + (" (a module file takes module, target, schedule)" if kind is ModuleSpec else ""))
    _require(spec is not None or kind is BuildSpec or "module" in options,
             f"{where}() needs the module file (a path to a .py file)")
    base = spec or (ModuleSpec(options["module"]) if kind is ModuleSpec else BuildSpec())
    changes = {k: v for k, v in options.items() if k in fields}
    spec = dataclasses.replace(base, **changes) if changes else base  # the same spec: its target resolved once
    debug = dataclasses.replace(debug or DebugOptions(), **{k: v for k, v in options.items() if k in _DEBUG_FIELDS})
    return spec, debug
