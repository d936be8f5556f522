"""Recipes: parameterised loopy transformations, their parameter spaces and their loading.

A recipe file (in ``transforms/``, a ``FEINSUM_RECIPE_PATH`` directory, or passed as
``path=``) defines ``RECIPE = Recipe(...)``; see :class:`Recipe` and the performance
engineer's guide (``docs/recipes.rst``).

``feinsum.recipes`` is both this module and the function :func:`recipes`: the module
is callable (``feinsum.recipes()`` lists the recipes whichever one you got).
"""

from __future__ import annotations

import sys
import types
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from feinsum.errors import RecipeError, RecipeFailure
from feinsum.recipes.loading import (
    ENV_VAR,
    LoadResult,
    PathArg,
    default_directories,
    format_errors,
    load_recipe_file,
    load_recipes,
    recipe_files,
)
from feinsum.recipes.recipe import (
    BUILD_OPTION_FLAGS,
    Recipe,
    as_device_info,
    standard_build_options,
    toolbox_source_hash,
)
from feinsum.toolbox.parameters import (
    Boolean,
    Choice,
    Config,
    Constraint,
    IntRange,
    Parameter,
    ParameterSpace,
    PowersOfTwo,
    TupleOf,
    at_most,
    canonical_json,
    parameter_from_json,
)

if TYPE_CHECKING:
    from feinsum.spec.model import BatchedEinsum


class RecipeWarning(UserWarning):
    """A recipe file could not be loaded (the others were)."""


def _report(result: LoadResult, errors: str) -> None:
    if errors == "raise" and result.errors:
        raise result.errors[0]
    if errors == "warn":
        for exc in result.errors:
            warnings.warn(str(exc), RecipeWarning, stacklevel=3)


def recipes(path: PathArg = None, *, errors: str = "warn") -> list[Recipe]:
    """Every recipe, sorted by name.

    :arg path: extra directories or files searched before ``FEINSUM_RECIPE_PATH`` and
        the shipped ``transforms/``.
    :arg errors: what to do with files that fail to load: ``"warn"`` (a
        :class:`RecipeWarning` naming the path), ``"raise"`` (the first
        :class:`~feinsum.RecipeError`) or ``"ignore"``.
    """
    result = load_recipes(path)
    _report(result, errors)
    return list(result.recipes.values())


def get_recipe(name: str, path: PathArg = None) -> Recipe:
    """The recipe called *name*; :class:`~feinsum.RecipeError` listing the known ones (and
    the files that failed to load) if there is none."""
    result = load_recipes(path)
    if name in result.recipes:
        return result.recipes[name]
    msg = f"no recipe named {name!r}; known: {', '.join(result.recipes) or 'none'}"
    if result.errors:
        msg += "\nfiles that failed to load:\n" + format_errors(result.errors)
    raise RecipeError(msg)


@dataclass(frozen=True)
class Applicability:
    """Whether :attr:`recipe` applies; :attr:`reason` says why not (``None`` if it does)."""

    recipe: Recipe
    reason: str | None

    @property
    def applies(self) -> bool:
        return self.reason is None

    def __str__(self) -> str:
        return f"{self.recipe.name}: " + ("applies" if self.reason is None else self.reason)


def recipes_for(einsum: BatchedEinsum, device: Any = None, path: PathArg = None, *,
                errors: str = "warn") -> list[Applicability]:
    """Every recipe with whether it applies to *einsum* (canonicalised first) on *device*
    (``None``: the default device), sorted by name. A recipe whose ``applies`` raises is
    listed as not applying, with the failure as the reason."""
    from feinsum.spec.canonical import canonicalize

    dev = as_device_info(device)
    e = canonicalize(einsum)
    out = []
    for r in recipes(path, errors=errors):
        try:
            reason = r.applies(e, dev)
        except RecipeFailure as exc:
            reason = str(exc)
        out.append(Applicability(r, reason))
    return out


class _CallableModule(types.ModuleType):
    """``feinsum.recipes`` may be this module (once any ``feinsum.recipes.*`` import ran):
    calling it lists the recipes, as the function of that name does."""

    def __call__(self, path: PathArg = None, *, errors: str = "warn") -> list[Recipe]:
        return recipes(path, errors=errors)


sys.modules[__name__].__class__ = _CallableModule

__all__ = [
    "BUILD_OPTION_FLAGS",
    "ENV_VAR",
    "Applicability",
    "Boolean",
    "Choice",
    "Config",
    "Constraint",
    "IntRange",
    "LoadResult",
    "Parameter",
    "ParameterSpace",
    "PowersOfTwo",
    "Recipe",
    "RecipeWarning",
    "TupleOf",
    "as_device_info",
    "at_most",
    "canonical_json",
    "default_directories",
    "get_recipe",
    "load_recipe_file",
    "load_recipes",
    "parameter_from_json",
    "recipe_files",
    "recipes",
    "recipes_for",
    "standard_build_options",
    "toolbox_source_hash",
]
