"""When the work-items of a GPU should share a reduction instead of owning an output each.

generic's default gives each work-item of a GPU its own output entries and a sequential
reduction. For the matrix-vector shapes that leaves the device far from its bandwidth:

* in ``ij,j->i`` (and ``ij->i``, ``bij,bj->bi``) the matrix's consecutive addresses run
  along the reduction index, so lanes on the outputs read it with a stride of a whole
  row: a warp touches 32 rows for 32 values, a sector each;
* in ``ji,j->i`` the lanes read consecutive addresses, but the outputs (a vector's
  length) are too few to occupy the device: a few warps per compute unit, each sweeping
  the whole reduction.

Sharing the reduction among ``rlocal`` work-items of a group (``l.1``; a tree combines
their partial results) reads the matrix at consecutive addresses in both cases, with a
group per ``lx`` outputs. The H200 model predicts 60-90% of the bandwidth for these
shapes against 13-54% for one output per work-item, and for a tall matrix of short rows
(16 to 128 values) 66-81% against 61-62% (docs/recipe-library.rst).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from feinsum.spec.model import Array, BatchedEinsum

#: The reductions whose partial results generic's shared reduction can combine (loopy
#: cannot nest the argmin/argmax ones).
SHAREABLE = ("sum", "max", "min", "logsumexp")
#: Terms a reduction has at least for sharing it to pay beside the tree, where lanes on
#: the outputs would read an operand with a stride (a row of fewer values spans few
#: sectors), and where they would not but the outputs are few.
MIN_STRIDED_TERMS = 16
MIN_TERMS = 256
#: Entries from which an operand of fixed lengths is a stream through DRAM, not a small
#: operator the caches keep (:func:`streamed`).
MIN_STREAMED = 1 << 16
#: Outputs per compute unit below which one output per work-item leaves a GPU idle.
OUTPUTS_PER_UNIT = 256
#: Terms per work-item of a strided reduction the default aims at (the work-items sharing
#: it: a power of two from 4 to 64, :func:`strided_lanes`).
TERMS_PER_ITEM = 16
#: (outputs per group, work-items per output) where lanes on the outputs would not read
#: with a stride but the outputs are too few: a warp reads 4 consecutive values along the
#: reduction of 8 consecutive outputs (a 32-byte sector of float32).
FEW = (8, 32)


def contiguous_index(e: BatchedEinsum, column: int) -> str | None:
    """The index along which operand *column* is stored at consecutive addresses in every
    row (None: a formula, no index, or rows stored in different orders)."""
    indices = e.in_indices[column]
    orders = {f.order if isinstance(f, Array) else None for row in e.arguments
              for f in row[column]}
    if not indices or orders not in ({"C"}, {"F"}):
        return None
    return indices[-1] if orders == {"C"} else indices[0]


def strided_lanes(terms: int | None) -> tuple[int, int]:
    """``(lx, rlocal)`` where lanes on the outputs would read with a stride, for a
    reduction of *terms* terms (None: unknown, long): about :data:`TERMS_PER_ITEM` terms
    per work-item, 4 to 64 work-items an output, 64 to a group (128 for 64 an output: an
    output index of one work-item cannot be split in slabs)."""
    rlocal = 4
    while rlocal < 64 and (terms is None or rlocal * TERMS_PER_ITEM < terms):
        rlocal *= 2
    return max(2, 64 // rlocal), rlocal


def streamed(e: BatchedEinsum, column: int) -> bool:
    """Whether operand *column* is read from DRAM as a stream (a long index, or at least
    :data:`MIN_STREAMED` entries) rather than from the caches (a DG operator: every
    output reads it again)."""
    n = [e.lengths[i] for i in e.in_indices[column]]
    fixed = [k for k in n if isinstance(k, int)]
    return len(fixed) < len(n) or math.prod(fixed) >= MIN_STREAMED


def known_length(e: BatchedEinsum, index: str, lengths: Mapping[str, int]) -> int | None:
    """The length of *index*: fixed, or its symbol's value in *lengths* (None: unknown)."""
    n = e.lengths[index]
    return n if isinstance(n, int) else lengths.get(str(n))


def shared_lanes(e: BatchedEinsum, device: Any, x: str | None, r: str | None,
                 lengths: Mapping[str, int]) -> tuple[int, int] | None:
    """``(lx, rlocal)`` for a GPU's work-items sharing the reduction *r* of *e* (outputs
    along *x* on ``l.0``), or None where one output per work-item is the better default.
    *lengths*: the values of the length symbols where known (an unknown one is long)."""
    if device.is_cpu or x is None or r is None or e.reduction not in SHAREABLE:
        return None
    terms = known_length(e, r, lengths)
    strided = any(x in e.in_indices[c] and contiguous_index(e, c) == r
                  and streamed(e, c) for c in range(e.noperands))
    if strided and (terms is None or terms >= MIN_STRIDED_TERMS):
        lx, rlocal = strided_lanes(terms)
    else:
        outputs = [known_length(e, i, lengths) for i in e.out_indices]
        few = None not in outputs and (math.prod(n for n in outputs if n is not None)
                                       * e.nrows < OUTPUTS_PER_UNIT * max(1, device.compute_units))
        if strided or not few or (terms is not None and terms < MIN_TERMS):
            return None
        lx, rlocal = FEW
    sizes = device.max_work_item_sizes
    rlocal = min(rlocal, sizes[2] if len(sizes) > 2 else sizes[-1],
                 min(device.max_work_group_size, 1024) // lx)
    return (lx, rlocal) if rlocal > 1 else None
