"""A ``_private`` name belongs to its module: another mtp_tvm module that needs it should find it under a public
name in the module that owns it, so a rename inside one module never breaks another silently."""

import ast
from pathlib import Path

import mtp_tvm

PACKAGE = Path(mtp_tvm.__file__).parent


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _package_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1])


def private_cross_imports(source: str, package: str, label: str) -> list[str]:
    """``from <mtp_tvm module> import _name`` and ``<mtp_tvm module alias>._name`` in a module of ``package``."""
    tree = ast.parse(source)
    found, module_aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            absolute = node.module or "" if node.level == 0 else package
            if node.level > 1:
                absolute = ".".join(package.split(".")[: 1 - node.level])
            if node.level and node.module:
                absolute = f"{absolute}.{node.module}"
            if not absolute.startswith("mtp_tvm"):
                continue
            for alias in node.names:
                if _is_private(alias.name):
                    found.append(f"{label}:{node.lineno}: from {absolute} import {alias.name}")
                elif node.module is None or (PACKAGE.parent / absolute.replace(".", "/") / alias.name).is_dir() \
                        or (PACKAGE.parent / absolute.replace(".", "/") / f"{alias.name}.py").exists():
                    module_aliases.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            module_aliases.update(a.asname or a.name for a in node.names if a.name.startswith("mtp_tvm"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in module_aliases:
                found.append(f"{label}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_uses_another_modules_private_names():
    found = [hit for path in sorted(PACKAGE.rglob("*.py"))
             for hit in private_cross_imports(path.read_text(), _package_of(path), str(path.relative_to(PACKAGE)))]
    assert not found, "use (or add) a public name in the owning module:\n" + "\n".join(found)


def test_the_check_sees_both_forms():
    """The detector itself: an import of a private name and an attribute on an imported module both count."""
    source = "from ..schedule.steps import _hidden\nfrom ..schedule import steps\nsteps._other\nself._fine\n"
    hits = private_cross_imports(source, "mtp_tvm.tools", "probe")
    assert [h.split(": ", 1)[1] for h in hits] == ["from mtp_tvm.schedule.steps import _hidden", "steps._other"]
