"""The ``gemm_gpu`` recipe's default tiling (:func:`default_tiling`): the cheaper of a
4 x 4 and an 8 x 8 register tiling by :func:`tiling_cost`, each with the local tile depth
local memory holds and the split-K that fills the device."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox.core import dtype_size
from feinsum.toolbox.gemm import local_entries, register_budget, value_registers
from feinsum.toolbox.gemm_view import K_TILES, SPLITS, Roles, Tiling, group_length

#: The work-items of a default work-group (fewer where the device allows fewer).
DEFAULT_THREADS = 256
#: The length the default assumes for a symbolic output length whose value it is not
#: given, when it decides whether the output fills the device (twice the shortest length
#: canonical specs abstract).
SYMBOLIC_GUESS = 512
#: The shortest slice of a split reduction the default makes: each slice's partial sums
#: then cost a few percent of its flops' time in memory traffic.
SLICE_DEPTH = 1024


def _estimate(e: BatchedEinsum, group: Sequence[str], lengths: Mapping[str, int]) -> int:
    """The length of *group*: a symbolic member's value from *lengths*, else
    :data:`SYMBOLIC_GUESS`."""
    return math.prod(n if isinstance(n, int) else int(lengths.get(n, SYMBOLIC_GUESS))
                     for n in (e.lengths[i] for i in group))


def default_tiling(e: BatchedEinsum, r: Roles, device: Any,
                   lengths: Mapping[str, int] | None = None) -> Tiling:
    """The default GEMM tiling on *device*, the cheaper by :func:`tiling_cost` of two:

    * 16 x 16 work-items (fewer where the device allows fewer) with 4 x 4 register tiles
      in runs of 4 (64 x 64 blocks), smaller where the registers do not hold them;
    * 16 x 8 work-items with 8 x 8 tiles in runs of 4 (64 x 128 blocks, the long side
      along the contiguous ``X``): half the local loads per FMA, twice the work per
      work-group, where the registers hold it and the device takes 128 work-items.

    Each with ``kt`` 16 (8, 4... where local memory is short), double-buffered, and
    split-K over a fixed reduction when the output has fewer blocks than twice the compute
    units, in slices of at least :data:`SLICE_DEPTH` (one row: the rows of a batch fill
    the device in sequence). Where an operand combines the sums (DG's gradient: a register
    tile for each carried value), the 4 x 4 tiling instead, with 4, 8 or 16 work-items
    along ``X`` (the least waste of a short ``X``) and one buffer (the kept tiles' copies
    already take the registers a second would). *lengths*: values of symbolic
    lengths where known (the others are taken as :data:`SYMBOLIC_GUESS`)."""
    known = dict(lengths or {})
    most = min(DEFAULT_THREADS, device.max_work_group_size)
    lx = min(16, most, device.max_work_item_sizes[0])
    ly = max(1, min(most // lx, device.max_work_item_sizes[1]))
    if r.carried:
        narrow = [_held(e, r, Tiling(n, max(1, min(most // n, device.max_work_item_sizes[1])),
                                     4, 4, 16, 4, 1, False), device)
                  for n in (4, 8, 16) if n <= lx]
        return min((_fitted(e, r, c, device, known) for c in narrow),
                   key=lambda c: tiling_cost(e, r, c, device, known))
    t = _held(e, r, Tiling(lx, ly, 4, 4, 16, 4, 1, True), device)
    candidates = [_fitted(e, r, t, device, known)]
    big = Tiling(16, 8, 8, 8, 16, 4, 1, True)
    if (lx == 16 and most >= big.threads and device.max_work_item_sizes[1] >= big.ly
            and value_registers(e, big, r) <= register_budget(device)):
        candidates.append(_fitted(e, r, big, device, known))
    return min(candidates, key=lambda c: tiling_cost(e, r, c, device, known))


def _held(e: BatchedEinsum, r: Roles, t: Tiling, device: Any) -> Tiling:
    """*t* with its register tile halved (the longer side first), then its ``K`` tile,
    until the registers hold it."""
    px, py, kt = t.px, t.py, t.kt
    while value_registers(e, t, r) > register_budget(device):
        if px * py > 1:
            px, py = (px // 2, py) if px >= py else (px, py // 2)
        elif kt > K_TILES[0]:
            kt //= 2
        else:
            break
        t = Tiling(t.lx, t.ly, px, py, kt, min(t.vw, px, py), 1, t.double_buffer)
    return t


def _fitted(e: BatchedEinsum, r: Roles, t: Tiling, device: Any,
            lengths: Mapping[str, int]) -> Tiling:
    """*t* with ``kt`` halved until local memory holds its tiles, and the default's
    split-K."""
    size = dtype_size(e)
    while local_entries(e, r, t) * size > device.local_mem_size and t.kt > K_TILES[0]:
        t = Tiling(t.lx, t.ly, t.px, t.py, t.kt // 2, t.vw, 1, t.double_buffer)
    k = group_length(e, r.k)
    if r.rest or not isinstance(k, int) or e.nrows > 1 or r.carried:
        return t
    want = -(-2 * device.compute_units // _blocks(e, r, t, lengths))
    split = 1
    while split < want and 2 * split <= min(k // SLICE_DEPTH, SPLITS[-1]):
        split *= 2
    return Tiling(t.lx, t.ly, t.px, t.py, t.kt, t.vw, split, t.double_buffer)


def _blocks(e: BatchedEinsum, r: Roles, t: Tiling, lengths: Mapping[str, int]) -> int:
    """Blocks of the output (:func:`_estimate`'s lengths)."""
    return -(-_estimate(e, r.y, lengths) // t.bm) * -(-_estimate(e, r.x, lengths) // t.bn)


def tiling_cost(e: BatchedEinsum, r: Roles, t: Tiling, device: Any,
                lengths: Mapping[str, int] | None = None) -> float:
    """What the default compares tilings by: the work-groups a compute unit runs in
    sequence (``ceil(groups / compute units)``: the last wave's tail counts) times one
    work-group's FMAs per ``K`` entry of its slice (``BM*BN/split``), times one plus the
    local-memory wavefronts per FMA (a subgroup's vector load of ``vw`` entries moves
    ``vw`` words per lane, one wavefront per 32-bit word: ``(px + py)/(px*py)`` per FMA),
    the pipe a register tile exists to relieve. *lengths*: as :func:`default_tiling`'s."""
    groups = _blocks(e, r, t, dict(lengths or {})) * t.split
    waves = -(-groups // max(1, device.compute_units))
    words = (t.px + t.py) * dtype_size(e) // 4
    return waves * t.bm * t.bn / t.split * (1 + words / (t.px * t.py))
