"""Constant and scalar factors of a match, taken out of its einsum and applied in its
stores.

The matcher gives the numeric constants of a statement a column of their own (``const0``:
a formula of no index), and each scalar parameter (a ``ValueArg``: a 0-d array) one too.
``0.4 * einsum("xre,rij,ej->xei", J, D, p)`` is then the einsum ``xre,rij,ej,->xei``,
which no DG recipe knows: it would get the generic schedule, and none of the plain
einsum's records. For a sum, ``c * sum(...)`` is ``sum(...)`` scaled, so the hook plans the
*core* (the einsum without those columns: the recipes, records and tuning of the plain
einsum) and applies the factors in the stores, as an epilogue (:mod:`feinsum.spec.fused`)
composed with the elementwise statement fused there, if any. Where the recipe's kernel
cannot take the epilogue, the einsum is planned as matched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pymbolic.primitives as prim

if TYPE_CHECKING:
    from feinsum.matching.fusion import Fusion
    from feinsum.matching.model import Match
    from feinsum.spec.model import Array


@dataclass(frozen=True)
class Scaled:
    """A match without its constant and scalar columns (:attr:`core`), each row's factor
    (the product of its constants and scalar parameters, in the kernel's names; rows in
    the match's own order), and the scalar parameters, as the match's 0-d arrays."""

    core: Match
    factors: tuple[Any, ...]
    scalars: tuple[Array, ...] = ()


def _factor(f: Any) -> Any:
    """Factor *f* as an expression if it is a numeric constant (a formula of no index that
    reads no array: its value) or a scalar parameter (a 0-d array: its name), else None."""
    from feinsum.spec.model import Array, Formula

    if isinstance(f, Array):
        return prim.Variable(f.name) if f.ndim == 0 else None
    if not isinstance(f, Formula) or f.arguments or f.arrays:
        return None
    x = f.expression
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer,
                                                             np.floating)):
        return None
    return float(x)


def without_constants(m: Match) -> Scaled | None:
    """*m* with its constant and scalar columns taken out (see the module docstring), or
    None where it has none or its value would change: not a sum, a block-sparse sum, no
    other column, or a row whose dtype those factors decide."""
    from feinsum.spec.model import Array, BatchedEinsum

    e = m.einsum
    if e.reduction != "sum" or e.block_sparse is not None:
        return None
    columns = [c for c, idx in enumerate(e.in_indices) if not idx and all(
        len(row[c]) == 1 and _factor(row[c][0]) is not None for row in e.arguments)]
    if not columns or len(columns) == len(e.in_indices):
        return None
    keep = [c for c in range(len(e.in_indices)) if c not in columns]
    try:
        core = BatchedEinsum(tuple(e.in_indices[c] for c in keep), e.out_indices,
                             tuple(tuple(row[c] for c in keep) for row in e.arguments),
                             e.reduction)
    except Exception:  # the core is not a valid einsum: plan the match as it is
        return None
    if any(core.value_dtype(r) != e.value_dtype(r) for r in range(e.nrows)):
        return None
    factors = []
    for row in e.arguments:
        parts = [_factor(row[c][0]) for c in columns]
        number = float(np.prod([p for p in parts if isinstance(p, float)]))
        names = [p for p in parts if not isinstance(p, float)]
        terms = names if names and number == 1.0 else [number, *names]
        factors.append(terms[0] if len(terms) == 1 else prim.Product(tuple(terms)))
    scalars = {f.name: f for row in e.arguments for c in columns
               for f in row[c] if isinstance(f, Array)}
    gone = {row[c][0].name for row in e.arguments for c in columns}
    sources = {k: v for k, v in m.formula_sources.items() if k not in gone}
    return Scaled(replace(m, einsum=core, formula_sources=sources), tuple(factors),
                  tuple(scalars.values()))


def with_constants(fusion: Fusion, scaled: Scaled,
                   declaration: Callable[[str], Any]) -> Fusion:
    """*fusion* (found for ``scaled.core``) with each row's factor applied in its stores:
    composed into the row's epilogue, or an epilogue of its own writing the row's output.
    *declaration*: the kernel's declaration of a scalar parameter, by name."""
    from pymbolic.mapper.substitutor import SubstitutionMapper, make_subst_func

    from feinsum.matching.fusion import ExtraArrays
    from feinsum.spec.fused import VALUE, Epilogue, FusedEinsum

    m = scaled.core
    rows = m.isomorphism.rows
    to_c = m.to_canonical
    spec = fusion.spec or FusedEinsum(m.canonical)
    extra = ExtraArrays(fusion, spec.arrays)
    names = extra.names
    canonical: dict[str, Any] = {}
    for a in scaled.scalars:
        def renamed(b: str, a: Array = a) -> Array:
            return replace(a, name=b)

        canonical[a.name] = prim.Variable(extra.name(a.name, declaration(a.name), renamed))
    rename = SubstitutionMapper(make_subst_func(canonical))
    epilogues: dict[int, Epilogue] = {ep.row: ep for ep in spec.epilogues}
    for row, factor in enumerate(scaled.factors):
        r = rows[row]
        scaled_value = prim.Product((cast(Any, rename(factor)), prim.Variable(VALUE)))
        if r in epilogues:
            ep = epilogues[r]
            subst = SubstitutionMapper(make_subst_func({VALUE: scaled_value}))
            epilogues[r] = replace(ep, expression=subst(ep.expression))
        else:
            args = tuple(to_c[i] for i in m.einsum.out_indices)
            epilogues[r] = Epilogue(r, args, scaled_value, f"out{r}")
            names[f"out{r}"] = m.outputs[row][0]
    spec = FusedEinsum(spec.einsum, spec.operands,
                       tuple(epilogues[r] for r in sorted(epilogues)), tuple(extra.arrays))
    return replace(fusion, spec=spec, names=names, declarations=extra.declarations)
