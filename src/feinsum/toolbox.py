"""Shared transformation steps that recipes compose (see docs/recipes.rst)."""

from __future__ import annotations

from collections.abc import Sequence

import loopy as lp


def add_build_options(t_unit: lp.TranslationUnit, options: Sequence[str]) -> lp.TranslationUnit:
    """*t_unit* with OpenCL build options appended to every kernel's (duplicates dropped)."""
    knl = t_unit.default_entrypoint
    merged = list(dict.fromkeys([*(knl.options.build_options or []), *options]))
    return lp.set_options(t_unit, build_options=merged)
