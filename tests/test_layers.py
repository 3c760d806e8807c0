"""The package's folders are layers: a module imports only from its own layer or the layers below it, and no
modules import each other in a circle (function-level imports included)."""

import ast
from pathlib import Path

import mtp_tvm

PACKAGE = Path(mtp_tvm.__file__).parent
LAYERS = ("support", "contract", "ir", "passes", "schedule", "instrument", "compiler", "verify", "artifact", "tools")
TOP = len(LAYERS)  # cli/, __init__.py, __main__.py: the public surface, above every layer
# tools/ in wings, one per command, each importing only from itself and the wings before it (remote: TVM RPC,
# shared by tune and bench)
TOOL_WINGS = ("remote", "convert", "measure", "dumps", "check", "minimize", "bisect", "tune", "bench")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else TOP


def _imports(path: Path) -> set[str]:
    """Every mtp_tvm module ``path`` imports, at any depth of the file."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("mtp_tvm"):
                continue
            for alias in node.names:  # ``from . import x`` may name a module
                sub = f"{target}.{alias.name}"
                found.add(sub if _is_module(sub) else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("mtp_tvm"))
    return found - {module}


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def test_every_import_of_the_package_names_a_module_that_exists():
    """Function-level imports included: a module moved to another folder leaves no import that fails only when
    its function first runs (a worker's ``from ..compiler`` one folder too shallow did, after the tools' wings)."""
    missing = sorted(f"{m} imports {t}" for m, targets in _graph().items() for t in targets if not _is_module(t))
    assert missing == []


def test_every_module_lives_in_a_layer():
    stray = [m for m in _graph() if _layer(m) == TOP and m not in ("mtp_tvm", "mtp_tvm.__main__", "mtp_tvm.cli")
             and not m.startswith("mtp_tvm.cli.")]
    assert stray == [], f"modules outside the layer folders {LAYERS}: {stray}"


def _layer_name(module: str) -> str:
    return LAYERS[_layer(module)] if _layer(module) < TOP else "top"


def test_imports_only_go_down():
    upward = [f"{m} ({_layer_name(m)}) imports {t} ({_layer_name(t)})"
              for m, targets in _graph().items() for t in targets
              if _layer(t) > _layer(m) and t != "mtp_tvm"]
    assert upward == []


def _wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "tools" else None


def test_every_tool_lives_in_a_wing():
    stray = [m for m in _graph() if _layer(m) == LAYERS.index("tools") and m != "mtp_tvm.tools"
             and _wing(m) not in TOOL_WINGS]
    assert stray == [], f"modules under tools/ outside the wings {TOOL_WINGS}: {stray}"


def _later_wing_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} imports {t}" for m, targets in graph.items() for t in targets
            if _wing(m) in TOOL_WINGS and _wing(t) in TOOL_WINGS
            and TOOL_WINGS.index(_wing(t)) > TOOL_WINGS.index(_wing(m))]


def test_tool_wings_import_only_earlier_wings():
    assert _later_wing_imports(_graph()) == []


def test_no_import_circles():
    graph = _graph()
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    circles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph.get(m, ())):
            if t == "mtp_tvm" or t.startswith("mtp_tvm.") and t.count(".") == 1 and t not in graph:
                continue
            if state.get(t) == 1:
                circles.append(stack[stack.index(t):] + [t])
            elif t not in state and t in graph:
                visit(t, stack + [t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert circles == []


def test_the_checker_sees_a_violation(tmp_path, monkeypatch):
    """The layer rule itself, on a planted upward import: the test above cannot pass vacuously."""
    planted = PACKAGE / "contract" / "_planted_upward_import.py"
    monkeypatch.setattr(Path, "rglob", lambda self, pattern: [planted] if self == PACKAGE else [])
    original_read = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: "from ..tools.check.check import check\n"
                        if self == planted else original_read(self, *a, **k))
    assert _graph() == {"mtp_tvm.contract._planted_upward_import": {"mtp_tvm.tools.check.check"}}
    assert _layer("mtp_tvm.tools.check.check") > _layer("mtp_tvm.contract._planted_upward_import")


def test_the_wing_rule_sees_a_violation(monkeypatch):
    """measure (shared by check and bench) planted importing bench: the wing test above cannot pass vacuously."""
    planted = PACKAGE / "tools" / "measure" / "_planted.py"
    monkeypatch.setattr(Path, "rglob", lambda self, pattern: [planted] if self == PACKAGE else [])
    original_read = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: "from ..bench.bench import bench\n"
                        if self == planted else original_read(self, *a, **k))
    assert _later_wing_imports(_graph()) == ["mtp_tvm.tools.measure._planted imports mtp_tvm.tools.bench.bench"]


def test_cli_wings_share_only_common():
    """cli/ mirrors the tools: each wing (check, bisect, bench, ...) imports the shared ``cli.common`` and the
    API below, never another wing; only ``cli/__init__`` assembles them."""
    crossing = [f"{m} imports {t}" for m, targets in _graph().items()
                if m.startswith("mtp_tvm.cli.") and m != "mtp_tvm.cli.common"
                for t in targets if t.startswith("mtp_tvm.cli") and t != "mtp_tvm.cli.common"]
    assert crossing == []


# ---- one verb for a case and a module file (issue 43) ------------------------------------------------------

# module-file twins still to fold into their verb: none are left
KNOWN_TWINS: set[str] = set()
KNOWN_MODULE_FILES: set[str] = set()


def _top_level_names(root: Path) -> set[str]:
    names = set()
    for path in root.rglob("*.py"):
        names |= {n.name for n in ast.parse(path.read_text()).body
                  if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}
    return names


def module_twins(names: set[str]) -> set[str]:
    """The public names that are a module file's twin of another name: ``module_X``, ``X_module``,
    ``write_module_X``, ``ModuleX`` beside the name without that word (a verb, a result, an options class written
    twice, once per kind). A private helper of one verb for one kind is the verb's own business."""
    twins = set()
    for name in (n for n in names if not n.startswith("_")):
        for word in ("module_file_", "_module_file", "module_", "_module", "Module"):
            if word in name:
                other = name.replace(word, "_" if word.startswith("_") and word.endswith("_") else "", 1)
                if other != name and (other in names or other.lstrip("_") in names or "_" + other in names):
                    twins.add(name)
    return twins


def test_tools_hold_no_new_module_file_twin():
    tools = PACKAGE / "tools"
    files = {p.name for p in tools.rglob("module_*.py")}
    assert files <= KNOWN_MODULE_FILES, f"a module file's part of a verb belongs in it: {files - KNOWN_MODULE_FILES}"
    assert module_twins(_top_level_names(tools)) <= KNOWN_TWINS


def test_the_twin_rule_sees_a_planted_twin(tmp_path):
    verb = tmp_path / "tools" / "shape"
    verb.mkdir(parents=True)
    (verb / "shape.py").write_text("def shape(spec): ...\nclass ShapeResult: ...\n")
    (verb / "module_shape.py").write_text("def shape_module(path): ...\nclass ModuleShapeResult: ...\n"
                                          "def write_module_shape(): ...\ndef write_shape(): ...\n")
    assert module_twins(_top_level_names(tmp_path)) == {"shape_module", "ModuleShapeResult", "write_module_shape"}
    assert {p.name for p in tmp_path.rglob("module_*.py")} == {"module_shape.py"}
