"""``dumps``: reading the run folders ``--dump-passes`` writes (``tools/dumps``)."""

from __future__ import annotations

import argparse

from ..support.flags import Flag

ROOT = Flag("root", "the dumps root", shown="dumps/ or $MTP_TVM_DUMPS", metavar="DIR")
CHANGED = Flag("changed", "in the table, only passes that changed the IR")
PHASE = Flag("phase", "in the table, only passes of this phase", metavar="PHASE")
NESTED = Flag("nested", "in the table, also the passes run inside another (folded into its row by default)")
FUNC = Flag("func", "only this function (of PASS's module, or with --history)", metavar="NAME")
HISTORY = Flag("history", "with --func: every pass that changed the function, its diffs in order")
HTML = Flag("html", "also write the comparison as one self-contained page", metavar="OUT.html")
KEEP = Flag("keep", "keep the newest N complete runs", type=int, metavar="N")
OLDER_THAN = Flag("older_than", "remove complete runs finished more than AGE ago: a number with d, h or m (7d, 12h)",
                  metavar="AGE")


def _cmd_dumps(args) -> int:
    from ..tools.dumps import browse as dump_browse

    if args.dumps_command == "list":
        print(dump_browse.list_runs(args.root))
    elif args.dumps_command == "show":
        print(dump_browse.show(dump_browse.find_run(args.run, args.root), args.pass_, args.changed, args.phase,
                               func=args.func, history=args.history, nested=args.nested), end="")
    elif args.dumps_command == "compare":
        from ..tools.dumps.compare_page import compare_command

        print(compare_command(dump_browse.find_run(args.a, args.root), dump_browse.find_run(args.b, args.root),
                              args.html), end="")
    elif args.dumps_command == "prune":
        print(dump_browse.prune_runs(args.root, args.keep, args.older_than))
    elif args.dumps_command == "keep":
        print(dump_browse.keep(dump_browse.find_run(args.run, args.root)))
    else:
        print(dump_browse.diff(dump_browse.find_run(args.run, args.root), args.a, args.b))
    return 0


def add_dumps_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("dumps", parents=[common], help="read run folders written by --dump-passes")
    p.set_defaults(handler=_cmd_dumps)
    ROOT.add_to(p)
    dsub = p.add_subparsers(dest="dumps_command", required=True)
    dsub.add_parser("list", parents=[common], help="every run folder: case, target, passes, status")
    q = dsub.add_parser("show", parents=[common], help="a run's pass table, or one pass's dump")
    q.add_argument("run", help="run folder, its name, a unique prefix, or 'latest'")
    q.add_argument("pass_", nargs="?", metavar="PASS", help="pass number, name, 'input', or a file of the run")
    for flag in (CHANGED, PHASE, NESTED, FUNC, HISTORY):
        flag.add_to(q)
    q = dsub.add_parser("compare", parents=[common],
                        help="two runs pass by pass: where they diverge, and their generated code")
    q.add_argument("a", metavar="RUN_A", help="run folder, its name, a unique prefix, or 'latest'")
    q.add_argument("b", metavar="RUN_B", help="run folder, its name, a unique prefix, or 'latest'")
    HTML.add_to(q)
    q = dsub.add_parser("prune", parents=[common],
                        help="remove old complete runs (never one being written or marked kept)")
    KEEP.add_to(q)
    OLDER_THAN.add_to(q)
    q = dsub.add_parser("keep", parents=[common], help="mark a run so that pruning never removes it")
    q.add_argument("run", help="run folder, its name, a unique prefix, or 'latest'")
    q = dsub.add_parser("diff", parents=[common], help="unified diff between the modules after two passes")
    q.add_argument("run", help="run folder, its name, a unique prefix, or 'latest'")
    q.add_argument("a", metavar="A", help="pass number or name ('input' for the compiler's input)")
    q.add_argument("b", metavar="B", help="pass number or name")
