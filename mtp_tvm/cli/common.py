"""What every command's wing shares: the parser that knows which flags were given, the build and debug flags
(declared with their fields: ``support.flags``), the command keywords' flags several wings take, the flag
combinations a command cannot do (``Refusal``, refused in one place: ``refuse``), and the printing of a build's
debugging footer."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable

from ..compiler.options import BuildSpec, DebugOptions, ModuleSpec
from ..support.errors import UsageError
from ..support.flags import Flag, add_flags, flag_names, flags, options_from
from ..support.timing import phase, time_line
from ..tools.convert.convert import WeightSource  # no TVM, no torch: the parser reads its declarations
from ..verify.tolerances import Tolerance, parse_logit_perturbation


class Parser(argparse.ArgumentParser):
    """An argparse parser that tells a given flag from a defaulted one without a second parse: every optional
    flag is parsed with ``argparse.SUPPRESS`` as its default, so only given flags land in the namespace; the
    defaults are filled in after, and ``args.given`` names the dests the user set."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.flag_defaults: dict[str, object] = {}

    def _add_action(self, action):
        if action.option_strings and action.default is not argparse.SUPPRESS:
            self.flag_defaults[action.dest] = action.default
            action.default = argparse.SUPPRESS
        return super()._add_action(action)

    def parse_known_args(self, args=None, namespace=None):
        namespace, rest = super().parse_known_args(args, namespace)
        given = set(getattr(namespace, "given", ()))
        for dest, default in self.flag_defaults.items():
            if hasattr(namespace, dest):
                given.add(dest)
            else:
                setattr(namespace, dest, default)
        namespace.given = frozenset(given)
        return namespace, rest


def given_flags(args, names) -> list[str]:
    """The flags among dests ``names`` that the user gave (``Parser``), spelt as on the command line."""
    known = {n: f.name for cls in (BuildSpec, DebugOptions) for n, f in flags(cls).items()}
    return [known.get(n, "--" + n.replace("_", "-")) for n in names if n in args.given]


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A flag combination a command cannot do: where ``when(args)`` holds, the flags given among ``flags``
    (dests) are refused, named by ``message``'s ``{flags}``; without ``flags``, ``when`` alone refuses (a flag
    the others need is missing). A value's own check is the API's, not the CLI's."""

    message: str
    flags: tuple[str, ...] = ()
    when: Callable[[argparse.Namespace], object] = lambda args: True


def refuse(args, *refusals: Refusal) -> None:
    """The CLI's one refusal: the first of ``refusals`` that applies, as a one-line ``UsageError``."""
    for r in refusals:
        if r.when(args):
            given = given_flags(args, r.flags)
            if given or not r.flags:
                raise UsageError(r.message.format(flags=", ".join(given)))


DEFAULTS = BuildSpec()  # the one table of build defaults: every command's flags and the API's keywords

# the command-level flags that describe a case or come from an artifact's manifest (the rest: BuildSpec's and
# DebugOptions' fields, declared with them)
SEED = Flag("seed", "input seed", type=int, metavar="S", default=0, groups=("case",))
ARCH = Flag("arch", "with --target cuda: sm_80, sm_90, or both comma-separated", metavar="SM", shown="sm_90",
            groups=("case", "manifest"))
COMPILE_ONLY = Flag("compile_only", "build the target binary (CUDA device code included) and stop: no inputs, no "
                    "run", groups=("case", "manifest"))
NAN_CHECK = Flag("nan_check", "name the first kernel call whose output holds NaN/Inf while its inputs held none",
                 groups=("case",))
MAX_E2E_ABS_DIFF = Flag("max_e2e_abs_diff", "LM-head logits end-to-end guard against the CPU golden, max "
                        "|logit - CPU golden|", type=float, metavar="G", shown="0.5", groups=("case",))
PERTURB_LOGIT = Flag("perturb_logit", "debugging: add DELTA (default 1.0) to one device logit before the "
                     "comparison", type=parse_logit_perturbation, metavar="OWNER,ROW,COL[,DELTA]", groups=("case",))
RPC_TRACKER = Flag("rpc_tracker", "", metavar="HOST:PORT")  # help: the command's
RPC_KEY = Flag("rpc_key", "device key registered with the tracker", metavar="KEY", default="mtp")
COMMAND_FLAGS = (SEED, ARCH, COMPILE_ONLY, NAN_CHECK, MAX_E2E_ABS_DIFF, PERTURB_LOGIT)
# the keywords of several verbs (help: the command's where it says more)
MODULE = Flag("module", "your own model instead of a case: FILE.py defines model() (a torch.nn.Module) and "
              "example_inputs(), optionally dynamic_shapes(); or module() (a tvm.IRModule with a Relax main) and "
              "example_inputs() (numpy arrays). See examples/ and the README", metavar="FILE.py")
SHAPE = Flag("shape", "run input NAME at this shape instead of the example's (repeat per input; symbolic sizes within "
             "dynamic_shapes()'s bounds), on inputs drawn from --seed", metavar="NAME=DIM,...", repeat=True)
PROFILE = Flag("profile", "also time every kernel of main: its ms, share of main, GB/s, GFLOP/s, roofline fraction "
               "(profile.json in the run folder when dumping)")
WEIGHTS = Flag("weights", "the weights of a DeepSeek checkpoint (folder or file, converted to W8A8 here) or of a file "
               "mtp-tvm convert wrote, in place of the seeded ones", metavar="CKPT_OR_CONVERTED")
ARTIFACT = Flag("artifact", "", metavar="DIR")  # help: the command's
REPORT = Flag("report", "write the result as JSON", metavar="FILE")
FORCE = Flag("force", "")  # help: the command's (what it replaces)
KEYWORD_FLAGS = (MODULE, SHAPE, PROFILE, WEIGHTS, REPORT)

# what a case is made of, meaningless for --module (its file says it all)
CASE_OPTIONS = flag_names(BuildSpec, "case") + flag_names(COMMAND_FLAGS, "case")
# options that --artifact takes from the artifact's manifest instead
MANIFEST_OPTIONS = (flag_names(BuildSpec, "manifest") + flag_names(DebugOptions, "manifest")
                    + flag_names(COMMAND_FLAGS, "manifest"))
# the compile-time debugging options (besides --dump-passes), meaningless for a prebuilt artifact
DEBUG_OPTIONS = flag_names(DebugOptions, "debug")
# how a checkpoint is read, meaningless without --weights
CHECKPOINT_OPTIONS = flag_names(WeightSource, "checkpoint")


def add_spec_args(p: argparse.ArgumentParser, case_help: str | None = None, sizes: bool = True) -> None:
    """The flags of ``BuildSpec`` (what binary): case, preset, vocab shard; ``sizes``: the LM head's too."""
    add_flags(p, BuildSpec, only=("case", "preset", "vocab_shard", *(("owners", "tp") if sizes else ())),
              help={"case": case_help})


def add_target_args(p: argparse.ArgumentParser) -> None:
    add_flags(p, BuildSpec, only=("target", "frontend"))


def add_schedule_arg(p: argparse.ArgumentParser) -> None:
    add_flags(p, BuildSpec, only=("schedule",))


def add_shape_arg(p: argparse.ArgumentParser, where: str) -> None:
    SHAPE.add_to(p, where + SHAPE.help)


def add_module_arg(p: argparse.ArgumentParser) -> None:
    MODULE.add_to(p)


def case_flags_refused(keep: tuple[str, ...] = ()) -> Refusal:
    """``--module`` with a flag that describes a case (other than ``keep``, which the command uses for something
    else): a one-line error naming it, not a silent no-op."""
    return Refusal("--module builds your file, so {flags} (which describe a case) cannot apply; drop them",
                   tuple(o for o in CASE_OPTIONS if o not in keep), lambda args: args.module)


def module_options(args) -> dict:
    return {"module": args.module, "target": args.target, "schedule": args.schedule}


def add_build_args(p: argparse.ArgumentParser) -> None:
    add_module_arg(p)
    add_spec_args(p)
    add_target_args(p)
    add_flags(p, BuildSpec, only=("tokens", "schedule", "cuda_graph"))
    add_flags(p, DebugOptions)


def source_spec(args) -> BuildSpec | ModuleSpec:
    """What a verb that takes either kind builds: the ``--module`` file (a case flag beside it refused by name),
    else the case ``add_build_args`` describes."""
    if args.module:
        refuse(args, case_flags_refused())
        return ModuleSpec(args.module, args.target, args.schedule)
    return build_spec(args)


def build_spec(args, target=None) -> BuildSpec:
    """The binary ``add_build_args`` describes, its names and sizes checked before any command imports TVM;
    ``target`` replaces ``--target`` (e.g. resolved with --arch)."""
    spec = options_from(args, BuildSpec, **({} if target is None else {"target": target}))
    spec.resolve()
    return spec


def debug_options(args) -> DebugOptions:
    """The dump, timing, gate and plugin options of ``add_build_args``."""
    plugin = None
    if args.extra_passes:
        with phase("import"):  # TVM, and the plugin's own imports and definitions
            from ..passes.plugins import load_pass_plugin

            plugin = load_pass_plugin(args.extra_passes)
    return options_from(args, DebugOptions, extra_passes=plugin)


def print_debug_footer(args, records, gate, dump_dir) -> None:
    """What the debugging options produced: the timing table, the gate's line, the run folder."""
    from ..instrument.report import timing_table
    from ..passes.gate import describe_gate

    if args.time_passes:
        print(time_line())
        print(timing_table(records))
    line = describe_gate(gate) if gate else None
    if line:
        print(line)
    if dump_dir:
        print(f"IR dumps: {dump_dir} (open {dump_dir}/index.html)")


def add_profile_arg(p: argparse.ArgumentParser) -> None:
    PROFILE.add_to(p)


def add_arch_arg(p: argparse.ArgumentParser) -> None:
    ARCH.add_to(p)


def add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    """How a DeepSeek checkpoint is read and converted (``WeightSource``'s flags; --weights of check, run, bench)."""
    add_flags(p, WeightSource)


def add_weights_arg(p: argparse.ArgumentParser) -> None:
    WEIGHTS.add_to(p)
    add_checkpoint_args(p)


# the checkpoint options without --weights: a one-line error, not a silent no-op
CHECKPOINT_WITHOUT_WEIGHTS = Refusal("{flags} read a checkpoint: give --weights CKPT", CHECKPOINT_OPTIONS,
                                     lambda args: args.weights is None)


def given_weights(args, case: str, preset: str | None, tp: int | None = None, owners: int | None = None):
    """``--weights``: the case's weights with their sizes (``tools.convert.convert.Loaded``), progress on stderr; None
    without it."""
    if args.weights is None:
        return None
    from ..tools.convert.convert import read_weight_source

    source = options_from(args, WeightSource, path=args.weights, case=case, preset=preset, tp=tp, owners=owners)
    return read_weight_source(source, log=lambda line: print(line, file=sys.stderr, flush=True))


def print_reproducers(result) -> None:
    if result.repro_dir:
        print(f"reproducer: {result.repro_dir} (python {result.repro_dir}/repro.py)")
    elif result.repro_error:
        print(f"reproducer: not written: {result.repro_error}")
    if result.kernel_repro_dir:
        print(f"kernel reproducer: {result.kernel_repro_dir} (python {result.kernel_repro_dir}/repro.py)")


def add_tolerance_args(p: argparse.ArgumentParser) -> None:
    """``--atol``, ``--rtol``, ``--max-error-ratio``, ``--exact``: the ``Tolerance`` of every verb that compares."""
    add_flags(p, Tolerance)


def tolerance_of(args) -> Tolerance:
    """The ``tolerance`` keyword of a verb that compares, from its tolerance flags (none given: the defaults)."""
    return options_from(args, Tolerance)


TOLERANCE_OPTIONS = tuple(flags(Tolerance))  # refused where a command compares with the defaults (--artifact)


def check_exit(args, result) -> int:
    """Where the report went, and the exit code of a check: 0 passed, 1 failed."""
    if args.report:
        print(f"report: {args.report}")
    return 0 if result.passed else 1


def add_rpc_args(p: argparse.ArgumentParser, tracker_help: str) -> None:
    """``--rpc-tracker`` and ``--rpc-key``: the ``rpc`` of ``TuneOptions`` and ``BenchOptions``."""
    RPC_TRACKER.add_to(p, tracker_help)
    RPC_KEY.add_to(p)


def rpc_of(args) -> tuple[str, str] | None:
    """``(tracker, key)`` of ``--rpc-tracker``/``--rpc-key``; a key without a tracker is refused, not ignored."""
    refuse(args, Refusal("--rpc-key names a server of an --rpc-tracker; give the tracker, or drop --rpc-key",
                         ("rpc_key",), lambda args: not args.rpc_tracker))
    return (args.rpc_tracker, args.rpc_key) if args.rpc_tracker else None


# --artifact takes what was built from the artifact's manifest: a build flag set beside it is an error
BUILD_FLAGS_WITH_ARTIFACT = Refusal("--artifact takes {flags} from the artifact's manifest; drop them",
                                    flag_names(BuildSpec, "manifest"), lambda args: args.artifact)
