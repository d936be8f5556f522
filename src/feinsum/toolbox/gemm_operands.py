"""Which operands of a contraction are the GEMM's ``A`` and ``B`` (a step of
:mod:`feinsum.toolbox.gemm`), and which only scale them.

``B`` holds the output's contiguous index (of several that do, the one with most
indices), ``A`` another output index (of several, the one holding the longest reduction
index, else the one with most indices); an operand beyond these two whose indices are all
``A``'s (or all ``B``'s) is a *factor*: it multiplies each entry of that operand as it is
copied to the local tile. The face mass of DG, ``ifj,fe,fej->ei``
(``out[e, i] = sum_fj L[i, f, j] (J[f, e] u[f, e, j])``), is a GEMM of ``u`` scaled by the
face Jacobians ``J`` and the lifting operator ``L``. A factor may also have reduction
indices its operand lacks (its output indices are that operand's): DG's divergence
``xre,rij,xej->ei`` is ``sum_r`` of GEMMs of ``sum_x J[x, r, e] u[x, e, j]`` and
``D[r, i, j]`` (:attr:`feinsum.toolbox.gemm_view.Roles.a_sums`). An operand whose
reduction indices are ``B``'s only and whose output indices are ``A``'s or its own (in no
other operand) *combines* the sums as they are stored: DG's gradient ``xre,rij,ej->xei``
keeps ``T[r] = sum_j D[r, i, j] u[e, j]`` for every ``r`` in registers and stores
``out[x, e, i] = sum_r J[x, r, e] T[r]`` for every ``x``
(:attr:`feinsum.toolbox.gemm_view.Roles.carried`). Operands without
an index (pytato's ``2 * (A @ B)``) are scalars that multiply each sum as it is stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox.core import index_operands, main_reduction


@dataclass(frozen=True)
class OperandColumns:
    """The operand columns of a GEMM view: ``A``, ``B``, the factors of each, the
    scalars."""

    a: int
    b: int
    a_factors: tuple[int, ...] = ()
    b_factors: tuple[int, ...] = ()
    scales: tuple[int, ...] = ()
    #: an operand that combines the sums as they are stored (see the module docstring)
    combine: tuple[int, ...] = ()


def operand_columns(e: BatchedEinsum) -> OperandColumns | str:
    """*e*'s operands as a GEMM's (see the module docstring), or why it has none."""
    if isinstance(ops := index_operands(e), str):
        return ops
    tensors, scales = ops
    if len(tensors) < 2:
        return "needs a dense sum of two operands (and scalar factors)"
    if not e.out_indices:
        return "needs a reduction index and an output index"
    x = e.out_indices[-1]
    holders = [c for c in tensors if x in e.in_indices[c]]
    if len(tensors) == 2:
        t0, t1 = tensors
        b, a = (t0, t1) if x in e.in_indices[t0] else (t1, t0)
        return OperandColumns(a, b, scales=scales)
    if not holders or len(holders) == len(tensors):
        return (f"{x} indexes {len(holders)} of {len(tensors)} operands: a GEMM of more "
                "than two operands needs it in some of them, not in all")
    b = max(holders, key=lambda c: len(e.in_indices[c]))
    rest = sorted((c for c in tensors if c not in holders),
                  key=lambda c: -len(e.in_indices[c]))
    k = main_reduction(e)
    a = next((c for c in rest if k in e.in_indices[c]), rest[0])
    others = [*(c for c in rest if c != a), *(c for c in holders if c != b)]
    of_a = [c for c in others if set(e.in_indices[c]) <= set(e.in_indices[a])]
    of_b = [c for c in others if c not in of_a
            and set(e.in_indices[c]) <= set(e.in_indices[b])]
    combine: list[int] = []
    for c in others:  # a factor that also has reduction indices the other operand loops
        if c in of_a or c in of_b:
            continue
        free = set(e.in_indices[c]) - set(e.reduction_indices)
        side = of_a if free <= set(e.in_indices[a]) else of_b if free <= set(
            e.in_indices[b]) else combine if _combines(e, c, a, b, tensors) else None
        if side is None:
            return ("needs two operands and factors of them: an operand beyond two has "
                    "output indices of both")
        side.append(c)
    if len(combine) > 1:
        return "two operands combine the sums as they are stored: one at most"
    return OperandColumns(a, b, tuple(of_a), tuple(of_b), scales, tuple(combine))


def _combines(e: BatchedEinsum, c: int, a: int, b: int, tensors: list[int]) -> bool:
    """Whether operand *c* combines the sums as they are stored: its reduction indices are
    ``B``'s only, its output indices ``A``'s or its own (in no other operand)."""
    own = {i for i in e.out_indices if all(i not in e.in_indices[d] for d in tensors
                                           if d != c)}
    red = set(e.in_indices[c]) & set(e.reduction_indices)
    return bool(own) and bool(red) and red <= set(e.in_indices[b]) - set(
        e.in_indices[a]) and set(e.in_indices[c]) - red - own <= set(e.in_indices[a])
