"""What a verb works on, made once per command from the command line or the API: a case or a module file.

``subject_of`` turns the API's forms (a ``BuildSpec``, a ``ModuleSpec``, a module file's path, the keyword form)
into a ``Subject`` and the debugging options. A verb then asks the subject rather than the spec's type: how it is
built (``build``; a module file is loaded once, in its own process, and every build of it reuses that load), what
another build of the same source is (``rebuilt``: a reference schedule, frontend or target), how its outputs are
judged (``tolerance``, ``comparison``), and the words that name it in a log line (``describe``). A case
(``CaseSubject``) is judged by ``ratio_allclose`` against torch's stages; a module file (``ModuleSubject``) by
``assert_close`` against its reference.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping

from ..compiler.options import EITHER, BuildSpec, DebugOptions, ModuleSpec, Spec, split_options
from ..support.errors import UsageError
from ..support.timing import phase
from .comparators import Comparison, ratio_allclose
from .module_golden import assert_close
from .tolerances import ModuleTolerance, RatioTolerance, Tolerance

Comparing = Callable[[object, object], Comparison]  # one output (actual, expected) -> its comparison


class Subject(abc.ABC):
    """A case or a module file, with the spec it is built from (``spec``)."""

    spec: Spec

    @abc.abstractmethod
    def describe(self) -> str:
        """The words that name this build in a log line (``[BUILD] ...``)."""

    @abc.abstractmethod
    def rebuilt(self, spec: Spec) -> Subject:
        """The same source built from ``spec`` (a reference build: another schedule, frontend or target)."""

    @abc.abstractmethod
    def tolerance(self, given: Tolerance | RatioTolerance | ModuleTolerance | Mapping | None
                  ) -> RatioTolerance | ModuleTolerance:
        """The tolerance this kind of subject is judged by, from what the user gave (a one-line error if it cannot
        apply)."""

    @abc.abstractmethod
    def comparison(self, tolerance: RatioTolerance | ModuleTolerance) -> Comparing:
        """How one of its outputs is compared with the reference's."""

    def build(self, debug: DebugOptions, *, open_run: bool = False):
        """Compile it with ``debug``: ``compiler.driver.compile``, or ``compile_open`` (``open_run``: the run
        folder stays open for the caller to add to and ``finish_run``)."""
        from ..compiler.driver import compile, compile_open

        return (compile_open if open_run else compile)(self.spec, debug, **self._build_keywords())

    def _build_keywords(self) -> dict:
        return {}


@dataclasses.dataclass
class CaseSubject(Subject):
    """A case of the contract (``BuildSpec``), run on inputs drawn from a seed against torch's stages."""

    spec: BuildSpec

    def describe(self) -> str:
        s = self.spec
        return f"case={s.case} preset={s.preset} frontend={s.frontend} schedule={s.schedule}"

    def rebuilt(self, spec: BuildSpec) -> CaseSubject:
        return CaseSubject(spec)

    def tolerance(self, given) -> RatioTolerance:
        return RatioTolerance.of(given)

    def comparison(self, tolerance: RatioTolerance) -> Comparing:
        return ratio_allclose(tolerance)


class _LoadOnce:
    """A module file's load, shared by a subject and every rebuild of it: made on first use, then kept."""

    def __init__(self, loaded=None):
        self.loaded = loaded


@dataclasses.dataclass
class ModuleSubject(Subject):
    """A user's module file (``ModuleSpec``): loaded on first use (``loaded``: the file run in a child process of
    its own, its exported program, example inputs and reference outputs) and never again for this command: its
    rebuilds share the load."""

    spec: ModuleSpec
    _load: _LoadOnce = dataclasses.field(default_factory=_LoadOnce, repr=False, compare=False)

    @property
    def loaded(self):
        """The loaded module file (``ir.module_file.ModuleFile``)."""
        if self._load.loaded is None:
            from ..ir.module_file import load_module_file

            with phase("build"):
                self._load.loaded = load_module_file(self.spec.module)
        return self._load.loaded

    def describe(self) -> str:
        return f"module={self.spec.module} schedule={self.spec.schedule}"

    def rebuilt(self, spec: ModuleSpec) -> ModuleSubject:
        if spec.module != self.spec.module:
            raise UsageError(f"a rebuild of {self.spec.module} cannot be of another file ({spec.module})")
        return ModuleSubject(spec, self._load)

    def tolerance(self, given) -> ModuleTolerance:
        return ModuleTolerance.of(given)

    def comparison(self, tolerance: ModuleTolerance) -> Comparing:
        return lambda actual, expected: assert_close(actual, expected, tolerance)

    def _build_keywords(self) -> dict:
        return {"loaded": self.loaded}


def subject_of(spec: Spec | Subject | str | None, debug: DebugOptions | None, options: dict, where: str,
               accepts: tuple[type, ...] = EITHER) -> tuple[Subject, DebugOptions]:
    """The subject and debugging options of a verb's call: ``compiler.options.split_options``'s forms, or a
    subject already made (itself, or a rebuild of it where the keywords change its spec)."""
    if isinstance(spec, Subject):
        subject = spec
        spec, debug = split_options(subject.spec, debug, options, where, accepts)
        return (subject if spec == subject.spec else subject.rebuilt(spec)), debug
    spec, debug = split_options(spec, debug, options, where, accepts)
    return (ModuleSubject(spec) if isinstance(spec, ModuleSpec) else CaseSubject(spec)), debug


def subject_for(compiled) -> Subject:
    """The subject a build was made from (a module file's with its load)."""
    module_file = getattr(compiled, "module_file", None)
    return CaseSubject(compiled.spec) if module_file is None else ModuleSubject(compiled.spec, _LoadOnce(module_file))
