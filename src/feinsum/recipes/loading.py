"""Finding and loading recipe files.

A recipe is a Python file defining ``RECIPE = Recipe(...)``. Files are searched in,
first match of a name winning:

1. directories passed as ``path=`` (a directory, a file, or a list of them),
2. the directories in ``FEINSUM_RECIPE_PATH`` (``os.pathsep``-separated),
3. the checkout's ``transforms/`` (an editable install or running from the source tree),
4. the wheel's ``feinsum/_shipped/transforms/``.

Files whose name starts with ``_`` are skipped. Loading executes the file (a
recipe is code the user installed, like a plugin); the database only stores names,
versions and JSON configurations. A file that fails to load becomes a
:class:`~feinsum.RecipeError` naming its path and does not stop the others.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from feinsum.errors import RecipeError
from feinsum.recipes.recipe import Recipe

PathArg = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None

ENV_VAR = "FEINSUM_RECIPE_PATH"


def default_directories() -> list[Path]:
    """``FEINSUM_RECIPE_PATH`` entries, then the checkout's and the wheel's ``transforms/``."""
    import feinsum

    dirs = [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    pkg = Path(feinsum.__file__).resolve().parent
    checkout = pkg.parent.parent / "transforms"  # <repo>/src/feinsum -> <repo>/transforms
    if (pkg.parent.parent / "pyproject.toml").is_file() and checkout.is_dir():
        dirs.append(checkout)
    dirs.append(pkg / "_shipped" / "transforms")
    return dirs


def _as_paths(path: PathArg) -> list[Path]:
    if path is None:
        return []
    if isinstance(path, (str, os.PathLike)):
        return [Path(path)]
    return [Path(p) for p in path]


def recipe_files(path: PathArg = None) -> list[Path]:
    """The recipe files to load, in precedence order."""
    files: list[Path] = []
    for d in [*_as_paths(path), *default_directories()]:
        if d.is_file():
            files.append(d)
        elif d.is_dir():
            files.extend(sorted(p for p in d.glob("*.py") if not p.name.startswith("_")))
    seen: set[Path] = set()
    out = []
    for f in files:
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            out.append(f)
    return out


_cache: dict[tuple[Path, int, int], Recipe | RecipeError] = {}


def load_recipe_file(path: str | os.PathLike[str]) -> Recipe:
    """Execute a recipe file and return its ``RECIPE``; :class:`RecipeError` naming the
    path if it cannot be loaded. Cached on (path, mtime, size)."""
    p = Path(path).resolve()
    try:
        st = p.stat()
    except OSError as exc:
        raise RecipeError(f"recipe file {p}: cannot read it: {exc}") from exc
    key = (p, st.st_mtime_ns, st.st_size)
    hit = _cache.get(key)
    if hit is None:
        try:
            hit = _load(p)
        except RecipeError as exc:
            hit = exc
        _cache[key] = hit
    if isinstance(hit, RecipeError):
        raise hit
    return hit


def _load(p: Path) -> Recipe:
    digest = hashlib.sha256(str(p).encode()).hexdigest()[:10]
    modname = f"feinsum._loaded_recipes.{p.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(modname, p)
    if spec is None or spec.loader is None:
        raise RecipeError(f"recipe file {p}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module  # dataclasses/pickling inside recipes need this
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(modname, None)
        tb = traceback.extract_tb(exc.__traceback__)
        line = next((f"line {fr.lineno}" for fr in reversed(tb) if fr.filename == str(p)), "")
        raise RecipeError(
            f"recipe file {p} failed to load{' at ' + line if line else ''}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    recipe = getattr(module, "RECIPE", None)
    if not isinstance(recipe, Recipe):
        raise RecipeError(
            f"recipe file {p} does not define RECIPE = feinsum.recipes.Recipe(...)"
            + ("" if recipe is None else f" (RECIPE is {type(recipe).__name__})")
        )
    recipe.path = p
    return recipe


@dataclass
class LoadResult:
    """The recipes found (by name, first match winning) and the files that failed."""

    recipes: dict[str, Recipe] = field(default_factory=dict)
    errors: list[RecipeError] = field(default_factory=list)
    #: later files that defined an already-taken name, with the winner
    shadowed: list[tuple[Path, Recipe]] = field(default_factory=list)


def load_recipes(path: PathArg = None) -> LoadResult:
    """Load every recipe file (see the module docstring for the search order)."""
    result = LoadResult()
    for f in recipe_files(path):
        try:
            r = load_recipe_file(f)
        except RecipeError as exc:
            result.errors.append(exc)
            continue
        if r.name in result.recipes:
            result.shadowed.append((f, result.recipes[r.name]))
        else:
            result.recipes[r.name] = r
    result.recipes = dict(sorted(result.recipes.items()))
    return result


def format_errors(errors: Iterable[RecipeError]) -> str:
    return "\n".join(f"  {e}" for e in errors)
