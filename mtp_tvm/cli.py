"""``mtp-tvm``: a thin argparse layer over the Python API. Exit codes: 0 ok, 1 golden check failed,
2 usage/input error, 3 build failed, 130 interrupted.

It is a little over 400 lines because it is eight subcommands' flag tables and their one-screen handlers; each
handler only turns flags into ``BuildSpec``/``DebugOptions`` and prints a result, so splitting it would scatter
one table across files without separating any logic."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import os
import signal
import sys
import threading
import traceback
import warnings

from .compiler.options import BuildSpec, DebugOptions, ModuleSpec
from .contract.cases import CASES
from .contract.checkpoint import LayoutName
from .contract.presets import PRESETS
from .ir.frontend_names import FRONTEND_NAMES
from .schedule.tune_space import TuneSpace
from .support.atomic_file import require_writable
from .support.errors import MtpError, UsageError
from .support.native_log import VERBOSE_ENV
from .support.timing import phase, start, time_line
from .tools.bisect.search import BisectSearch
from .verify.tolerances import LogitsTolerance, ModuleTolerance, RatioTolerance

# Only the modules above load with the parser: each handler imports what it needs, so ``--help``, ``list``,
# ``dumps ...`` and usage errors never import TVM or torch (tests/test_cli.py measures it).


_DEFAULTS = BuildSpec()  # the one table of build defaults: every command's flags and the API's keywords


def _add_spec_args(p: argparse.ArgumentParser, case_help: str | None = None, sizes: bool = True,
                   unset: bool = False) -> None:
    """The flags of ``BuildSpec`` (what binary), their defaults its fields'; ``sizes``: the LM head's too;
    ``unset``: left None when not given (the handler tells given from default)."""
    p.add_argument("--case", default=None if unset else _DEFAULTS.case,
                   help=case_help or f"one of: {', '.join(CASES)} (default {_DEFAULTS.case})")
    p.add_argument("--preset", default=None if unset else _DEFAULTS.preset,
                   help=f"one of: {', '.join(PRESETS)} (default {_DEFAULTS.preset})")
    p.add_argument("--vocab-shard", type=int, default=None, help="vocab shard columns (default 512)")
    if sizes:
        p.add_argument("--owners", type=int, default=None,
                       help="LM head: token owners (EP ranks) 2, 4 or 8 (default 2)")
        p.add_argument("--tp", type=int, default=None,
                       help="LM head: TP degree 2, 4, 8 or 16; VOCAB = TP x vocab shard (default 2)")


def _add_target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=_DEFAULTS.target,
                   help=f"llvm, cuda, or a target JSON object (default {_DEFAULTS.target})")
    p.add_argument("--frontend", default=_DEFAULTS.frontend,
                   help=f"one of: {', '.join(FRONTEND_NAMES)} (default {_DEFAULTS.frontend})")


def _add_schedule_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schedule", default=_DEFAULTS.schedule, metavar="NAME",
                   help="default (the hand schedules in schedules/), none (plain lowering, CPU), dlight (CUDA), "
                        "tuned, or another name a schedule file defines (default: default)")


def _add_shape_arg(p: argparse.ArgumentParser, where: str) -> None:
    p.add_argument("--shape", action="append", default=None, metavar="NAME=DIM,...",
                   help=f"{where}run input NAME at this shape instead of the example's (repeat per input; symbolic "
                        "sizes within dynamic_shapes()'s bounds), on inputs drawn from --seed")


def _add_module_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--module", default=None, metavar="FILE.py",
                   help="your own model instead of a case: FILE.py defines model() (a torch.nn.Module) and "
                        "example_inputs(), optionally dynamic_shapes(); or module() (a tvm.IRModule with a Relax "
                        "main) and example_inputs() (numpy arrays). See examples/ and the README")


# what a case is made of, meaningless for --module (its file says it all)
_CASE_OPTIONS = ("case", "preset", "frontend", "tokens", "vocab_shard", "owners", "tp", "seed", "max_error_ratio",
                 "max_e2e_abs_diff", "perturb_logit", "nan_check", "compile_only", "arch", "cuda_graph")


def _given_flags(args, command: str, names, required: tuple[str, ...] = ()) -> list[str]:
    """The flags among ``names`` that ``args`` sets away from ``command``'s defaults (``required``: the argv its
    parser needs besides)."""
    defaults = build_parser().parse_args([command, *required, *(["--out", "x"] if command == "build" else [])])
    return [f"--{o.replace('_', '-')}" for o in names if hasattr(args, o) and getattr(args, o) != getattr(defaults, o)]


def _refuse_case_options(args, command: str, keep: tuple[str, ...] = ()) -> None:
    """``--module`` with a flag that describes a case (other than ``keep``, which ``command`` uses for something
    else): a one-line error naming it, not a silent no-op."""
    given = _given_flags(args, command, [o for o in _CASE_OPTIONS if o not in keep], ("--module", "x.py"))
    if given:
        raise UsageError(f"--module builds your file, so {', '.join(given)} (which describe a case) cannot apply; "
                         "drop them")


def _module_options(args) -> dict:
    return {"module": args.module, "target": args.target, "schedule": args.schedule}


def _add_build_args(p: argparse.ArgumentParser) -> None:
    _add_module_arg(p)
    _add_spec_args(p)
    _add_target_args(p)
    p.add_argument("--tokens", type=int, default=None, help="token count T (default: the preset's B*S = 8)")
    _add_schedule_arg(p)
    p.add_argument("--cuda-graph", action="store_true",
                   help="CUDA: replay main's kernels as CUDA graphs captured once per token count (at most "
                        "16 token rows)")
    p.add_argument("--dump-passes", nargs="?", const=True, default=None, metavar="DIR",
                   help="dump the IR after every pass into a new run folder under DIR (default dumps/)")
    p.add_argument("--dump-only-changed", action="store_true", help="dump files only for passes that changed the IR")
    p.add_argument("--dump-filter", metavar="REGEX", help="dump files only for passes whose name matches REGEX")
    p.add_argument("--dump-func", metavar="NAME", help="dump (and compare) only function NAME, not the whole module")
    p.add_argument("--dump-nested", action="store_true",
                   help="also dump the passes run inside another pass (FoldConstant's TIR pipeline per folded "
                        "constant, FuseTIR's helpers); by default they are folded under it, in the index only")
    p.add_argument("--time-passes", action="store_true", help="print the passes taking the most time")
    p.add_argument("--disable-pass", action="append", default=[], metavar="NAME",
                   help="do not run pass NAME (repeatable; names as in the dump index)")
    p.add_argument("--bisect-limit", type=int, metavar="N",
                   help="run passes 1..N, then only required ones (LLVM's -opt-bisect-limit)")
    p.add_argument("--pass-plugin", metavar="FILE",
                   help="a Python file whose passes(target) returns {phase: [passes]} to add to the pipeline")


def _build_spec(args, target=None) -> BuildSpec:
    """The binary ``_add_build_args`` describes, its names and sizes checked before any command imports TVM;
    ``target`` replaces ``--target`` (e.g. resolved with --arch)."""
    spec = BuildSpec(case=args.case, target=args.target if target is None else target, preset=args.preset,
                     frontend=args.frontend, tokens=args.tokens, vocab_shard=args.vocab_shard,
                     schedule=args.schedule, owners=args.owners, tp=args.tp, cuda_graph=args.cuda_graph)
    spec.resolve()
    return spec


def _debug_options(args) -> DebugOptions:
    """The dump, timing, gate and plugin options of ``_add_build_args``."""
    plugin = None
    if args.pass_plugin:
        with phase("import"):  # TVM, and the plugin's own imports and definitions
            from .passes.plugins import load_pass_plugin

            plugin = load_pass_plugin(args.pass_plugin)
    return DebugOptions(dump_passes=args.dump_passes, only_changed=args.dump_only_changed,
                        dump_filter=args.dump_filter, dump_func=args.dump_func, dump_nested=args.dump_nested,
                        time_passes=args.time_passes,
                        disable_passes=tuple(args.disable_pass), bisect_limit=args.bisect_limit,
                        extra_passes=plugin)


def _print_debug_footer(args, records, gate, dump_dir) -> None:
    """What the debugging options produced: the timing table, the gate's line, the run folder."""
    from .instrument.report import timing_table
    from .passes.gate import describe_gate

    if args.time_passes:
        print(time_line())
        print(timing_table(records))
    line = describe_gate(gate) if gate else None
    if line:
        print(line)
    if dump_dir:
        print(f"IR dumps: {dump_dir} (open {dump_dir}/index.html)")


def _add_profile_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", action="store_true",
                   help="also time every kernel of main: its ms, share of main, GB/s, GFLOP/s, roofline fraction "
                        "(profile.json in the run folder when dumping)")


def _add_arch_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", default=None, metavar="SM",
                   help="with --target cuda: sm_80, sm_90, or both comma-separated (default sm_90)")


# options that --artifact takes from the artifact's manifest instead
_MANIFEST_OPTIONS = ("case", "target", "preset", "frontend", "vocab_shard", "owners", "tp", "schedule",
                     "dump_passes", "arch", "compile_only", "cuda_graph")


# the compile-time debugging options (besides --dump-passes), meaningless for a prebuilt artifact
_DEBUG_OPTIONS = ("dump_only_changed", "dump_filter", "dump_func", "dump_nested", "time_passes", "disable_pass", "bisect_limit",
                  "pass_plugin")


def _add_lm_head_check_args(p: argparse.ArgumentParser) -> None:
    """The LM-head logits comparator's options (cases lm-head, tail-lm-head; spec §3.3)."""
    p.add_argument("--max-error-ratio", type=float, default=None, help="LM-head logits outlier budget (default 0.01)")
    p.add_argument("--atol", type=float, default=None, help="LM-head logits absolute tolerance (default 0.01); with --module: every output's "
                   "(default torch.testing.assert_close's for its dtype)")
    p.add_argument("--rtol", type=float, default=None, help="LM-head logits relative tolerance (default 0.01); with --module: every output's "
                   "(default torch.testing.assert_close's for its dtype)")
    p.add_argument("--max-e2e-abs-diff", type=float, default=None,
                   help="LM-head logits end-to-end guard against the CPU golden (default 0.5)")
    p.add_argument("--perturb-logit", default=None, metavar="OWNER,ROW,COL[,DELTA]",
                   help="debugging: add DELTA (default 1.0) to one device logit before the comparison")


def _add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    """How a DeepSeek checkpoint is read and converted (convert, and --weights of check, run, bench)."""
    p.add_argument("--rank", type=int, default=None, help="the TP rank whose LM-head rows are read (default 0)")
    p.add_argument("--layout", choices=LayoutName.names(), default=None,
                   help="the checkpoint's layout (default: found from its tensor names)")
    p.add_argument("--calibration", metavar="FILE.npz", default=None,
                   help="SmoothQuant from these activations (hidden_states, prev_hidden_states [N, D]; mtp-tvm inputs "
                        "writes such a file); default: smoothing ones")
    p.add_argument("--alpha", type=float, default=None, help="SmoothQuant's migration strength (default 0.5)")


def _add_weights_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--weights", metavar="CKPT_OR_CONVERTED", default=None,
                   help="the weights of a DeepSeek checkpoint (folder or file, converted to W8A8 here) or of a file "
                        "mtp-tvm convert wrote, in place of the seeded ones")
    _add_checkpoint_args(p)


def _refuse_checkpoint_options(args) -> None:
    """The checkpoint options without ``--weights``: a one-line error, not a silent no-op."""
    given = [f"--{o}" for o in _CHECKPOINT_OPTIONS if getattr(args, o) is not None]
    if given and args.weights is None:
        raise UsageError(f"{', '.join(given)} read a checkpoint: give --weights CKPT")


def _load_weights(args, case: str, preset: str | None, tp: int | None = None, owners: int | None = None):
    """``--weights``: the case's weights with their sizes (``tools.convert.convert.Loaded``), progress on stderr; None
    without it."""
    if args.weights is None:
        return None
    from .tools.convert.convert import WeightSource, load

    source = WeightSource(args.weights, case, preset, tp, owners=owners, **_checkpoint_options(args))
    return load(source, log=lambda line: print(line, file=sys.stderr, flush=True))


_CHECKPOINT_OPTIONS = ("rank", "layout", "calibration", "alpha")


def _checkpoint_options(args) -> dict:
    """``_add_checkpoint_args``'s flags as ``WeightSource`` fields (those given)."""
    return {o: getattr(args, o) for o in _CHECKPOINT_OPTIONS if getattr(args, o) is not None}


def _sized_for_weights(spec: BuildSpec, loaded) -> BuildSpec:
    """``spec`` with the LM-head sizes of the weights (a TP shard's rows are the vocab shard)."""
    s = loaded.shapes
    if spec.vocab_shard not in (None, s.vocab_shard):
        raise UsageError(f"--vocab-shard {spec.vocab_shard}: the weights' LM-head shard has {s.vocab_shard} rows "
                         f"(tp {s.tp}); drop --vocab-shard")
    return dataclasses.replace(spec, vocab_shard=s.vocab_shard, tp=s.tp, owners=s.owners)


def _cmd_check(args) -> int:
    _refuse_checkpoint_options(args)
    if (args.module or args.artifact or args.compile_only) and args.weights:
        raise UsageError("--weights golden-checks a fresh build of a case on those weights; drop --module, --artifact "
                         "and --compile-only (run ARTIFACT --weights runs an artifact on them)")
    if args.module and args.artifact:
        raise UsageError("--artifact checks the module file's artifact on what it stores; drop --module")
    if args.module:
        return _cmd_check_module(args)
    if args.shape:
        raise UsageError("--shape sizes a module file's inputs (check --module FILE.py); a case takes --tokens")
    if args.artifact or args.compile_only:
        return _cmd_check_prebuilt(args)
    spec, debug = _build_spec(args), _debug_options(args)
    loaded = _load_weights(args, spec.case, spec.preset, spec.tp, spec.owners)
    if loaded is not None:
        spec = _sized_for_weights(spec, loaded)
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(LogitsTolerance)
             if getattr(args, f.name) is not None}
    with phase("import"):
        from .artifact.export import build_target, parse_archs
        from .tools.check.check import check

    result = check(dataclasses.replace(spec, target=build_target(args.target, parse_archs(args.arch))), debug,
                   seed=args.seed, report=args.report, logits_tol=LogitsTolerance(**given) if given else None,
                   perturb_logit=parse_logit_perturbation(args.perturb_logit) if args.perturb_logit else None,
                   profile=args.profile, nan_check=args.nan_check,
                   weights=None if loaded is None else loaded.weights)
    _print_check(args, result)
    if result.profile is not None and result.dump_dir:
        print(f"profile: {result.dump_dir}/profile.json")
    _print_reproducers(result)
    code = _check_exit(args, result)
    print(time_line())
    return code


def _print_check(args, result) -> None:
    """A check's verdict table, its NaN origin and profile when asked, the debugging footer."""
    from .verify.results import summary_table

    print(summary_table(result))
    if result.nan_checked:
        print(result.nan_origin.describe() if result.nan_origin else "NaN/Inf: none in any kernel call's output")
    if result.profile is not None:
        print(result.profile.table())
    _print_debug_footer(args, result.pass_records, result.gate, result.dump_dir)


def _print_reproducers(result) -> None:
    if result.repro_dir:
        print(f"reproducer: {result.repro_dir} (python {result.repro_dir}/repro.py)")
    elif result.repro_error:
        print(f"reproducer: not written: {result.repro_error}")
    if result.kernel_repro_dir:
        print(f"kernel reproducer: {result.kernel_repro_dir} (python {result.kernel_repro_dir}/repro.py)")


def _cmd_check_module(args) -> int:
    """``check --module FILE.py``: the user's own model against its reference (``tools.check.module_check``)."""
    _refuse_case_options(args, "check", keep=("seed", "nan_check"))
    debug = _debug_options(args)
    with phase("import"):
        from .ir.module_sizes import parse_shapes
        from .tools.check.check import check

    result = check(debug=debug, tolerance=ModuleTolerance(args.atol, args.rtol), report=args.report,
                   profile=args.profile, shapes=parse_shapes(args.shape), seed=args.seed, nan_check=args.nan_check,
                   **_module_options(args))
    _print_check(args, result)
    _print_reproducers(result)
    code = _check_exit(args, result)
    print(time_line())
    return code


def _cmd_localize(args) -> int:
    require_writable(args.report, "--report")
    if args.module:
        return _cmd_localize_module(args)
    if args.against is None:
        raise UsageError("localize of a case needs --against KEY=VALUE (the reference build, e.g. schedule=none)")
    if args.atol is not None or args.rtol is not None:
        raise UsageError("--atol/--rtol apply to localize --module against torch; a case uses its own tolerance")
    spec, debug = _build_spec(args), _debug_options(args)
    with phase("import"):
        from .tools.check.localize import localize

    result = localize(spec, debug, against=args.against, seed=args.seed,
                      max_mb=args.localize_max_mb, log=lambda line: print(line, file=sys.stderr))
    return _localize_verdict(args, result)


def _localize_verdict(args, result) -> int:
    """A localize's table, its JSON report when asked, and its exit code: 0 nothing differs, 1 something does."""
    print(result.table())
    if args.report:
        result.write_json(args.report)
        print(f"report: {args.report}")
    return 0 if result.passed else 1


def _module_tolerance(args) -> ModuleTolerance | None:
    """``--atol``/``--rtol`` of a module file's comparison; None: ``assert_close``'s defaults per dtype."""
    return None if args.atol is None and args.rtol is None else ModuleTolerance(args.atol, args.rtol)


def _cmd_localize_module(args) -> int:
    """``localize --module FILE.py``: the first op that differs from eager torch (or, ``--against``, the first
    kernel call that differs from another build's)."""
    _refuse_case_options(args, "localize")
    debug = _debug_options(args)
    if args.localize_max_mb is not None:
        raise UsageError("--localize-max-mb applies to a case; a module file's calls are compared at its example "
                         "size in one run")
    with phase("import"):
        from .tools.check.module_localize import localize_module

    result = localize_module(debug=debug, against=args.against, tolerance=_module_tolerance(args),
                             log=lambda line: print(line, file=sys.stderr), **_module_options(args))
    return _localize_verdict(args, result)


def _cmd_minimize(args) -> int:
    """``minimize --module FILE.py``: the smallest failing piece of the file's graph (``tools.minimize``)."""
    if not args.module:
        raise UsageError("minimize cuts your own model: give --module FILE.py")
    _refuse_case_options(args, "minimize")
    require_writable(args.out, "--out")
    debug = _debug_options(args)
    with phase("import"):
        from .tools.minimize.minimize import minimize_module

    result = minimize_module(debug=debug, tolerance=_module_tolerance(args), out=args.out,
                             log=lambda line: print(line, file=sys.stderr), **_module_options(args))
    print(result.summary())
    print(time_line())
    return 0


def _check_exit(args, result) -> int:
    """Where the report went, and the exit code of a check: 0 passed, 1 failed."""
    if args.report:
        print(f"report: {args.report}")
    return 0 if result.passed else 1


def _rpc(args) -> tuple[str, str] | None:
    """``(tracker, key)`` of ``--rpc-tracker``/``--rpc-key``; a key without a tracker is refused, not ignored."""
    if args.rpc_tracker:
        return args.rpc_tracker, args.rpc_key
    if _given_flags(args, args.command, ("rpc_key",)):
        raise UsageError("--rpc-key names a server of an --rpc-tracker; give the tracker, or drop --rpc-key")
    return None


def _cmd_tune(args) -> int:
    spec = BuildSpec(case=args.case, target=args.target, preset=args.preset, frontend=args.frontend,
                     vocab_shard=args.vocab_shard)
    if args.module:
        _refuse_case_options(args, "tune", keep=("seed",))  # the search's seed
    else:
        spec.resolve()
    from .tools.tune.tune import TuneOptions, tune

    rpc = _rpc(args)
    options = TuneOptions(trials=args.trials, work_dir=args.work_dir, seed=args.seed, rpc=rpc, space=args.space,
                          module=args.module)
    r = tune(spec, options, log=lambda line: print(line, file=sys.stderr))
    print(f"tuned {args.module or args.case} for {args.target}: {r.trials} trials in {r.seconds:.0f}s "
          f"({r.seconds_per_trial:.2f} s/trial){' (interrupted)' if r.interrupted else ''} -> {r.work_dir}")
    from .tools.tune.report import end_to_end, kernel_table

    print(kernel_table(r))
    if r.interrupted:
        return 130
    print(end_to_end(spec, args.module, remote=rpc is not None, elsewhere=None if r.read_by_builds else r.work_dir)
          .line())
    return 0


def _cmd_check_prebuilt(args) -> int:
    """``check --compile-only`` (build the artifact, discard it) and ``check --artifact DIR`` (no compile)."""
    for flag, given, what in (("--profile", args.profile, "times"), ("--nan-check", args.nan_check, "searches")):
        if given:  # both run a fresh build's kernels one by one
            raise UsageError(f"{flag} {what} a fresh build's kernels; drop --artifact/--compile-only")
    unused = _given_flags(args, "check", ("max_error_ratio", "atol", "rtol", "max_e2e_abs_diff", "perturb_logit",
                                          *(("seed", "report") if not args.artifact else ())))
    if unused:
        raise UsageError(f"{'--artifact checks with the default tolerances' if args.artifact else '--compile-only runs no check'}"
                         f", so {', '.join(unused)} cannot apply; drop them")
    if args.compile_only and not args.artifact:
        spec, debug = _build_spec(args), _debug_options(args)
        from .artifact.export import build, describe

        built = build(None, spec, debug, arch=args.arch)
        print(describe(built))
        _print_debug_footer(args, built.compiled.pass_records, built.compiled.gate, built.compiled.dump_dir)
        return 0
    defaults = build_parser().parse_args(["check"])

    def given(options) -> list[str]:
        return [f"--{o.replace('_', '-')}" for o in options if getattr(args, o) != getattr(defaults, o)]

    if given(_MANIFEST_OPTIONS):
        raise UsageError(f"--artifact takes {', '.join(given(_MANIFEST_OPTIONS))} from the artifact's manifest; "
                         "drop them")
    if given(_DEBUG_OPTIONS):
        raise UsageError(f"--artifact does not compile, so {', '.join(given(_DEBUG_OPTIONS))} cannot apply; "
                         "drop them")
    from .artifact.load import check_artifact
    from .verify.results import summary_table

    result = check_artifact(args.artifact, seed=args.seed, tokens=args.tokens, report=args.report)
    print(summary_table(result))
    return _check_exit(args, result)


def _cmd_build(args) -> int:
    if args.module:
        _refuse_case_options(args, "build")
    spec = ModuleSpec(args.module, args.target, args.schedule) if args.module else _build_spec(args)
    debug = _debug_options(args)  # refused before the imports
    with phase("import"):
        from .artifact.export import build, describe
        from .verify.results import summary_table

    built = build(args.out, spec, debug, arch=args.arch, force=args.force, check=args.check, seed=args.seed)
    if built.check is not None:
        print(summary_table(built.check))
    if built.path is None:
        print(f"the artifact FAILED its golden check: nothing was written ({args.out} is as it was)")
    else:
        print(describe(built))
    _print_debug_footer(args, built.compiled.pass_records, built.compiled.gate, built.compiled.dump_dir)
    print(time_line())
    return 0 if built.check is None or built.check.passed else 1


def _cmd_run(args) -> int:
    _refuse_checkpoint_options(args)
    if args.inputs is not None and args.out and os.path.realpath(args.out) == os.path.realpath(args.inputs):
        raise UsageError(f"--out {args.out} is the --inputs file; write the outputs elsewhere")
    if args.inputs is None and args.random_inputs is None:
        raise UsageError("give --inputs IN.npz (make one with `mtp-tvm inputs`) or --random-inputs")
    if args.random_inputs is None and (args.seed is not None or args.tokens is not None or args.shape):
        raise UsageError("--seed, --tokens and --shape size the seeded inputs of --random-inputs; drop them with "
                         "--inputs")
    from .artifact.load import load
    from .compiler.tensors import read_npz, write_npz

    artifact = load(args.artifact, allow_failed=args.allow_failed)
    loaded = None
    if args.weights is not None:  # a case's artifact (a module file's has no case to size weights by)
        case, shapes = artifact.sized()
        loaded = _load_weights(args, case.name, shapes.preset.name, shapes.tp, shapes.owners)
        if loaded.shapes.vocab_shard != shapes.vocab_shard:
            raise UsageError(f"{args.artifact} was built for vocab shard {shapes.vocab_shard}; the weights' LM-head "
                             f"shard has {loaded.shapes.vocab_shard} rows (build with --vocab-shard "
                             f"{loaded.shapes.vocab_shard})")
    if args.inputs is not None:
        inputs = read_npz(args.inputs, {n: t.dtype for n, t in artifact.input_specs.items()})
    else:
        from .ir.module_sizes import parse_shapes

        inputs = artifact.make_inputs(tokens=args.tokens, seed=args.seed or 0, shapes=parse_shapes(args.shape))
        if args.shape:
            print("at --shape: no stored reference fits this size, so nothing is checked (check --module "
                  "FILE.py --shape recomputes the golden there)")
    if loaded is not None:
        inputs = {**inputs, **loaded.weights}
    outputs = artifact.run(inputs)
    if args.out:
        write_npz(args.out, outputs)
    for name, a in outputs.items():
        print(f"{name:20s} {str(a.shape):16s} {a.dtype}")
    print(f"outputs: {args.out}" if args.out else "outputs: not written (--out OUT.npz keeps them)")
    return 0


def _refuse_build_flags(args, command: str) -> None:
    """``--artifact`` takes what was built from the artifact's manifest: a build flag set beside it is an error."""
    given = _given_flags(args, command, ("case", "preset", "vocab_shard", "owners", "tp", "target", "frontend",
                                         "schedule"), ("--out", "x") if command == "inputs" else ())
    if given:
        raise UsageError(f"--artifact takes {', '.join(given)} from the artifact's manifest; drop them")


def _cmd_inputs(args) -> int:
    """The seeded inputs ``check`` draws, as an ``.npz`` for ``run --inputs``: of a case (no build) or of an
    artifact (its manifest's case and sizes)."""
    require_writable(args.out, "--out", force=args.force)
    if args.artifact:
        _refuse_build_flags(args, "inputs")
        from .artifact.load import load

        inputs = load(args.artifact, allow_failed=True).make_inputs(tokens=args.tokens, seed=args.seed)
    else:
        spec = BuildSpec(case=args.case or _DEFAULTS.case, preset=args.preset or _DEFAULTS.preset,
                         tokens=args.tokens, vocab_shard=args.vocab_shard, owners=args.owners, tp=args.tp)
        case, shapes = spec.resolve()
        inputs = case.make_inputs(shapes, args.seed)
    from .compiler.tensors import to_numpy, write_npz

    arrays = {name: to_numpy(t) for name, t in inputs.items()}
    write_npz(args.out, arrays)
    for name, a in arrays.items():
        print(f"{name:20s} {str(a.shape):16s} {a.dtype}")
    print(f"inputs: {args.out}")
    return 0


def _cmd_dumps(args) -> int:
    from .tools.dumps import browse as dump_browse

    if args.dumps_command == "list":
        print(dump_browse.list_runs(args.root))
    elif args.dumps_command == "show":
        print(dump_browse.show(dump_browse.find_run(args.run, args.root), args.pass_, args.changed, args.phase,
                               func=args.func, history=args.history, nested=args.nested), end="")
    elif args.dumps_command == "compare":
        from .tools.dumps.compare import compare_command

        print(compare_command(dump_browse.find_run(args.a, args.root), dump_browse.find_run(args.b, args.root),
                              args.html), end="")
    elif args.dumps_command == "prune":
        print(dump_browse.prune_runs(args.root, args.keep, args.older_than))
    elif args.dumps_command == "keep":
        print(dump_browse.keep(dump_browse.find_run(args.run, args.root)))
    else:
        print(dump_browse.diff(dump_browse.find_run(args.run, args.root), args.a, args.b))
    return 0


def _cmd_bisect(args) -> int:
    if args.module:
        return _cmd_bisect_module(args)
    spec, debug = _build_spec(args), _debug_options(args)
    from .tools.bisect.bisection import bisect_passes, bisect_schedule

    if debug.bisect_limit is not None:
        raise UsageError("bisect chooses the --bisect-limit itself; drop it")
    if args.func and not args.schedule_trace:
        raise UsageError("--func names the PrimFunc of a --schedule-trace; give the trace, or drop --func")
    if args.schedule_trace:
        if not args.func:
            raise UsageError("--schedule-trace needs --func NAME (the PrimFunc the trace schedules)")
        try:
            text = open(args.schedule_trace).read()
        except OSError as e:
            raise UsageError(f"cannot read schedule trace {args.schedule_trace}: {e.strerror}") from None
        result = bisect_schedule(args.func, text, spec, seed=args.seed, search=args.search)
    else:
        result = bisect_passes(spec, debug.replace(dump_passes=None), seed=args.seed, search=args.search)
    _print_bisect(result)
    if result.found and result.limits and args.dump_passes:
        from .tools.check.check import check

        r = check(spec, debug.replace(bisect_limit=result.limits[1]), seed=args.seed, log=lambda *_: None)
        stem = next(p.diff for p in r.pass_records if p.index == result.culprit["index"])
        print(f"dumps of the first failing build: {r.dump_dir} (the culprit's diff: {r.dump_dir}/{stem})")
    return 0 if result.found else 1


def _print_bisect(result) -> None:
    kinds = "passes" if result.kind == "pass" else result.kind + "s"
    print(f"bisect over {result.candidates} candidate {kinds}, {len(result.probes)} builds (search: {result.search})")
    print(("FOUND " if result.found else "NOT FOUND: ") + result.message)


def _cmd_bisect_module(args) -> int:
    """``bisect --module FILE.py``: the first optional pass after which the file's check fails."""
    _refuse_case_options(args, "bisect")
    if args.schedule_trace or args.func:
        raise UsageError("bisect --module bisects passes; --schedule-trace/--func apply to a case")
    debug = _debug_options(args)
    from .tools.bisect.bisection import bisect_passes

    result = bisect_passes(debug=debug.replace(dump_passes=None), search=args.search, **_module_options(args))
    _print_bisect(result)
    if result.found and result.limits and args.dump_passes:
        from .tools.check.check import check

        r = check(debug=debug.replace(bisect_limit=result.limits[1]), log=lambda *_: None, **_module_options(args))
        stem = next(p.diff for p in r.pass_records if p.index == result.culprit["index"])
        print(f"dumps of the first failing build: {r.dump_dir} (the culprit's diff: {r.dump_dir}/{stem})")
    return 0 if result.found else 1


def _names(text: str | None) -> tuple[str, ...]:
    """``"a, b"`` -> ``("a", "b")``: a comma list flag."""
    return tuple(filter(None, (s.strip() for s in (text or "").split(","))))


def _bench_spec(args) -> tuple[BuildSpec | None, tuple[str, ...]]:
    """What ``bench`` builds (None: the ``--artifact`` it times) and the other schedules it compares, checked."""
    compare = _names(args.compare_schedules)
    if args.artifact:
        _refuse_build_flags(args, "bench")
        return None, compare  # BenchOptions refuses --compare-schedules with an artifact
    spec = BuildSpec(case=args.case, target=args.target, preset=args.preset, frontend=args.frontend,
                     vocab_shard=args.vocab_shard, schedule=args.schedule)
    spec.resolve()
    with phase("import"):
        from .schedule.files import schedule_names

    known = schedule_names(spec.resolved_target)
    unknown = [s for s in compare if s not in known]
    if unknown:
        raise UsageError(f"--compare-schedules: unknown schedule {unknown[0]!r} for target {args.target}; choose "
                         f"from {', '.join(known)}")
    return spec, compare


def _cmd_bench_module(args) -> int:
    """``bench --module FILE.py``: the user's own model against torch eager and torch.compile; ``bench --artifact``
    of a module file's artifact: its binary on its stored example inputs."""
    _refuse_case_options(args, "bench")
    prebuilt = args.module is None
    refused = ("compare_schedules", "compare_frontends", "rpc_tracker", "rpc_key", "profile", "plot", "api",
               *(("target", "schedule") if prebuilt else ("artifact",)))
    given = _given_flags(args, "bench", refused, ("--module", "x.py"))
    if given:
        what = ("bench --artifact times a module file's artifact on its stored example inputs" if prebuilt
                else "bench --module times your file at its example inputs")
        raise UsageError(f"{what}; {', '.join(given)} cannot apply")
    require_writable(args.json, "--json")
    with phase("import"):
        from .tools.bench.bench import bench, parse_peers
        from .tools.bench.module_bench import ModuleBenchOptions

    options = ModuleBenchOptions(rounds=args.rounds, threads=args.threads,
                                 **({"peers": parse_peers(args.peers)} if args.peers is not None else {}))
    where = {"artifact": args.artifact} if prebuilt else _module_options(args)
    result = bench(options=options, log=lambda line: print(line, file=sys.stderr, flush=True), **where)
    print(result.table())
    if args.json:
        result.write_json(args.json)
        print(f"json: {args.json}")
    print(time_line())
    return 0


def _is_module_artifact(path) -> bool:
    """``artifact.manifest.is_module_artifact``, imported only when an artifact is given (the manifest's module
    imports TVM)."""
    from .artifact.manifest import is_module_artifact

    return is_module_artifact(path)


def _cmd_bench(args) -> int:
    _refuse_checkpoint_options(args)
    if args.module and args.weights:
        raise UsageError("--weights replaces a case's weights; bench --module times your file's own")
    if args.module or (args.artifact and _is_module_artifact(args.artifact)):
        return _cmd_bench_module(args)
    require_writable(args.json, "--json")
    require_writable(args.plot, "--plot")
    spec, compare = _bench_spec(args)
    if args.artifact and args.weights:
        raise UsageError("--weights replaces the weights of a build; bench an artifact on its seeded weights, or "
                         "drop --artifact")
    loaded = _load_weights(args, spec.case, spec.preset) if spec is not None else None
    if loaded is not None:
        spec = _sized_for_weights(spec, loaded)
    with phase("import"):
        from .tools.bench.bench import BenchOptions, bench, parse_peers, parse_tokens

    options = BenchOptions(tokens=parse_tokens(args.tokens) if args.tokens else (), rounds=args.rounds,
                           threads=args.threads, compare_schedules=compare,
                           compare_frontends=_names(args.compare_frontends), profile=args.profile,
                           rpc=_rpc(args),
                           artifact=args.artifact, api=args.api,
                           **({"peers": parse_peers(args.peers)} if args.peers is not None else {}))
    result = bench(spec, options, log=lambda line: print(line, file=sys.stderr, flush=True),
                   weights=None if loaded is None else loaded.weights)
    print(result.table())
    if result.profile is not None:
        print(result.profile.table())
    if args.json:
        result.write_json(args.json)
        print(f"json: {args.json}")
    if args.plot:
        result.plot(args.plot)
        print(f"plot: {args.plot}")
    print(time_line())
    return 0


def _cmd_convert(args) -> int:
    """A DeepSeek checkpoint's MTP weights as a case's W8A8 inputs, with the conversion's cost."""
    from .tools.convert.convert import WeightSource, convert

    given = {f: getattr(args, f) for f in ("atol", "rtol", "max_error_ratio") if getattr(args, f) is not None}
    source = WeightSource(args.checkpoint, args.case, args.preset, args.tp, owners=args.owners,
                          **_checkpoint_options(args))
    result = convert(source, args.out, seed=args.seed, tokens=args.tokens,
                     tolerance=RatioTolerance(**given) if given else None,
                     log=lambda line: print(line, file=sys.stderr, flush=True))
    print(result.table())
    if not result.passed:
        print(f"the converted projection FAILED against the checkpoint's own: nothing was written ({args.out} is as "
              "it was)")
    return 0 if result.passed else 1


def _cmd_list(args) -> int:
    from .contract.presets import make_shapes
    from .support.text_table import text_table

    s = make_shapes(args.preset, vocab_shard=args.vocab_shard)
    print(f"tensors at preset {s.preset.name} (D={s.hidden}), vocab shard {s.vocab_shard}, owners {s.owners}, "
          f"tp {s.tp}; T is the token count (any T >= 1: one binary), R = T/owners")
    for name, case in CASES.items():
        print(f"\n{name}: {case.description}")
        rows = [(kind, t.name, "[" + ", ".join(map(str, t.shape)) + "]", t.dtype)
                for kind, specs in (("in", case.input_specs(s)), ("out", case.output_specs(s)))
                for t in specs.values()]
        print("\n".join("  " + line for line in text_table([("", "tensor", "shape", "dtype"), *rows])))
    print("\npresets: " + ", ".join(f"{p.name} (D={p.hidden}, vocab={p.vocab})" for p in PRESETS.values()))
    return 0


def _add_check_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("check", parents=[common], help="build a case, run it on seeded inputs, golden-check every stage (--module FILE.py: "
                       "your own model against torch or its unoptimised build)")
    _add_build_args(p)
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    p.add_argument("--report", default=None, metavar="FILE", help="write the result as JSON")
    _add_arch_arg(p)
    _add_lm_head_check_args(p)
    p.add_argument("--artifact", default=None, metavar="DIR",
                   help="golden-check a prebuilt artifact on fresh seeded inputs (a --module artifact: its stored "
                        "example inputs and reference outputs), without compiling")
    p.add_argument("--compile-only", action="store_true",
                   help="build the target binary (CUDA device code included) and stop: no inputs, no run")
    _add_profile_arg(p)
    p.add_argument("--nan-check", action="store_true",
                   help="name the first kernel call whose output holds NaN/Inf while its inputs held none")
    _add_shape_arg(p, "with --module: ")
    _add_weights_arg(p)
    p.set_defaults(handler=_cmd_check)


def _add_localize_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("localize", parents=[common],
                       help="name the first kernel call whose numbers differ from a reference build's")
    _add_build_args(p)
    p.add_argument("--against", default=None, metavar="KEY=VALUE[,...]",
                   help="the reference build: target, frontend, schedule, disable-pass, bisect-limit, pass-plugin "
                        "(e.g. schedule=none); it drops this build's debugging changes unless named. A case needs "
                        "it; --module without it compares every op with eager torch")
    p.add_argument("--atol", type=float, default=None,
                   help="--module against torch: every op's absolute tolerance (default assert_close's per dtype)")
    p.add_argument("--rtol", type=float, default=None,
                   help="--module against torch: every op's relative tolerance (default assert_close's per dtype)")
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    p.add_argument("--localize-max-mb", type=float, default=None, metavar="MB",
                   help="keep at most MB of recorded tensors at once (oldest calls compared and dropped first)")
    p.add_argument("--report", default=None, metavar="FILE", help="write the result as JSON")
    p.set_defaults(handler=_cmd_localize)


def _add_tune_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("tune", parents=[common], help="tune a case's (or a --module FILE.py's) kernels with MetaSchedule "
                       "(records in schedules/tuned/)")
    _add_module_arg(p)
    _add_spec_args(p, sizes=False)
    _add_target_args(p)
    p.add_argument("--space", choices=TuneSpace.names(), default=TuneSpace.BOTH.value,
                   help="design spaces: our hand rules with sampled knobs, MetaSchedule's generic rules, or both "
                        "(default both)")
    p.add_argument("--trials", type=int, default=64, help="trials over all kernels (default 64)")
    p.add_argument("--work-dir", default=None, help="database folder (default schedules/tuned/<target>/<case>)")
    p.add_argument("--seed", type=int, default=0, help="search seed (default 0)")
    p.add_argument("--rpc-tracker", default=None, metavar="HOST:PORT", help="measure on a TVM RPC tracker's servers")
    p.add_argument("--rpc-key", default="mtp", help="device key registered with the tracker (default mtp)")
    p.set_defaults(handler=_cmd_tune)


def _add_build_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("build", parents=[common], help="build a case (or --module FILE.py) into an artifact folder: library, generated "
                       "source, manifest")
    _add_build_args(p)
    _add_arch_arg(p)
    p.add_argument("--out", required=True, metavar="DIR", help="the artifact folder to create")
    p.add_argument("--force", action="store_true", help="replace DIR if it is an existing artifact")
    p.add_argument("--check", action="store_true",
                   help="golden-check the written artifact before committing it; the result goes in its manifest")
    p.add_argument("--seed", type=int, default=0, help="input seed for --check (default 0)")
    p.set_defaults(handler=_cmd_build)


def _add_run_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("run", parents=[common], help="run an artifact on named inputs from an .npz file, or on seeded ones")
    p.add_argument("artifact", metavar="DIR", help="an artifact folder written by build")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--inputs", metavar="IN.npz", help="one array per input name (mtp-tvm inputs writes one)")
    group.add_argument("--random-inputs", action="store_const", const=True, default=None,
                       help="the seeded inputs check draws (--seed, --tokens)")
    p.add_argument("--seed", type=int, default=None, help="with --random-inputs: input seed (default 0)")
    p.add_argument("--tokens", type=int, default=None,
                   help="with --random-inputs: token count T (default: the artifact's)")
    _add_shape_arg(p, "with --random-inputs, a module file's artifact: ")
    p.add_argument("--out", metavar="OUT.npz", help="where to write the outputs (without it: shapes and dtypes only)")
    p.add_argument("--allow-failed", action="store_true",
                   help="run an artifact even though its recorded golden check failed")
    _add_weights_arg(p)
    p.set_defaults(handler=_cmd_run)


def _add_bench_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bench", parents=[common], help="time a case against torch (eager, torch.compile) and numpy, each in its own "
                                     "process, side by side, at every T, against the measured roofline")
    _add_spec_args(p, f"logits, projection, norm or tail (default {_DEFAULTS.case})", sizes=False)
    _add_target_args(p)
    _add_schedule_arg(p)
    p.add_argument("--artifact", default=None, metavar="DIR",
                   help="time this prebuilt artifact (mtp-tvm build) instead of building: its manifest says what "
                        "it is, and TVM's runtime alone will do (TVM_USE_RUNTIME_LIB=1, e.g. on the target machine)")
    _add_module_arg(p)
    p.add_argument("--tokens", default=None, metavar="T[,T...]",
                   help="token count T, or a comma list swept in one run, e.g. 1,2,4,8,16 (default: the preset's "
                        "B*S = 8)")
    p.add_argument("--peers", default=None, metavar="A,B,...",
                   help="the peers that race TVM, '' for none (default all: torch_bf16, torch_fp32, numpy_fp32, "
                        "torch_golden, torch_compile, torch_compile_max_autotune; with --module: torch_eager, "
                        "torch_compile, torch_compile_max_autotune)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads of every worker process, TVM's and each peer's (default: every usable core)")
    p.add_argument("--rounds", type=int, default=7,
                   help="timing rounds, each timing TVM and every peer in turn; medians over them (default 7)")
    p.add_argument("--compare-schedules", default=None, metavar="A,B,...",
                   help="also time TVM with these schedules in the same rounds, e.g. none,default,tuned,dlight")
    p.add_argument("--compare-frontends", default=None, metavar="A,B,...",
                   help="also time TVM built from these frontends in the same rounds, e.g. torch,tir (the case "
                        "imported from torch.export against the hand-written kernels)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the figures as JSON")
    p.add_argument("--rpc-tracker", default=None, metavar="HOST:PORT",
                   help="time TVM on a server of this TVM RPC tracker (as tune measures); peers are not timed then")
    p.add_argument("--rpc-key", default="mtp", help="device key registered with the tracker (default mtp)")
    p.add_argument("--api", action="store_true",
                   help="also time the public API path beside the kernel (tvm:api): bound.run on activations "
                        "already on the binary's device (torch tensors), outputs left there")
    _add_profile_arg(p)
    p.add_argument("--plot", default=None, metavar="PNG", help="write a bar chart (matplotlib)")
    _add_weights_arg(p)
    p.set_defaults(handler=_cmd_bench)


def _add_inputs_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("inputs", parents=[common], help="write the seeded inputs check draws, as an .npz for run --inputs")
    _add_spec_args(p, unset=True)
    p.add_argument("--tokens", type=int, default=None, help="token count T (default: the preset's B*S = 8)")
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    p.add_argument("--artifact", default=None, metavar="DIR",
                   help="the inputs of this artifact (its case and sizes; --tokens and --seed still apply)")
    p.add_argument("--out", required=True, metavar="IN.npz", help="the .npz to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.set_defaults(handler=_cmd_inputs)


def _add_convert_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("convert", parents=[common], help="a DeepSeek checkpoint's MTP weights as a case's W8A8 weight inputs (one "
                       "safetensors file), with the conversion's error against the checkpoint's own FP8 math")
    p.add_argument("checkpoint", metavar="CKPT", help="a checkpoint folder (shards and model.safetensors.index.json) or file")
    p.add_argument("--case", default=_DEFAULTS.case, help=f"whose weight inputs to write: one of {', '.join(CASES)} "
                   f"(default {_DEFAULTS.case})")
    p.add_argument("--preset", default=None, help="tiny, flash or pro (default: the checkpoint's hidden size decides)")
    p.add_argument("--tp", type=int, default=None, help="TP degree of the LM head: the rank's rows are vocab / TP (default 2)")
    p.add_argument("--owners", type=int, default=None, help="LM head: token owners 2, 4 or 8 (default 2)")
    _add_checkpoint_args(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the projection's activations without --calibration (default 0)")
    p.add_argument("--tokens", type=int, default=None, help="token count of those activations (default the preset's B*S = 8)")
    p.add_argument("--atol", type=float, default=None, help="the projection's absolute tolerance (default 0.03 x the reference's RMS)")
    p.add_argument("--rtol", type=float, default=None, help="the projection's relative tolerance (default 0.03)")
    p.add_argument("--max-error-ratio", type=float, default=None, help="the projection's outlier budget (default 0.02)")
    p.add_argument("--out", required=True, metavar="FILE.safetensors", help="the converted weights to write")
    p.set_defaults(handler=_cmd_convert)


def _add_list_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("list", parents=[common], help="list cases, every tensor's shape and dtype, and presets")
    p.add_argument("--preset", default=_DEFAULTS.preset,
                   help=f"the sizes to show: one of {', '.join(PRESETS)} (default {_DEFAULTS.preset})")
    p.add_argument("--vocab-shard", type=int, default=None, help="vocab shard columns (default 512)")
    p.set_defaults(handler=_cmd_list)


def _add_dumps_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("dumps", parents=[common], help="read run folders written by --dump-passes")
    p.set_defaults(handler=_cmd_dumps)
    p.add_argument("--root", default=None, help="the dumps root (default dumps/ or $MTP_TVM_DUMPS)")
    dsub = p.add_subparsers(dest="dumps_command", required=True)
    dsub.add_parser("list", parents=[common], help="every run folder: case, target, passes, status")
    q = dsub.add_parser("show", parents=[common], help="a run's pass table, or one pass's dump")
    q.add_argument("run", help="run folder, its name, a unique prefix, or 'latest'")
    q.add_argument("pass_", nargs="?", metavar="PASS", help="pass number, name, 'input', or a file of the run")
    q.add_argument("--changed", action="store_true", help="in the table, only passes that changed the IR")
    q.add_argument("--phase", help="in the table, only passes of this phase")
    q.add_argument("--nested", action="store_true",
                   help="in the table, also the passes run inside another (folded into its row by default)")
    q.add_argument("--func", metavar="NAME", help="only this function (of PASS's module, or with --history)")
    q.add_argument("--history", action="store_true",
                   help="with --func: every pass that changed the function, its diffs in order")
    q = dsub.add_parser("compare", parents=[common], help="two runs pass by pass: where they diverge, and their generated code")
    q.add_argument("a", metavar="RUN_A", help="run folder, its name, a unique prefix, or 'latest'")
    q.add_argument("b", metavar="RUN_B", help="run folder, its name, a unique prefix, or 'latest'")
    q.add_argument("--html", metavar="OUT.html", help="also write the comparison as one self-contained page")
    q = dsub.add_parser("prune", parents=[common], help="remove old complete runs (never one being written or marked kept)")
    q.add_argument("--keep", type=int, default=None, metavar="N", help="keep the newest N complete runs")
    q.add_argument("--older-than", default=None, metavar="AGE",
                   help="remove complete runs finished more than AGE ago: a number with d, h or m (7d, 12h)")
    q = dsub.add_parser("keep", parents=[common], help="mark a run so that pruning never removes it")
    q.add_argument("run", help="run folder, its name, a unique prefix, or 'latest'")
    q = dsub.add_parser("diff", parents=[common], help="unified diff between the modules after two passes")
    q.add_argument("run", help="run folder, its name, a unique prefix, or 'latest'")
    q.add_argument("a", metavar="A", help="pass number or name ('input' for the compiler's input)")
    q.add_argument("b", metavar="B", help="pass number or name")


def _add_bisect_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bisect", parents=[common], help="name the first pass (or schedule step) after which the golden check fails (also "
                       "of a --module FILE.py)")
    _add_build_args(p)
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    p.add_argument("--search", choices=BisectSearch.names(), default=BisectSearch.BINARY.value,
                   help="binary: log2(n) builds, exact when failure is monotone; linear: every prefix")
    p.add_argument("--schedule-trace", metavar="FILE",
                   help="bisect the steps of this schedule trace (Python text of str(sch.trace)) instead of passes")
    p.add_argument("--func", metavar="NAME", help="the PrimFunc that --schedule-trace schedules")
    p.set_defaults(handler=_cmd_bisect)


def _add_minimize_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("minimize", parents=[common], help="cut a failing --module FILE.py's exported graph down to the "
                       "smallest piece that still fails check --module, written as a module file")
    _add_build_args(p)
    p.add_argument("--out", default=None, metavar="FILE.py",
                   help="where to write the piece (default: <module>_min.py in the current folder)")
    p.add_argument("--atol", type=float, default=None, help="every output's absolute tolerance, as check --module's")
    p.add_argument("--rtol", type=float, default=None, help="every output's relative tolerance, as check --module's")
    p.set_defaults(handler=_cmd_minimize)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mtp-tvm", description="DeepSeek-V4 MTP decode tail on Apache TVM")
    common = argparse.ArgumentParser(add_help=False)  # also after the subcommand (there not set: the above's)
    for p in (parser, common):
        p.add_argument("--debug", action="store_true", help="show tracebacks for errors",
                       **({"default": argparse.SUPPRESS} if p is common else {}))
        p.add_argument("--verbose", action="store_true", help="let TVM's and LLVM's own log lines through "
                       "(otherwise kept in the run folder's tvm.log)", **({"default": argparse.SUPPRESS} if p is common else {}))
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_check_command, _add_localize_command, _add_tune_command, _add_build_command, _add_run_command,
                _add_bench_command, _add_inputs_command, _add_convert_command, _add_list_command, _add_dumps_command,
                _add_bisect_command, _add_minimize_command):
        add(sub, common)
    return parser


def _process_startup() -> float:
    """Seconds this process ran before the command started (the interpreter, the parser's imports), counted as
    import in the time line: its age from ``/proc`` (to the 10 ms tick; psutil rounds the boot time to whole
    seconds); 0 where there is no ``/proc``."""
    try:
        started = int(open("/proc/self/stat").read().rpartition(")")[2].split()[19])  # field 22: starttime
        return max(float(open("/proc/uptime").read().split()[0]) - started / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


def _terminated(_signum, _frame):
    """SIGTERM (a job scheduler, ``kill``) unwinds like Ctrl-C, so temporary folders and files are removed."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run one command. As a program (``argv`` None: ``mtp-tvm``, ``python -m mtp_tvm``) the process ends as
    soon as its output is out: the interpreter's teardown of TVM's and torch's objects takes seconds (2-7 s on a
    2-core machine) and does nothing a command needs; atexit handlers still run."""
    code = _run(argv)
    if argv is None:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe (``| head``)
                stream.flush()
        os._exit(code)
    return code


def _refuse_empty_values(args) -> None:
    """An empty path (``--module ''``) used to read as no option at all: the default case checked, nothing dumped."""
    for name in ("module", "dump_passes"):
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            raise UsageError(f"--{name.replace('_', '-')} needs a value, got an empty one")


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    start(_process_startup())
    if args.verbose:
        os.environ[VERBOSE_ENV] = "1"
    # the arrays a command passes are its own (read from files): the warning is for an API caller's arrays
    warnings.filterwarnings("ignore", message="mtp_tvm made numpy weight")
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if on_main_thread else None
    try:
        _refuse_empty_values(args)
        return args.handler(args)
    except MtpError as e:
        if args.debug:
            traceback.print_exc()
        print(f"mtp-tvm: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("mtp-tvm: interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:  # nothing of ours exits inside a handler: user code (a plugin) did; never a success
        if args.debug:
            traceback.print_exc()
        print(f"mtp-tvm: error: user code called sys.exit({e.code!r}) during {args.command}; nothing was "
              "completed", file=sys.stderr)
        return 2
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def parse_logit_perturbation(text: str) -> tuple[int, int, int, float]:
    """``"OWNER,ROW,COL[,DELTA]"`` (DELTA default 1.0) -> a tuple for ``check(perturb_logit=...)``."""
    parts = [p.strip() for p in text.split(",")]
    try:
        if len(parts) not in (3, 4):
            raise ValueError
        return int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3]) if len(parts) == 4 else 1.0
    except ValueError:
        raise UsageError(f"perturbation must be OWNER,ROW,COL[,DELTA] (integers, DELTA a number), got {text!r}"
                         ) from None
