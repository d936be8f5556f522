"""Factor columns folded into another column's loads, where the einsum as matched gets only
the generic schedule.

The matcher gives every array access a column of its own, so ``A @ (B*C)`` is the einsum
``ik,kj,kj->ij`` and ``A @ (w[:, None]*B)`` is ``ik,k,kj->ij``: three operands, which
neither matrix-product recipe knows. They ran on the generic schedule, about 4x slower
than folded (13 against 3-4 ms at 1000 x 64 x 1000 on this project's CPU). A column whose
indices are among another's (``k`` and ``kj`` among ``kj``) is a factor of that operand:
:func:`fold_columns` takes it out of the einsum, and :func:`with_folds` makes the other
column an operand expression that multiplies it in where the recipe's kernel loads it
(:mod:`feinsum.spec.fused`): the *core* ``ik,kj->ij`` gets the matrix-product recipes and
records. The expression must be fused (:attr:`~feinsum.matching.fusion.Fusion.required`),
or the core is not used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pymbolic.primitives as prim

if TYPE_CHECKING:
    from feinsum.matching.fusion import Fusion
    from feinsum.matching.model import Match


@dataclass(frozen=True)
class Folded:
    """A one-row match whose :attr:`core` has fewer columns: each of :attr:`folds` is
    ``(big, small, small_indices)`` in the kernel's names, array *small* (read at
    *small_indices*) multiplied into the loads of array *big*."""

    core: Match
    folds: tuple[tuple[str, str, tuple[str, ...]], ...]


def fold_columns(m: Match) -> Folded | None:
    """*m* with each column whose indices are among another's folded into that one, until
    two columns are left (see the module docstring); None where none can be: several
    rows, not a sum, formulas, arrays read twice or at repeated indices, length-1 axes,
    or a dtype that would change."""
    from feinsum.spec.model import Array, BatchedEinsum

    e = m.einsum
    if e.nrows != 1 or e.reduction != "sum" or e.block_sparse is not None:
        return None
    row = e.arguments[0]
    if any(len(entry) != 1 or not isinstance(entry[0], Array) for entry in row):
        return None
    names = [entry[0].name for entry in row]
    if len(set(names)) != len(names) or set(names) & set(m.squeezed) or any(
            len(set(idx)) != len(idx) for idx in e.in_indices):
        return None
    columns = list(range(len(row)))
    folds: list[tuple[str, str, tuple[str, ...]]] = []
    bigs: set[int] = set()
    for s in sorted(columns, key=lambda c: len(e.in_indices[c])):
        if len(columns) <= 2 or s in bigs:
            continue
        into = [b for b in columns if b != s and set(e.in_indices[s]) <= set(e.in_indices[b])]
        if not into:
            continue
        b = max(into, key=lambda c: len(e.in_indices[c]))
        folds.append((names[b], names[s], e.in_indices[s]))
        bigs.add(b)
        columns.remove(s)
    if not folds:
        return None
    try:
        core = BatchedEinsum(tuple(e.in_indices[c] for c in columns), e.out_indices,
                             (tuple(row[c] for c in columns),), e.reduction)
    except Exception:  # the core is not a valid einsum: no fold
        return None
    if core.value_dtype(0) != e.value_dtype(0):
        return None
    return Folded(replace(m, einsum=core), tuple(folds))


def with_folds(fusion: Fusion, folded: Folded, original: Match,
               declaration: Callable[[str], Any]) -> Fusion:
    """*fusion* (found for ``folded.core``) with each folded array multiplied into the
    operand expression of the array it was folded into (that expression, or its plain
    read), the expressions required. *original*: the match as found (the folded arrays'
    declarations); *declaration*: the kernel's declaration of an array, by name."""
    from feinsum.matching.fusion import ExtraArrays
    from feinsum.spec.fused import FusedEinsum, OperandExpression
    from feinsum.spec.model import Array

    m = folded.core
    to_c = m.to_canonical
    spec = fusion.spec or FusedEinsum(m.canonical)
    extra = ExtraArrays(fusion, spec.arrays)
    given = {a.name: a for a in original.einsum.arrays}
    lengths = m.canonical.lengths

    def b_read(user: str, indices: tuple[str, ...]) -> prim.Subscript:
        a = given[user]
        b = extra.name(user, declaration(user), lambda b: Array(
            b, tuple(lengths[to_c[i]] for i in indices), a.dtype, a.order))
        return prim.Subscript(prim.Variable(b), tuple(prim.Variable(to_c[i]) for i in indices))

    ops = {op.array: op for op in spec.operands}
    column = {f.name: c for _, c, f in m.einsum.factors()}
    required = set(fusion.required)
    for big in dict.fromkeys(b for b, _, _ in folded.folds):
        kernel_idx = m.einsum.in_indices[column[big]]
        cb = to_c[big]
        args = tuple(to_c[i] for i in kernel_idx)
        base = ops[cb].expression if cb in ops else b_read(big, kernel_idx)
        smalls = [b_read(s, idx) for b2, s, idx in folded.folds if b2 == big]
        ops[cb] = OperandExpression(cb, args, prim.Product((base, *smalls)))
        required.add(cb)
    spec = FusedEinsum(spec.einsum, tuple(ops[k] for k in sorted(ops)), spec.epilogues,
                       tuple(extra.arrays))
    return replace(fusion, spec=spec, names=extra.names, declarations=extra.declarations,
                   required=frozenset(required))
