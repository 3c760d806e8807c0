"""``check``, ``localize`` and ``minimize``: the golden check of a case, a module file or an artifact, and its
follow-ups (``tools/check``, ``tools/minimize``)."""

from __future__ import annotations

import argparse
import sys

from ..support.atomic_file import require_writable
from ..support.flags import Flag
from ..support.timing import phase, time_line
from ..verify.tolerances import LogitsTolerance
from .common import (
    ARTIFACT,
    CHECKPOINT_WITHOUT_WEIGHTS,
    COMPILE_ONLY,
    DEBUG_OPTIONS,
    MANIFEST_OPTIONS,
    MAX_E2E_ABS_DIFF,
    NAN_CHECK,
    PERTURB_LOGIT,
    REPORT,
    SEED,
    TOLERANCE_OPTIONS,
    Refusal,
    add_arch_arg,
    add_build_args,
    add_profile_arg,
    add_shape_arg,
    add_tolerance_args,
    add_weights_arg,
    build_spec,
    case_flags_refused,
    check_exit,
    debug_options,
    given_weights,
    module_options,
    print_debug_footer,
    print_reproducers,
    refuse,
    source_spec,
    tolerance_of,
)

AGAINST = Flag("against", "the reference build: target, frontend, schedule, disable-pass, bisect-limit, pass-plugin "
               "(e.g. schedule=none); it drops this build's debugging changes unless named. A case needs it; --module "
               "without it compares every op with eager torch", metavar="KEY=VALUE[,...]")
LOCALIZE_MAX_MB = Flag("localize_max_mb", "keep at most MB of recorded tensors at once (oldest calls compared and "
                       "dropped first)", type=float, metavar="MB")
MINIMIZE_OUT = Flag("out", "where to write the piece", shown="<module>_min.py in the current folder",
                    metavar="FILE.py")


def _prebuilt(args) -> bool:
    """``--artifact`` (no compile) or ``--compile-only`` (no check)."""
    return bool(args.artifact or args.compile_only)


def _add_check_tolerance_args(p: argparse.ArgumentParser) -> None:
    """Every comparison's tolerance, and the LM-head logits comparator's own options (cases lm-head,
    tail-lm-head; spec §3.3)."""
    add_tolerance_args(p)
    for flag in (MAX_E2E_ABS_DIFF, PERTURB_LOGIT):
        flag.add_to(p)


def _cmd_check(args) -> int:
    refuse(args, CHECKPOINT_WITHOUT_WEIGHTS,
           Refusal("--weights golden-checks a fresh build of a case on those weights; drop --module, --artifact and "
                   "--compile-only (run ARTIFACT --weights runs an artifact on them)", ("weights",),
                   lambda args: args.module or _prebuilt(args)),
           Refusal("--artifact checks the module file's artifact on what it stores; drop --module", ("module",),
                   lambda args: args.artifact))
    if args.module:
        return _cmd_check_module(args)
    refuse(args, Refusal("--shape sizes a module file's inputs (check --module FILE.py); a case takes --tokens",
                         ("shape",)))
    if _prebuilt(args):
        return _cmd_check_prebuilt(args)
    spec, debug = build_spec(args), debug_options(args)
    loaded = given_weights(args, spec.case, spec.preset, spec.tp, spec.owners)
    if loaded is not None:
        spec = loaded.sized(spec)
    tolerance = tolerance_of(args)
    logits_tol = None if args.max_e2e_abs_diff is None else LogitsTolerance(
        **tolerance.given(), max_e2e_abs_diff=args.max_e2e_abs_diff)  # the rest as every output's
    with phase("import"):
        from ..tools.check.check import check

    result = check(spec, debug, seed=args.seed, report=args.report, tolerance=tolerance, logits_tol=logits_tol,
                   perturb_logit=args.perturb_logit, profile=args.profile, nan_check=args.nan_check, arch=args.arch,
                   weights=None if loaded is None else loaded.weights)
    _print_check(args, result)
    if result.profile is not None and result.dump_dir:
        print(f"profile: {result.dump_dir}/profile.json")
    print_reproducers(result)
    code = check_exit(args, result)
    print(time_line())
    return code


def _print_check(args, result) -> None:
    """A check's verdict table, its NaN origin and profile when asked, the debugging footer."""
    from ..verify.results import summary_table

    print(summary_table(result))
    if result.nan_checked:
        print(result.nan_origin.describe() if result.nan_origin else "NaN/Inf: none in any kernel call's output")
    if result.profile is not None:
        print(result.profile.table())
    print_debug_footer(args, result.pass_records, result.gate, result.dump_dir)


def _cmd_check_module(args) -> int:
    """``check --module FILE.py``: the user's own model against its reference (``tools.check.check``)."""
    refuse(args, case_flags_refused(keep=("seed", "nan_check")),
           Refusal("--module runs your file's example_inputs(), so {flags} cannot apply without --shape (a seed "
                   "draws inputs only at another size); drop it", ("seed",),
                   lambda args: args.seed and not args.shape))  # the API's refusal names its keyword
    debug = debug_options(args)
    with phase("import"):
        from ..ir.module_sizes import parse_shapes
        from ..tools.check.check import check

    result = check(debug=debug, tolerance=tolerance_of(args), report=args.report,
                   profile=args.profile, shapes=parse_shapes(args.shape), seed=args.seed, nan_check=args.nan_check,
                   **module_options(args))
    _print_check(args, result)
    print_reproducers(result)
    code = check_exit(args, result)
    print(time_line())
    return code


def _cmd_localize(args) -> int:
    """``localize``: a case against the build ``--against`` names; a module file against eager torch op by op
    (or, ``--against``, another build of it)."""
    require_writable(args.report, "--report")
    spec, debug = source_spec(args), debug_options(args)  # a case without --against: refused by localize()
    with phase("import"):
        from ..tools.check.localize import localize

    result = localize(spec, debug, against=args.against, seed=args.seed, tolerance=tolerance_of(args),
                      max_mb=args.localize_max_mb, log=lambda line: print(line, file=sys.stderr))
    return _localize_verdict(args, result)


def _localize_verdict(args, result) -> int:
    """A localize's table, its JSON report when asked, and its exit code: 0 nothing differs, 1 something does."""
    print(result.table())
    if args.report:
        result.write_json(args.report)
        print(f"report: {args.report}")
    return 0 if result.passed else 1


def _cmd_minimize(args) -> int:
    """``minimize --module FILE.py``: the smallest failing piece of the file's graph (``tools.minimize``)."""
    refuse(args, Refusal("minimize cuts your own model: give --module FILE.py", when=lambda args: not args.module),
           case_flags_refused())
    require_writable(args.out, "--out")
    debug = debug_options(args)
    with phase("import"):
        from ..tools.minimize.minimize import minimize_module

    result = minimize_module(debug=debug, tolerance=tolerance_of(args), out=args.out,
                             log=lambda line: print(line, file=sys.stderr), **module_options(args))
    print(result.summary())
    print(time_line())
    return 0


def _cmd_check_prebuilt(args) -> int:
    """``check --compile-only`` (build the artifact, discard it) and ``check --artifact DIR`` (no compile)."""
    compared = (*TOLERANCE_OPTIONS, "max_e2e_abs_diff", "perturb_logit")
    refuse(args, *(Refusal(f"{{flags}} {what} a fresh build's kernels; drop --artifact/--compile-only", (flag,))
                   for flag, what in (("profile", "times"), ("nan_check", "searches"))),  # kernels one by one
           Refusal("--artifact checks with the default tolerances, so {flags} cannot apply; drop them", compared,
                   lambda args: args.artifact),
           Refusal("--compile-only runs no check, so {flags} cannot apply; drop them", (*compared, "seed", "report"),
                   lambda args: not args.artifact))
    if not args.artifact:
        spec, debug = build_spec(args), debug_options(args)
        from ..artifact.export import build, describe

        built = build(None, spec, debug, arch=args.arch)
        print(describe(built))
        print_debug_footer(args, built.compiled.pass_records, built.compiled.gate, built.compiled.dump_dir)
        return 0
    refuse(args, Refusal("--artifact takes {flags} from the artifact's manifest; drop them", MANIFEST_OPTIONS),
           Refusal("--artifact does not compile, so {flags} cannot apply; drop them", DEBUG_OPTIONS))
    from ..artifact.load import check_artifact
    from ..verify.results import summary_table

    result = check_artifact(args.artifact, seed=args.seed, tokens=args.tokens, report=args.report)
    print(summary_table(result))
    return check_exit(args, result)


def add_check_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("check", parents=[common], help="build a case, run it on seeded inputs, golden-check every "
                       "stage (--module FILE.py: your own model against torch or its unoptimised build)")
    add_build_args(p)
    SEED.add_to(p)
    REPORT.add_to(p)
    add_arch_arg(p)
    _add_check_tolerance_args(p)
    ARTIFACT.add_to(p, "golden-check a prebuilt artifact on fresh seeded inputs (a --module artifact: its stored "
                       "example inputs and reference outputs), without compiling")
    COMPILE_ONLY.add_to(p)
    add_profile_arg(p)
    NAN_CHECK.add_to(p)
    add_shape_arg(p, "with --module: ")
    add_weights_arg(p)
    p.set_defaults(handler=_cmd_check)


def add_localize_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("localize", parents=[common],
                       help="name the first kernel call whose numbers differ from a reference build's")
    add_build_args(p)
    AGAINST.add_to(p)
    add_tolerance_args(p)
    SEED.add_to(p)
    LOCALIZE_MAX_MB.add_to(p)
    REPORT.add_to(p)
    p.set_defaults(handler=_cmd_localize)


def add_minimize_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("minimize", parents=[common], help="cut a failing --module FILE.py's exported graph down to the "
                       "smallest piece that still fails check --module, written as a module file")
    add_build_args(p)
    MINIMIZE_OUT.add_to(p)
    add_tolerance_args(p)
    p.set_defaults(handler=_cmd_minimize)

