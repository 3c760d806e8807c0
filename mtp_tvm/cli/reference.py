"""The CLI reference's flag tables, generated from the option declarations (``support.flags``):
docs/guides/cli.md holds them between ``<!-- flags: NAME -->`` and ``<!-- end flags -->`` markers, and
tests/test_flags.py fails when a table there differs from this module's (``python -m mtp_tvm.cli.reference``
rewrites them)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..compiler.options import BuildSpec, DebugOptions
from ..support.flags import Flag, flags
from ..tools.bench.options import BenchOptions
from ..verify.tolerances import Tolerance
from .common import COMMAND_FLAGS, KEYWORD_FLAGS

TABLES: dict[str, tuple[Flag, ...]] = {
    "BuildSpec": tuple(flags(BuildSpec).values()),
    "DebugOptions": tuple(flags(DebugOptions).values()),
    "command": COMMAND_FLAGS,
    "keywords": KEYWORD_FLAGS,
    "BenchOptions": tuple(flags(BenchOptions).values()),
    "Tolerance": tuple(flags(Tolerance).values()),
}
_BLOCK = re.compile(r"(<!-- flags: (\w+) -->\n)(.*?)(<!-- end flags -->)", re.S)


def flag_table(name: str) -> str:
    """A markdown table of ``TABLES[name]``: the flag (with its value's name), what it does, its default."""
    rows = ["| flag | what it does | default |", "|---|---|---|"]
    for f in TABLES[name]:
        value = "" if f.switch else f" [{f.metavar}]" if f.optional_value is not None else f" {f.metavar or 'X'}"
        names = " ".join(f"`{n}{value}`" for n in (f.name, *f.aliases))
        default = "off" if f.default_text is None else f"`{f.default_text}`"
        rows.append(f"| {names} | {f.help.replace('|', chr(92) + '|')} | {default} |")
    return "\n".join(rows) + "\n"


def regenerate(text: str) -> str:
    """``text`` with every marked table replaced by its generated form."""
    return _BLOCK.sub(lambda m: m.group(1) + "\n" + flag_table(m.group(2)) + "\n" + m.group(4), text)


if __name__ == "__main__":  # pragma: no cover
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/guides/cli.md")
    path.write_text(regenerate(path.read_text()))
