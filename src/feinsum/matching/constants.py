"""Constant factors of a match, taken out of its einsum and applied in its stores.

The matcher gives the numeric constants of a statement a column of their own (``const0``:
a formula of no index). ``0.4 * einsum("xre,rij,ej->xei", J, D, p)`` is then the einsum
``xre,rij,ej,->xei``, which no DG recipe knows: it would get the generic schedule, and
none of the plain einsum's records. For a sum, ``c * sum(...)`` is ``sum(...)`` scaled, so
the hook plans the *core* (the einsum without its constant columns: the recipes, records
and tuning of the plain einsum) and applies the constant in the stores, as an epilogue
(:mod:`feinsum.spec.fused`) composed with the elementwise statement fused there, if any.
Where the recipe's kernel cannot take the epilogue, the einsum is planned as matched.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pymbolic.primitives as prim

if TYPE_CHECKING:
    from feinsum.matching.fusion import Fusion
    from feinsum.matching.model import Match


@dataclass(frozen=True)
class Scaled:
    """A match without its constant columns (:attr:`core`) and each row's constant (the
    product of its constants, in the match's own row order)."""

    core: Match
    constants: tuple[float, ...]


def _constant(f: Any) -> float | None:
    """The value of factor *f* if it is a numeric constant (a formula of no index that
    reads no array), else None."""
    from feinsum.spec.model import Formula

    if not isinstance(f, Formula) or f.arguments or f.arrays:
        return None
    x = f.expression
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer,
                                                             np.floating)):
        return None
    return float(x)


def without_constants(m: Match) -> Scaled | None:
    """*m* with its constant columns taken out (see the module docstring), or None where
    it has none or its value would change: not a sum, a block-sparse sum, no other column,
    or a row whose dtype the constant decides."""
    from feinsum.spec.model import BatchedEinsum


    e = m.einsum
    if e.reduction != "sum" or e.block_sparse is not None:
        return None
    columns = [c for c, idx in enumerate(e.in_indices) if not idx and all(
        len(row[c]) == 1 and _constant(row[c][0]) is not None for row in e.arguments)]
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
    constants = tuple(float(np.prod([_constant(row[c][0]) or 0.0 for c in columns]))
                      for row in e.arguments)
    gone = {row[c][0].name for row in e.arguments for c in columns}
    sources = {k: v for k, v in m.formula_sources.items() if k not in gone}
    return Scaled(replace(m, einsum=core, formula_sources=sources),
                  constants)


def with_constants(fusion: Fusion, scaled: Scaled) -> Fusion:
    """*fusion* (found for ``scaled.core``) with each row's constant applied in its stores:
    composed into the row's epilogue, or an epilogue of its own writing the row's output."""
    from pymbolic.mapper.substitutor import SubstitutionMapper, make_subst_func

    from feinsum.matching.fusion import Fusion
    from feinsum.spec.fused import VALUE, Epilogue, FusedEinsum

    m = scaled.core
    rows = m.isomorphism.rows
    to_c = m.to_canonical
    spec = fusion.spec or FusedEinsum(m.canonical)
    epilogues: dict[int, Epilogue] = {ep.row: ep for ep in spec.epilogues}
    names = dict(fusion.names)
    for row, c in enumerate(scaled.constants):
        r = rows[row]
        scaled_value = prim.Product((c, prim.Variable(VALUE)))
        if r in epilogues:
            ep = epilogues[r]
            subst = SubstitutionMapper(make_subst_func({VALUE: scaled_value}))
            epilogues[r] = replace(ep, expression=subst(ep.expression))
        else:
            args = tuple(to_c[i] for i in m.einsum.out_indices)
            epilogues[r] = Epilogue(r, args, scaled_value, f"out{r}")
            names[f"out{r}"] = m.outputs[row][0]
    spec = replace(spec, epilogues=tuple(epilogues[r] for r in sorted(epilogues)))
    return Fusion(spec, fusion.statements, names, fusion.dropped, fusion.declarations,
                  fusion.notes)

