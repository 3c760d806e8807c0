"""A dumped module's TVMScript text, read back as text: its functions by name, and whether two texts are equal
up to names.

A run folder holds TVMScript only, and parsing it back (``tvm.script.from_source``) is slow and fails for some
lowered phases (after ``MakePackedAPI``), so comparisons work on the text. "Equal up to names" means equal
after renaming every bound identifier (variables, buffers, parameters, size variables) to ``_0, _1, ...`` in
order of first appearance, on each side separately: the texts print the same module except for the names TVM
(or a frontend) chose, which is what ``tvm.ir.structural_equal(map_free_vars=True)`` accepts. What stays
fixed: attribute names after a dot (``T.grid``, ``cls.callee``), keywords and keyword arguments, the namespaces
``T``/``R``/``I``, numbers and string literals other than the names inside them (block names, dtypes, attributes).
"""

from __future__ import annotations

import dataclasses
import difflib
import keyword
import os
import re

DIFF_CONTEXT = 3
MODULE_REST = "(module)"  # the text outside every function: type variables, module attributes, metadata

_DEF = re.compile(r"^( *)def ([A-Za-z_][A-Za-z0-9_]*)\(")
_TOKEN = re.compile(r'(?P<str>"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')|(?P<com>#.*)|(?P<id>[A-Za-z_][A-Za-z0-9_]*)'
                    r'|(?P<op>==|!=|<=|>=|[()\[\]{}.=])')
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FIXED = frozenset(keyword.kwlist) | {"T", "R", "I", "cls", "range", "metadata", "Module", "TypeVar"}


@dataclasses.dataclass(frozen=True)
class FunctionText:
    """One function of a module text: its name, its lines ``[start, end)`` (0-based, decorators included)."""

    name: str
    start: int
    end: int


def split_functions(lines: list[str]) -> list[FunctionText]:
    """The module's top-level functions (PrimFuncs and Relax functions) in text order. A function runs from its
    decorators to the next line at its own indent or less; works for a whole module and a ``--dump-func``
    dump (one function at indent 0)."""
    defs = [(i, len(m.group(1)), m.group(2)) for i, line in enumerate(lines)
            if line.lstrip().startswith("def ") and (m := _DEF.match(line))]
    if not defs:
        return []
    indent = min(d[1] for d in defs)
    deeper = " " * (indent + 1)
    out = []
    for i, ind, name in defs:
        if ind != indent:
            continue
        start = i
        while start > 0 and lines[start - 1].startswith(" " * indent + "@"):
            start -= 1
        end = i + 1
        while end < len(lines) and (lines[end].startswith(deeper) or not lines[end].strip()):
            end += 1
        while end > i + 1 and not lines[end - 1].strip():  # trailing blank lines belong to no function
            end -= 1
        out.append(FunctionText(name, start, end))
    return out


def functions(text: str) -> dict[str, str]:
    """Function name -> its text, and ``MODULE_REST`` -> the text outside every function."""
    lines = text.splitlines()
    funcs = split_functions(lines)
    out = {f.name: "\n".join(lines[f.start:f.end]) for f in funcs}
    inside = {i for f in funcs for i in range(f.start, f.end)}
    out[MODULE_REST] = "\n".join(ln for i, ln in enumerate(lines) if i not in inside and ln.strip())
    return out


def normalized(text: str) -> str:
    """``text`` with its bound identifiers renamed in order of first appearance (see the module docstring)."""
    names: dict[str, str] = {}
    out: list[str] = []
    tokens = list(_TOKEN.finditer(text))
    depth, last = 0, 0
    for n, m in enumerate(tokens):
        kind, tok = m.lastgroup, m.group(0)
        out.append(text[last:m.start()])  # numbers, operators, white space: kept as they are
        last = m.end()
        if kind == "op":
            depth += tok in "([{"
            depth -= tok in ")]}"
        elif kind == "id":
            after_dot = n > 0 and tokens[n - 1].group(0) == "." and tokens[n - 1].end() == m.start()
            kwarg = depth > 0 and n + 1 < len(tokens) and tokens[n + 1].group(0) == "="
            if not (after_dot or kwarg or tok in _FIXED):
                tok = names.setdefault(tok, f"_{len(names)}")
        out.append(tok)
    out.append(text[last:])
    # names inside strings (shape expressions, ``TypeVar("m")``, block names that are also buffer names)
    return "".join(_WORD.sub(lambda w: names.get(w.group(0), w.group(0)), t) if t[:1] in "\"'" else t
                   for t in out)


IDENTICAL, NAMES, DIFFERENT, ONLY_A, ONLY_B = "identical", "equal up to names", "different", "only in A", "only in B"
# the same lines in another order: TVM 0.27's VMShapeLower writes ``shape_func``'s stores in an order that changes
# from build to build, so two builds of one configuration differ there; not called equal (sibling statements
# may depend on each other), but not a divergence either
REORDERED = "same lines, reordered"


def compare_texts(a: str | None, b: str | None, norm=normalized) -> str:
    """One verdict for two texts of the same thing: identical, equal up to names, the same lines reordered,
    different, or only one side (``norm``: ``normalized``, or a cached version of it)."""
    if a is None or b is None:
        return ONLY_B if a is None else ONLY_A
    if a == b:
        return IDENTICAL
    if norm(a) == norm(b):
        return NAMES
    return REORDERED if sorted(a.splitlines()) == sorted(b.splitlines()) else DIFFERENT


def unified_diff(a: list[str], b: list[str], a_name: str, b_name: str, a_start: int = 0,
                 b_start: int = 0) -> list[str]:
    """``difflib.unified_diff`` of two line lists, fast for dumps: consecutive module states share most of their
    text, so the common head and tail (less the context) are cut before difflib indexes the lines, and the hunk
    line numbers are shifted back. ``a_start``/``b_start``: where the lines start in their files (a function of
    a module), added to the hunk line numbers. Each hunk header names the function its new lines are in, as
    git's does (``@@ -3,7 +3,8 @@ def lm_head_logits``)."""
    head = len(os.path.commonprefix([a, b]))
    tail = len(os.path.commonprefix([a[head:][::-1], b[head:][::-1]]))
    lo = max(head - DIFF_CONTEXT, 0)
    cut_tail = max(tail - DIFF_CONTEXT, 0)
    lines = list(difflib.unified_diff(a[lo:len(a) - cut_tail], b[lo:len(b) - cut_tail], a_name, b_name,
                                      n=DIFF_CONTEXT, lineterm=""))
    shifts = (lo + a_start, lo + b_start)
    funcs = split_functions(b)

    def header(i: int) -> str:
        context = next((k for k, ln in enumerate(lines[i + 1:]) if not ln.startswith(" ")), 0)
        changed = lo + int(re.match(r"@@ -\d+(?:,\d+)? \+(\d+)", lines[i]).group(1)) - 1 + context  # 0-based, b
        name = next((f.name for f in funcs if f.start <= changed < f.end), None)
        line = re.sub(r"([-+])(\d+)", lambda m: f"{m.group(1)}{int(m.group(2)) + shifts[m.group(1) == '+']}",
                      lines[i], count=2)
        return f"{line} def {name}" if name else line

    return [header(i) if ln.startswith("@@ ") else ln for i, ln in enumerate(lines)]
