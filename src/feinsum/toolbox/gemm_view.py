"""The GEMM view of a contraction (a step of :mod:`feinsum.toolbox.gemm`): which operands
and fused index groups play ``A``, ``B``, ``X``, ``Y`` and ``K`` (:func:`roles`), and the
tiling of the ``(Y, X)`` plane (:class:`Tiling`).

A contraction is seen as ``out[rest, Y, X] = sum_K A[Y, K] * B[K, X]``: ``X`` is the
output's contiguous index fused with the output indices of operand ``B`` that are
contiguous with it in ``B`` and in the output (``ijkl,mi->mjkl``: ``X = jkl``); ``Y``
likewise from operand ``A``; ``K`` the longest reduction index fused with the reduction
indices contiguous with it in both operands (``ijk,jkl->il``: ``K = jk``). What is left are
batch output indices (``rest``: ``g.2`` and loops), reduction indices of one side only
(summed as that side's entries are copied) and other reduction indices (loops around the
``K`` tiles). Which operands are ``A`` and ``B``, and which scale them:
:mod:`feinsum.toolbox.gemm_operands`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pymbolic.primitives as prim

from feinsum.spec.model import Array, BatchedEinsum
from feinsum.toolbox.core import main_reduction
from feinsum.toolbox.gemm_operands import operand_columns

#: Shared-memory banks the local tiles' padding spreads the transposing copies over.
BANKS = 32
#: The values of the ``gemm_gpu`` recipe's parameters.
REGISTER_TILES, K_TILES, VECTOR_WIDTHS, SPLITS = (1, 2, 4, 8), (2, 4, 8, 16, 32), (1, 2, 4), (
    1, 2, 4, 8, 16)
#: Terms a copied entry sums at most (:attr:`Roles.a_sums`; beyond: loops around ``K``).
MAX_SUMMED = 8
#: Register tiles a work-item keeps at most, one per value of :attr:`Roles.carried`.
MAX_CARRIED = 4


@dataclass(frozen=True)
class Roles:
    """A two-operand contraction as ``out[rest, Y, X] = sum_K A[Y, K] * B[K, X]``.

    :attr:`x`, :attr:`y`, :attr:`k` are the fused index groups (outermost first; every
    member but the first has a fixed length), :attr:`a`/:attr:`b` the operand columns,
    :attr:`rest` the other output indices, :attr:`red` the other reduction indices,
    :attr:`scales` the columns of scalar operands (no index: a 0-d array, or a constant
    or formula of them, as in ``2 * (A @ B)``, one einsum under pytato), which multiply
    the sums as they are stored."""

    a: int
    b: int
    x: tuple[str, ...]
    y: tuple[str, ...]
    k: tuple[str, ...]
    rest: tuple[str, ...]
    red: tuple[str, ...]
    scales: tuple[int, ...] = ()
    #: the columns of the operands that scale ``A``'s (``B``'s) entries as they are
    #: copied (:mod:`feinsum.toolbox.gemm_operands`)
    a_factors: tuple[int, ...] = ()
    b_factors: tuple[int, ...] = ()
    #: reduction indices of one side only (``A`` and its factors, or ``B`` and its),
    #: summed as its entries are copied: divergence's ``x`` in
    #: ``sum_x J[x, r, e] u[x, e, j]``
    a_sums: tuple[str, ...] = ()
    b_sums: tuple[str, ...] = ()
    #: the operand that combines the sums as they are stored (DG's gradient's
    #: ``J[x, r, e]``), the reduction index of ``B`` its sums are kept apart by (``r``:
    #: one accumulator tile each), and its own output indices (``x``: one store each)
    combine: int | None = None
    carried: tuple[str, ...] = ()
    spread: tuple[str, ...] = ()


def memory_orders(e: BatchedEinsum, c: int) -> list[list[str]]:
    """The indices of operand *c* in memory order (innermost last), one list per factor."""
    idx = list(e.in_indices[c])
    return [idx if f.order == "C" else idx[::-1] for f in e.arguments[0][c]
            if isinstance(f, Array)]


def _fixed(e: BatchedEinsum, i: str) -> bool:
    return isinstance(e.lengths[i], int)


def _grow(e: BatchedEinsum, seed: str, orders: Sequence[Sequence[str]], allowed: set[str]
          ) -> tuple[str, ...]:
    """The run of *allowed* indices around *seed* adjacent (in the same order) in every
    one of *orders*: fusable into one index when every member but the first is fixed."""
    group = [seed]

    def neighbour(i: str, step: int) -> str | None:
        found = set()
        for o in orders:
            k = list(o).index(i) + step if i in o else -1  # not in an operand: alone
            found.add(o[k] if 0 <= k < len(o) else None)
        n = found.pop() if len(found) == 1 else None
        return n if n in allowed and n not in group else None

    while True:
        before = neighbour(group[0], -1)
        if before is not None and all(_fixed(e, i) for i in group):
            group.insert(0, before)
            continue
        after = neighbour(group[-1], 1)
        if after is not None and _fixed(e, after):
            group.append(after)
            continue
        return tuple(group)


def roles(e: BatchedEinsum) -> Roles | str:
    """The GEMM view of *e*, or why it has none."""
    if isinstance(ops := operand_columns(e), str):
        return ops
    if any(e.value_dtype(row).kind == "c" for row in range(e.nrows)):
        return "complex values: use contraction"
    if len({e.value_dtype(row) for row in range(e.nrows)}) > 1:
        return "rows of different dtypes (a batched einsum): use contraction"
    if not e.reduction_indices or not e.out_indices:
        return "needs a reduction index and an output index"
    out = list(e.out_indices)
    x, a, b = out[-1], ops.a, ops.b
    if x in e.in_indices[a]:
        return f"{x} indexes both operands (a batch index): not a GEMM tile"
    only_a = [i for i in out if i in e.in_indices[a] and i not in e.in_indices[b]]
    if not only_a:
        return "operand A has no free output index"
    only_b = {i for i in out if i in e.in_indices[b] and i not in e.in_indices[a]}
    xs = _grow(e, x, [*memory_orders(e, b), out], only_b)
    ys = _grow(e, only_a[-1], [*memory_orders(e, a), out], set(only_a))
    k = str(main_reduction(e))
    ks = _grow(e, k, [*memory_orders(e, a), *memory_orders(e, b)], set(e.reduction_indices))
    rest = tuple(i for i in out if i not in (*xs, *ys))
    combine = ops.combine[0] if ops.combine else None
    carried: tuple[str, ...] = ()
    spread: tuple[str, ...] = ()
    if combine is not None:
        carried = tuple(i for i in e.reduction_indices if i in e.in_indices[combine])
        spread = tuple(i for i in rest if i in e.in_indices[combine])
        why = _combination_refused(e, carried, spread, ks)
        if why:
            return why
        rest = tuple(i for i in rest if i not in spread)
    if e.nrows > 1 and len(rest) > 1:
        return ("several rows (a batched einsum) and batch indices that loop in the "
                "kernel: use contraction")
    sides = [{i for c in (side, *factors) for i in e.in_indices[c]}
             for side, factors in ((a, ops.a_factors), (b, ops.b_factors))]
    sums = [tuple(i for i in e.reduction_indices if i not in (*ks, *carried)
                  and i in sides[n] and i not in sides[1 - n] and _fixed(e, i))
            for n in (0, 1)]
    if math.prod(int(e.lengths[i]) for i in (*sums[0], *sums[1])) > MAX_SUMMED:
        sums = [(), ()]
    return Roles(a, b, xs, ys, ks, rest,
                 tuple(i for i in e.reduction_indices
                       if i not in (*ks, *sums[0], *sums[1], *carried)),
                 ops.scales, ops.a_factors, ops.b_factors, sums[0], sums[1], combine,
                 carried, spread)


def _combination_refused(e: BatchedEinsum, carried: tuple[str, ...],
                         spread: tuple[str, ...],
              ks: tuple[str, ...]) -> str | None:
    """Why the sums cannot be combined as they are stored over *carried* into *spread*
    (:attr:`Roles.carried`), or ``None``."""
    if len(carried) != 1 or carried[0] in ks or not _fixed(e, carried[0]):
        return ("an operand combines the sums over reduction indices of B's "
                f"({', '.join(carried)}): one of fixed length outside K at most")
    if not all(_fixed(e, i) for i in spread):
        return f"an operand combines the sums into {', '.join(spread)}: fixed lengths only"
    if int(e.lengths[carried[0]]) > MAX_CARRIED:
        return (f"an operand combines the sums over {carried[0]} of length "
                f"{e.lengths[carried[0]]}: at most {MAX_CARRIED} register tiles")
    return None


def operand_entry(e: BatchedEinsum, c: int, at: dict[str, Any]) -> Any:
    """Row 0's operand *c* (the rule ``op{c}_r0``) at the indices *at* gives."""
    return prim.Variable(f"op{c}_r0")(*(at[i] for i in e.in_indices[c]))


def tiles_kept(e: BatchedEinsum, r: Roles) -> int:
    """The register tiles (and ``B`` tiles) a work-item keeps: one for each value of
    :attr:`Roles.carried`."""
    return math.prod(int(e.lengths[i]) for i in r.carried)


def group_length(e: BatchedEinsum, group: Sequence[str]) -> Any:
    """The fused length of *group* (an int, or ``c*n`` for a symbolic first member)."""
    fixed = math.prod(int(e.lengths[i]) for i in group[1:])
    first = e.lengths[group[0]]
    return fixed * first if isinstance(first, int) else (
        prim.Variable(first) if fixed == 1 else fixed * prim.Variable(first))


def components(e: BatchedEinsum, group: Sequence[str], flat: Any) -> dict[str, Any]:
    """Each member of *group* as an expression of the fused index *flat*."""
    out: dict[str, Any] = {}
    inner = 1
    for n, i in enumerate(reversed(group)):
        v = flat if inner == 1 else prim.FloorDiv(flat, inner)
        out[i] = v if n == len(group) - 1 else prim.Remainder(v, int(e.lengths[i]))
        inner *= int(e.lengths[i]) if n < len(group) - 1 else 1
    return out


@dataclass(frozen=True)
class Tiling:
    """A GEMM tiling (see the module docstring)."""

    lx: int
    ly: int
    px: int
    py: int
    kt: int
    vw: int = 1
    split: int = 1
    double_buffer: bool = False

    @property
    def bm(self) -> int:
        return self.ly * self.py

    @property
    def bn(self) -> int:
        return self.lx * self.px

    @property
    def threads(self) -> int:
        return self.lx * self.ly

    def pad(self, transposed: bool) -> int:
        """Extra entries per local tile row: a copy that transposes (the operand's
        contiguous axis is ``K``) writes ``kt`` rows at once; padding rows by ``BANKS/kt``
        (at least ``vw``, keeping rows aligned to vectors) puts them in distinct banks."""
        return max(self.vw, BANKS // self.kt) if transposed else 0

    def local_entries(self, transposed_a: bool, transposed_b: bool, b_tiles: int = 1) -> int:
        """Entries of the local tiles (both buffers; *b_tiles* tiles of ``B``)."""
        rows = self.kt * (2 if self.double_buffer else 1)
        return rows * (self.bm + self.pad(transposed_a)
                       + b_tiles * (self.bn + self.pad(transposed_b)))


def transposes(e: BatchedEinsum, r: Roles, column: int) -> bool:
    """Whether operand *column*'s contiguous axis is in ``K`` (its local copy transposes)."""
    orders = memory_orders(e, column)
    return bool(orders) and orders[0][-1] in r.k


def register_offset(lanes: int, vw: int, lid: Any, p: Any) -> Any:
    """Where entry *p* of work-item *lid*'s register tile sits in a block of the tile:
    runs of *vw* adjacent entries, one run per work-item, ``lanes * vw`` apart."""
    return (p // vw) * (lanes * vw) + lid * vw + p % vw
