"""The house rules of ``src/feinsum`` (docs/architecture.md, "Packages and the import rule"):
one package per pipeline stage, each importing only the packages below it, no import cycle
between modules, small modules and recipes, no ``assert`` in the library. Read from the
source with ast; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "feinsum"

#: Bottom to top: a package (or top-level module) may import those before it in this list.
LAYERS = ["errors", "checks", "spec", "devices", "database", "lowering", "reductions",
          "toolbox", "recipes", "timing", "prediction", "tuning", "matching", "hook", "direct",
          "cli", "campaigns", "arraycontext"]
MAX_TOP_LEVEL = 19
MAX_MODULE_LINES = 620
MAX_RECIPE_LINES = 150


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(SRC.rglob("*.py")):
        if "migrations" in p.parts:  # Alembic's revision scripts
            continue
        parts = list(p.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[str, bool]]:
    """The feinsum modules *path* imports anywhere, each with whether the import runs
    (``False``: under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for n in ast.walk(block)}
    package = ".".join(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                     for a in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name.startswith("feinsum"):
                found.append((name, id(node) not in typing_only))
    return found


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_packages_import_only_the_packages_below_them() -> None:
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        stage = _stage(name)
        if stage == "__init__":  # the package root names the public API: it may import all
            continue
        allowed = set(LAYERS[: LAYERS.index(stage) + 1])
        for target, _ in _imports(path, modules):
            if target == "feinsum":  # the root, for __version__ and __file__: always loaded
                continue
            other = _stage(target)
            if other not in allowed:
                wrong.append(f"{name} imports {target} ({stage} may import "
                             f"{', '.join(LAYERS[: LAYERS.index(stage)]) or 'nothing'})")
    assert not wrong, "\n".join(wrong)


def test_every_top_level_entry_has_a_layer() -> None:
    entries = sorted(p.stem for p in SRC.iterdir()
                     if p.name != "__init__.py" and p.name != "py.typed"
                     and (p.suffix == ".py" or (p / "__init__.py").is_file()))
    assert sorted(LAYERS) == entries
    assert len(list(SRC.iterdir())) <= MAX_TOP_LEVEL + 2  # __init__.py, py.typed


def test_no_import_cycle_between_modules() -> None:
    modules = _modules()
    graph = {name: {t for t, runs in _imports(path, modules) if runs and t != name
                    and not name.startswith(t + ".")}  # a package's own __init__
             for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_small_modules_small_recipes_no_assert() -> None:
    long = [f"{p.relative_to(ROOT)}: {n}" for p in _modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
    recipes = [f"{p.name}: {n}" for p in sorted((ROOT / "transforms").glob("*.py"))
               if (n := len(p.read_text().splitlines())) > MAX_RECIPE_LINES]
    assert not recipes, f"recipes over {MAX_RECIPE_LINES} lines: {recipes}"
    asserts = [f"{p.relative_to(ROOT)}:{node.lineno}" for p in _modules().values()
               for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.Assert)]
    assert not asserts, f"assert in src/ (raise a FeinsumError naming the problem): {asserts}"
