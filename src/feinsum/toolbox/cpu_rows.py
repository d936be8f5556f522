"""generic's CPU default for the matrix-vector shapes: what keeps a core's vector units busy.

PoCL runs a work-group's work-items as a loop around the kernel's body between barriers,
and vectorizes that loop when it is innermost. generic's default gives each work-item an
output and a rolled reduction loop, so for long reductions the work-item loop is outside
it, and each core waits on one chain of dependent additions:

* in ``ij,j->i`` (and ``ij->i``, ``ij,ij->i``, a row's maximum) each work-item sweeps a
  row the matrix stores contiguously. Two outputs per work-item and an untiled
  reduction (``px = 2``, ``rtile = 1``) give each core two independent chains. On this
  project's CPU (2 cores, PoCL): 9.6 to 4.8 ms at 4000 x 4000 float64; rows of 35 values
  keep the default (10.1 against 8.0 ms);
* in ``ji,j->i`` the work-items read consecutive addresses, but nothing splits the loop
  around them. Staging the vector ``y[j]`` in local memory puts a barrier in each tile
  of the reduction, so PoCL vectorizes the work-items of each tile: 27.6 to 6.4-7.0 ms at
  4000 x 4000 float64 (256 work-items, tiles of 16 terms), 1.66 to 0.69 ms at 1500 x 1500;
  a matrix the caches hold keeps the default (1000 x 1000: 0.25 against 0.29 ms).

Both keep IEEE arithmetic (no ``fast_math``): the sums are added in the order of the
reference kernel's loop, per output. For the same reason generic's CPU default never
shares a reduction among a group's work-items (its ``rlocal``): PoCL runs a work-group on
one core, and work-items sharing a reduction read its terms interleaved (a dot product of
1e7 float64 took 135 ms shared, 11 ms in one work-item's loop).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox.core import dtype_size
from feinsum.toolbox.sharing import SHAREABLE, contiguous_index, known_length, streamed

#: Terms of a row read along the matrix's contiguous index from which two outputs per
#: work-item pay (measured: 35 lost, 50 and more gained).
MIN_ROW_TERMS = 48
#: Terms from which staging a vector along the reduction pays (at least 4 tiles: PoCL
#: miscompiles local staging in a loop of exactly 2, see generic's constraints).
MIN_STAGED_TERMS = 64
#: Bytes of the matrix from which it is staged: beyond the caches (the matrix is read in
#: columns of ``lx`` values; at 8 MB the default took 0.25 ms and the staged layout 0.29 ms,
#: at 18 MB 1.66 and 0.69 ms; this CPU's last-level cache holds 32 MiB).
MIN_STAGED_BYTES = 16 << 20
#: Work-items and reduction tile of the staged layout.
STAGED_ITEMS, STAGED_TILE = 256, 16


def cpu_rows(e: BatchedEinsum, device: Any, x: str | None, r: str | None,
             lengths: Mapping[str, int]) -> dict[str, Any] | None:
    """generic's parameters that differ from its default on a CPU for a matrix-vector
    shape of *e* (outputs along *x*, main reduction *r*), or None where the default
    stands. *lengths*: the values of the length symbols where known."""
    if not device.is_cpu or x is None or r is None or e.reduction not in SHAREABLE:
        return None
    terms = known_length(e, r, lengths)
    if any(x in e.in_indices[c] and contiguous_index(e, c) == r and streamed(e, c)
           for c in range(e.noperands)):
        return {"px": 2, "rtile": 1} if terms is None or terms >= MIN_ROW_TERMS else None
    vectors = [c for c in range(e.noperands) if e.in_indices[c] == (r,)
               and contiguous_index(e, c) == r]
    rows = any(x in e.in_indices[c] and contiguous_index(e, c) == x and r in e.in_indices[c]
               and streamed(e, c) for c in range(e.noperands))
    n = known_length(e, x, lengths)
    if not (vectors and rows and terms is not None and terms >= MIN_STAGED_TERMS
            and n is not None and n * terms * e.nrows * dtype_size(e) >= MIN_STAGED_BYTES):
        return None  # (an unknown length might make a loop of 2 tiles)
    items = min(STAGED_ITEMS, 1 << max(0, (n - 1).bit_length()))
    return {"lx": min(items, device.max_work_group_size), "px": 1, "rtile": STAGED_TILE,
            "vec": 1, "slabs": False, f"stage{vectors[0]}": "local"}
