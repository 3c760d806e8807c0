"""The README's code runs, and so does that of every guide (``docs/guides/*.md``, each read the same way, with the
same markers): every Python block and every shell block is executed on the ``tiny`` preset, and where a page shows
output, the output is checked against it.

How blocks are read (``readme_blocks``):

- a fenced ```` ```python ```` block runs in a fresh ``python`` process;
- an indented block whose lines start with ``$ `` is a session: each command runs in ``bash``, and the lines
  after it are its output, checked (``output_matches``): numbers, run-folder names and ids, the host CPU's name
  and the instruction family and ISA its build took (``fma``, ``vdpbf16ps``..., ``amx``, ``avx512``, ``avx2``...) may
  differ, a line ``...`` stands for any lines and a ``...`` inside a line for any text; everything else must be
  there, in order;
- any other indented block needs a marker on the line before it, ``<!-- readme-test: KIND -->``, KIND one of
  ``run`` (commands, each must exit 0), ``output`` (the output of the previous ``run`` block, checked),
  ``synopsis`` (command syntax: every ``--flag`` must be one of that subcommand's), ``text`` (not code),
  ``not run: WHY`` (code this test cannot run, and why). An unmarked one fails the test.

A marker may also say ``replace `A` => `B``` (repeatable, ``;``-separated) to run a tiny-preset equivalent of a
block that takes minutes as written (FLASH sizes, 256 tuning trials, ``make run``); each such replacement must
match, so the page says exactly what was substituted. Each page runs in a folder of its own, and each ``## ``
section of it in a folder of its own there, so ``dumps/``, ``D/`` and ``out/`` are the ones its commands made.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO

README = REPO / "README.md"
GUIDES = REPO / "docs" / "guides"


# guides whose code needs a fixture of their own (a checkpoint written first; the test modules under tests/modules)
# run in their own test: page -> test
OWN_RUNNER = {"real-checkpoint.md": "test_guide_real_checkpoint.py",
              "own-model-debugging.md": "test_own_model_debugging.py"}


def pages() -> list[Path]:
    """The README and every guide: a guide added to ``docs/guides/`` is run without being named here."""
    return [README, *sorted(p for p in GUIDES.glob("*.md") if p.name not in OWN_RUNNER)]


def test_a_guide_with_a_runner_of_its_own_has_it():
    for page, test in OWN_RUNNER.items():
        assert (GUIDES / page).is_file() and (REPO / "tests" / test).is_file(), page


def page_name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()
KINDS = ("python", "session", "run", "output", "synopsis", "text", "not run")
RUN_NAME = re.compile(r"\b(?P<key>[a-z][a-z0-9-]*?-(?:llvm|cuda)-\d{8}-\d{6})(?P<id>-[0-9a-f]{6})?\b")


@dataclasses.dataclass
class Block:
    line: int           # 1-based line of the block's first line in its page
    section: str        # the ``## `` heading it is under
    kind: str
    text: str           # the block with the replacements applied
    why: str = ""       # ``not run: WHY``


def _marker(lines: list[str], start: int) -> str | None:
    """The ``<!-- readme-test: ... -->`` on the last non-blank line before line ``start``, if any."""
    i = start - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    m = re.fullmatch(r"\s*<!-- readme-test: (.*) -->\s*", lines[i]) if i >= 0 else None
    return m.group(1) if m else None


def _apply_marker(marker: str | None, default: str, text: str, where: str) -> tuple[str, str, str]:
    """(kind, text with the marker's replacements, why) of a block; a replacement that matches nothing fails."""
    kind, why = default, ""
    for part in (p.strip() for p in (marker or "").split(";") if p.strip()):
        replace = re.fullmatch(r'replace `(.*?)` => `(.*?)`', part)
        if replace:
            old, new = replace.groups()
            if old not in text:
                raise ValueError(f"{where}: replace {old!r}: not in the block")
            text = text.replace(old, new)
        elif part.split(":")[0] in KINDS:
            kind, _, why = part.partition(":")
            why = why.strip()
        else:
            raise ValueError(f"{where}: unknown readme-test marker {part!r}")
    if kind is None:
        raise ValueError(f"{where}: an indented block that is not a `$` session needs a <!-- readme-test: KIND --> "
                         f"marker, KIND one of {', '.join(KINDS[2:])}")
    if kind == "not run" and not why:
        raise ValueError(f"{where}: `not run` must say why")
    return kind, text, why


def readme_blocks(markdown: str, name: str = "README.md") -> list[Block]:
    """Every code block of a page (the README, a guide: ``name`` in messages), in order, with its kind and the
    marker's replacements applied."""
    lines = markdown.split("\n")
    blocks, section, i, fenced = [], "", 0, False
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        if line.startswith("```"):
            lang, j = line[3:].strip(), i + 1
            while not lines[j].startswith("```"):
                j += 1
            if lang == "python":
                kind, text, why = _apply_marker(_marker(lines, i), "python", "\n".join(lines[i + 1:j]),
                                                f"{name}:{i + 1}")
                blocks.append(Block(i + 2, section, kind, text, why))
            elif lang in ("sh", "bash", "shell", "console"):
                raise ValueError(f"{name}:{i + 1}: write shell code as an indented block")
            i = j + 1
            continue
        previous = lines[i - 1] if i else ""
        if line.startswith("    ") and not previous.strip() and not fenced:
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            while not lines[j - 1].strip():
                j -= 1
            body = "\n".join(x[4:] for x in lines[i:j])
            default = "session" if body.startswith("$ ") else None
            kind, text, why = _apply_marker(_marker(lines, i), default, body, f"{name}:{i + 1}")
            blocks.append(Block(i + 1, section, kind, text, why))
            i = j
            continue
        i += 1
    return blocks


# ---- output matching ----------------------------------------------------------------------------------------

# an instruction family or ISA that a build, or a peer, took on the host
_ISA_NAMES = r"(?:fma|vdpbf16ps|tdpbf16ps|vpmaddwd|vpdpwssd|amx|avx512|avx2|sse|neon)"
_VOLATILE = re.compile(r"(?P<run>" + RUN_NAME.pattern + r")|(?P<num>\d+(?:\.\d+)?(?:e[-+]?\d+)?)|(?P<dots>\.\.\.)"
                       r"|(?P<space> {2,})|(?P<rule>-{3,})"
                       r"|(?<=on llvm )(?P<cpu>[a-z][\w.-]*)"  # the host CPU a page's build ran on (znver4 ...)
                       r"|(?P<isa>\b" + _ISA_NAMES + r"\b)")  # the path and ISA
# that CPU's build took (the widest ISA a peer ran is the host's too)


class Bindings(dict):
    """README run-folder names (their ``case-target-date-time``) -> the names the commands made here; ``ids``
    the same for the 6-hex-digit ids of the folders."""

    def __init__(self, *args):
        super().__init__(*args)
        self.ids = dict(getattr(args[0], "ids", {})) if args else {}

    def bind(self, readme: re.Match, actual: re.Match) -> None:
        self.setdefault(readme.group("key"), actual.group("key"))
        if readme.group("id") and actual.group("id"):
            self.ids.setdefault(readme.group("id"), actual.group("id"))

    def command(self, text: str, roots: list[Path]) -> str:
        """``text`` with every README run name replaced by its binding; unbound ones are bound, in README
        order, to this section's run folders that no name is bound to yet, oldest first."""
        folders = sorted(_run_folders(roots))
        for m in sorted(RUN_NAME.finditer(text), key=lambda m: m.group("key").rsplit("-", 2)[1:]):
            if m.group("key") not in self:
                kind = m.group("key").rsplit("-", 2)[0]
                made = sorted((RUN_NAME.fullmatch(f) for f in folders if f.startswith(kind + "-")
                               and RUN_NAME.fullmatch(f).group("key") not in self.values()),
                              key=lambda f: f.group("key").rsplit("-", 2)[1:])
                if made:
                    self.bind(m, made[0])
        for m in RUN_NAME.finditer(text):  # a folder whose id the output never showed: the one with the name
            if m.group("id") and m.group("id") not in self.ids and m.group("key") in self:
                match = [RUN_NAME.fullmatch(f) for f in folders if f.startswith(self[m.group("key")] + "-")]
                if match:
                    self.bind(m, match[0])
        return RUN_NAME.sub(lambda m: self.get(m.group("key"), m.group("key"))
                            + self.ids.get(m.group("id"), m.group("id") or ""), text)


def _line_pattern(line: str, bindings: Bindings) -> re.Pattern:
    out, pos = [], 0
    for m in _VOLATILE.finditer(line):
        out.append(re.escape(line[pos:m.start()]))
        if m.group("run"):
            key = m.group("key")
            name = re.escape(bindings[key]) if key in bindings else r"[a-z][a-z0-9-]*?-(?:llvm|cuda)-\d{8}-\d{6}"
            out.append(name + (r"-[0-9a-f]{6}" if m.group("id") else ""))
        elif m.group("num"):
            out.append(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
        elif m.group("dots"):
            out.append(".*")
        elif m.group("space"):
            out.append(r"\s+")
        elif m.group("cpu"):
            out.append(r"[a-z][\w.-]*")
        elif m.group("isa"):
            out.append(_ISA_NAMES)
        else:
            out.append("-+")
        pos = m.end()
    out.append(re.escape(line[pos:]))
    return re.compile(r"\s*".join(["", "".join(out).rstrip()]) + r"\s*")


def output_matches(expected: str, actual: str, bindings: Bindings) -> str | None:
    """None when ``actual`` shows ``expected`` (see the module docstring), else the first README line not found.
    Run names first seen in ``expected`` are bound to the ones in ``actual``."""
    chunks, chunk = [], []
    for line in expected.split("\n"):
        if line.strip() == "...":
            chunks.append(chunk)
            chunk = []
        else:
            chunk.append(line)
    chunks.append(chunk)
    got, at = actual.split("\n"), 0
    for chunk in (c for c in chunks if c):
        best = 0  # the most lines of the chunk matched at any start: the next one is the line to report
        for start in range(at, len(got) - len(chunk) + 1):
            trial = Bindings(bindings)
            for k, line in enumerate(chunk):
                if _line_pattern(line, trial).fullmatch(got[start + k]) is None:
                    best = max(best, k)
                    break
                for readme, here in zip(RUN_NAME.finditer(line), RUN_NAME.finditer(got[start + k])):
                    trial.bind(readme, here)
            else:
                bindings.update(trial)
                bindings.ids.update(trial.ids)
                at = start + len(chunk)
                break
        else:
            return chunk[best]
    return None


# ---- running ------------------------------------------------------------------------------------------------

def _env(cwd: Path, prefork=None) -> dict:
    """The venv's ``mtp-tvm`` and ``python`` first on ``PATH``, or with ``prefork`` its shims of them."""
    env = {k: v for k, v in os.environ.items() if k != "MTP_TVM_DUMPS"}
    env |= {"PYTHONUNBUFFERED": "1", "MTP_TVM_TUNED_ROOT": str(cwd / "tuned"), "REPO": str(REPO),
            "VENV": str(Path(sys.executable).parent.parent)}
    if prefork:
        return prefork.env(env)  # its shims, then the venv's programs
    return env | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}


def _commands(text: str) -> list[str]:
    """Shell lines of a ``run`` block: continuation lines joined, comments kept (bash drops them)."""
    return [c for c in text.replace("\\\n", " ").split("\n") if c.strip()]


def _shell(command: str, cwd: Path, prefork=None, timeout: int = 1800) -> subprocess.CompletedProcess:
    """``command``'s stdout and stderr in one stream, in the order a terminal shows them."""
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=_env(cwd, prefork), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


def _run_folders(roots: list[Path]) -> set[str]:
    return {p.name for root in roots if root.is_dir() for p in root.iterdir() if RUN_NAME.fullmatch(p.name)}


def _flags(parser) -> set[str]:
    """Every option string of ``parser`` and of its subcommands' parsers."""
    flags = {o for a in parser._actions for o in a.option_strings}
    for action in parser._actions:
        subparsers = action.__class__.__name__ == "_SubParsersAction"
        for sub in (getattr(action, "choices", None) or {}).values() if subparsers else ():
            flags |= _flags(sub)
    return flags


def _synopsis_flags_known(text: str) -> list[str]:
    """Flags a synopsis block names that its subcommand does not take (continuation lines belong to the
    command above them)."""
    from mtp_tvm.cli import build_parser

    parser = build_parser()
    subcommands = next(a.choices for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    current, unknown = parser, []
    for line in text.split("\n"):
        words = line.split()
        if words[:1] == ["mtp-tvm"]:
            current = subcommands.get(words[1], parser) if len(words) > 1 else parser
        flags = re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line.split("#")[0])
        unknown += [f for f in flags if f not in _flags(current)]
    return unknown


class ReadmeRunner:
    """Runs a page's blocks in order, one folder per section; ``run(block)`` returns a failure message or None.
    With ``prefork`` (the fixture) its ``mtp-tvm`` and ``python`` processes are forked from the prefork server."""

    def __init__(self, root: Path, name: str = "README.md", prefork=None):
        self.root, self.name, self.bindings, self.last_output = root, name, {}, None
        self.prefork = prefork
        self.last_run_second = None

    def shell(self, command: str, cwd: Path, roots: list[Path]) -> subprocess.CompletedProcess:
        """``_shell``, never in the second a run folder was last made in: a run is named by the second it
        started (``logits-llvm-20261204-122613``) and a page names runs so, as a user at a terminal never starts
        two within one second; two forked ``check``s of 0.5 s each could, and the page's name matched both."""
        if self.last_run_second is not None and int(time.time()) <= self.last_run_second:
            time.sleep(self.last_run_second + 1 - time.time())
        before = _run_folders(roots)
        result = _shell(command, cwd, self.prefork)
        if _run_folders(roots) != before:
            self.last_run_second = int(time.time())
        return result

    def cwd(self, block: Block) -> Path:
        d = self.root / (re.sub(r"[^a-z0-9]+", "-", block.section.lower()).strip("-") or "top")
        if not d.exists():
            d.mkdir(parents=True)
            (d / "examples").symlink_to(REPO / "examples")
        return d

    def run(self, block: Block) -> str | None:
        cwd = self.cwd(block)
        bindings = self.bindings.setdefault(cwd, Bindings())
        roots = [cwd / "dumps", cwd / "D"]
        where = f"{self.name}:{block.line}"
        if block.kind == "python":
            python = self.prefork.python if self.prefork else [sys.executable]
            r = subprocess.run([*python, "-c", block.text], cwd=cwd, env=_env(cwd, self.prefork), capture_output=True,
                               text=True, timeout=1800)
            return None if r.returncode == 0 else f"{where}: the Python block fails:\n{r.stderr[-3000:]}"
        if block.kind == "run":
            outputs = []
            for command in _commands(block.text):
                r = self.shell(bindings.command(command, roots), cwd, roots)
                if r.returncode:
                    return f"{where}: `{command}` exits {r.returncode}:\n{(r.stdout)[-3000:]}"
                outputs.append(r.stdout)
            self.last_output = "\n".join(outputs)
            return None
        if block.kind == "output":
            if self.last_output is None:
                return f"{where}: an output block with no run block before it"
            missing = output_matches(block.text, self.last_output, bindings)
            return None if missing is None else f"{where}: not in the output: {missing!r}\n{self.last_output[-3000:]}"
        if block.kind == "session":
            for command, expected in _session(block.text):
                r = self.shell(bindings.command(command, roots), cwd, roots)
                actual = r.stdout
                missing = output_matches(expected, actual, bindings) if expected.strip() else None
                if missing is not None:
                    return f"{where}: `{command}`: not in its output: {missing!r}\n{actual[-4000:]}"
                if not expected.strip() and r.returncode:
                    return f"{where}: `{command}` exits {r.returncode}:\n{actual[-3000:]}"
            return None
        if block.kind == "synopsis":
            unknown = _synopsis_flags_known(block.text)
            return None if not unknown else f"{where}: the synopsis names flags mtp-tvm does not take: {unknown}"
        return None  # text, not run


def _session(text: str) -> list[tuple[str, str]]:
    """A ``$`` session as (command, the output lines after it)."""
    pairs = []
    for line in text.split("\n"):
        if line.startswith("$ "):
            pairs.append([line[2:], []])
        else:
            pairs[-1][1].append(line)
    return [(c, "\n".join(o)) for c, o in pairs]


# ---- the tests ----------------------------------------------------------------------------------------------

def test_every_block_of_the_readme_and_the_guides_is_marked_or_runs():
    """Reading the pages already checks the markers: no unmarked indented block, no stale replacement."""
    blocks = {page_name(p): readme_blocks(p.read_text(), page_name(p)) for p in pages()}
    assert len(blocks) > 1  # the guides are found
    assert {b.kind for bs in blocks.values() for b in bs} >= {"python", "session", "run", "output", "synopsis"}
    assert {b.kind for b in blocks["README.md"]} >= {"python", "run", "output"}  # the set-up and the sample run
    assert all(b.why for bs in blocks.values() for b in bs if b.kind == "not run")


@pytest.mark.slow
@pytest.mark.parametrize("page", pages(), ids=page_name)
def test_page_code_runs_and_shows_what_the_page_says(page, tmp_path, prefork):
    runner = ReadmeRunner(tmp_path, page_name(page), prefork)
    failures = []
    for block in readme_blocks(page.read_text(), page_name(page)):
        failure = runner.run(block)
        if failure:
            failures.append(failure)
    assert not failures, "\n\n".join(failures)


BROKEN = '''# demo

## Python

```python
import mtp_tvm
m.run({"hidden_states": ..., ...})
```

## Shell

    $ mtp-tvm list --preset tiny
    tail: projection -> local logits (spec §2.4)
    ...
    presets: tiny (D=256, vocab=4096), flash (D=4096, vocab=129280), pro (D=7168, vocab=129280)
'''


def test_a_broken_snippet_fails_the_readme_test(tmp_path):
    """The checker is not a rubber stamp: a SyntaxError block, a wrong output line, an unmarked indented block
    and a replacement that matches nothing each fail."""
    runner = ReadmeRunner(tmp_path)
    python, session = readme_blocks(BROKEN)
    assert "SyntaxError" in runner.run(python)
    assert runner.run(session) is None  # the good session passes ...
    wrong = dataclasses.replace(session, text=session.text.replace("local logits", "global logits"))
    assert "not in its output" in runner.run(wrong)  # ... and one wrong word fails it (numbers may differ)
    with pytest.raises(ValueError, match="needs a <!-- readme-test"):
        readme_blocks("## x\n\n    mtp-tvm list\n")
    with pytest.raises(ValueError, match="not in the block"):
        readme_blocks('## x\n\n<!-- readme-test: run; replace `flash` => `tiny` -->\n\n    mtp-tvm list\n')
    assert _synopsis_flags_known("mtp-tvm check --case C --no-such-flag") == ["--no-such-flag"]


def test_output_matching_binds_run_names_and_skips_numbers():
    b = Bindings()
    actual = "IR dumps: dumps/tail-llvm-20270101-000000-abcdef (open ...)\ncheck 0.5s PASS"
    assert output_matches("IR dumps: dumps/tail-llvm-20261202-144523-4318ac (open ...)\n...\ncheck 9.1s PASS",
                          actual, b) is None
    assert b == {"tail-llvm-20261202-144523": "tail-llvm-20270101-000000"}
    assert b.command("python dumps/tail-llvm-20261202-144523-4318ac/repro/repro.py", []) == \
        "python dumps/tail-llvm-20270101-000000-abcdef/repro/repro.py"
    assert output_matches("check 9.1s FAIL", actual, b) == "check 9.1s FAIL"


def test_the_readme_is_a_front_door():
    """At most ~200 lines (the rest lives in the guides), and every page it links to exists."""
    text = README.read_text()
    assert len(text.split("\n")) <= 200
    links = re.findall(r"\]\(((?:docs|examples)/[^)#]*)", text)
    assert links and [link for link in links if not (REPO / link).exists()] == []
