"""The search for a device's default layout of :mod:`feinsum.toolbox.nodes`: an estimate of
a layout's time per element (:func:`layout_cost`), whether a layout fits the device
(:func:`misfit`), and the layout of least estimate among those that fit
(:func:`best_layout`)."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any, cast

from feinsum.devices.info import GENERIC_GPU, allocated_registers
from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox.dense import Stage, element_stages, operator_fits, plans, stage_indices
from feinsum.toolbox.node_plan import (
    MAX_GROUPS_PER_UNIT,
    MAX_UNROLLED,
    NodeLayout,
    access,
    cells,
    chunks,
    direct_stage,
    element,
    element_index,
    fetch_dims,
    flat_possible,
    flat_stage,
    itemsize,
    kept_private,
    length,
    local_entries,
    node_reason,
    operator_entries,
    outer,
    owners,
    plan_stages,
    private_indices,
    registers,
    sliced,
    slots,
    specific,
    split_index,
    stage_lane,
    stage_out,
    unrolled_statements,
)

# {{{ the default: an estimate of a layout's time per element


#: fp32 lanes a compute unit issues per clock (NVIDIA's SM, AMD's CU with packed fp32):
#: what :func:`layout_cost` divides multiply-adds by (fp64: times the device's fp64 rate).
FP32_LANES = 128
#: Schedulers of a compute unit, each issuing one subgroup instruction per clock.
SCHEDULERS = 4
#: Subgroups a compute unit needs resident to hide memory latencies (:func:`layout_cost`).
LATENCY_SUBGROUPS = 12


@functools.lru_cache(maxsize=1 << 16)
def lane_options(e: BatchedEinsum) -> list[int]:
    """Work-items along ``l.0`` a layout may take: the divisors of the output's last index
    length (no idle lanes) and the powers of two below it (whole subgroups)."""
    n = length(e, e.out_indices[-1])
    return sorted({d for d in range(1, n + 1) if n % d == 0}
                  | {2 ** k for k in range(8) if 2 ** k < n})


def _subgroup(device: Any) -> int:
    return int(device.subgroup_width or GENERIC_GPU["subgroup_width"])


def layout_cost(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, device: Any,
                elements: int | None = None) -> float:
    """An estimate of a layout's time per element on *device*, in compute-unit clocks:
    the most of its L1/local-memory wavefronts (a wavefront moves one 32-bit word per lane
    of a subgroup; a subgroup's access to ``d`` distinct values of one row takes
    ``d*itemsize / wavefront`` of them, rounded up, once per element row it spans), its
    multiply-add issue (:data:`FP32_LANES`) and its latency (a block's: the longer of its
    waits, :func:`_latency`, and one subgroup's own instructions at one a clock of its
    scheduler, and :data:`OVERLAP` of the shorter; over the resident work-groups; with
    *elements*, the element count, whole waves of resident work-groups, each a block's
    latency): the largest and :data:`OVERLAP` of the second,
    stretched when fewer than :data:`LATENCY_SUBGROUPS` subgroups fit a compute unit
    (registers, local memory)."""
    sg, isz = _subgroup(device), itemsize(e)
    L0, B = layout.lanes, layout.block
    warps = -(-layout.work_items // sg)
    spans = min(layout.rows, max(1, sg // L0))  # element rows one subgroup access spans

    def waves(distinct: int, rows: int = 1, local: bool = True) -> float:
        # local memory: the distinct values of every row at once (no bank conflicts);
        # global memory: each row's values are a separate run of cache lines
        if local:
            return max(1, -(-distinct * rows * isz // (sg * 4)))
        return rows * max(1, -(-distinct * isz // (sg * 4)))

    lsu = fma = 0.0  # per work-item and block, then per element
    passes = chunks(e.nrows, layout.rows_per_pass)
    flat = 0.0  # a flat first stage's, per element
    for s, st in enumerate(stages):
        lane = stage_lane(e, stages, s)
        points = math.prod(length(e, i) for i in stage_indices(e, stages, s)
                           if i not in st.out)
        if flat_stage(e, stages, layout, s):
            flat, f = _flat_cost(e, stages, points, sg)
            fma += f * B / warps
            continue
        # a split layout computes the first stage once per value of the split index
        split = outer(e, stages, layout)
        acc = cells(e, stages, s, layout) * passes * (length(e, split) if split and s == 0
                                                      else 1)
        fma += acc * points * max(1, len(st.inputs) - 1)
        for col in st.inputs:
            dims = fetch_dims(e, stages, s, col, layout.registers, split)
            if dims is None:
                continue
            sizes = {"n": layout.elements, "t": chunks(length(e, lane), L0)}
            count = math.prod(sizes.get(d) or length(e, d) for d in dims)
            copies = slots(e, layout) if col == "w" or int(col) in specific(e) else 1
            # one run of addresses per subgroup, except a "lanes" read: one per row
            lsu += points * acc / cells(e, stages, s, layout) * count * copies * waves(
                min(L0, sg) if "t" in dims else 1, spans if "n" in dims else 1,
                col == "w" or access(e, stages, int(col), layout.registers) != "lanes")
        if s == len(stages) - 1 or not kept_private(e, stages, s):  # stores
            lsu += acc * waves(min(L0, sg), spans, s < len(stages) - 1)
    fp_rate = FP32_LANES / sg * (device.fp64_rate if isz == 8 and device.fp64_rate else 1.0)
    # one subgroup's own instructions per block, each a clock of its scheduler (a
    # multiply-add: its pipe's clocks, a quarter of the compute unit's lanes)
    stream = fma * SCHEDULERS / fp_rate + lsu + flat * B / warps
    lsu = lsu * warps / B + flat
    # the block's copies into local memory: a global read and a local store per value
    el = element_index(e)
    staged = sum(math.prod(length(e, i) for i in e.in_indices[c] if i != el)
                 * (e.nrows if c in specific(e) else 1) for c in range(e.noperands)
                 if access(e, stages, c, layout.registers) == "staged")
    # the operators: per work-group (a group that loops stages them once for all of its
    # blocks), or per block and slice of the split index (sliced)
    operators = 0.0
    per_group = _blocks_per_group(layout, elements)
    for (r, c), o in owners(e).items():
        if o == r and access(e, stages, c, layout.registers) in ("local", "registers"):
            if sliced(e, stages, layout, c):
                operators += math.prod(length(e, i) for i in e.in_indices[c]) / B
            elif per_group:
                operators += operator_entries(e, stages, c, L0) / B / per_group
    lsu += 2 * waves(sg) / sg * (staged + operators)
    fma = fma * warps / B / fp_rate
    resident = resident_groups(e, stages, layout, device)
    waits = _latency(e, stages, layout)  # per block
    latency = max(waits, stream) + OVERLAP * min(waits, stream)
    if elements:  # whole waves of resident work-groups, each block a group's latency
        units = int(device.compute_units or 1)
        blocks = chunks(elements, B)
        groups = min(blocks, layout.groups) if layout.groups else blocks
        rounds = chunks(chunks(groups, units), resident) * chunks(blocks, groups)
        latency = rounds * latency * units / elements
    else:
        latency /= B * resident
    bounds = sorted((lsu, fma, latency), reverse=True)
    return (bounds[0] + OVERLAP * bounds[1]) * max(1.0, LATENCY_SUBGROUPS / (resident * warps))


def _blocks_per_group(layout: NodeLayout, elements: int | None) -> int:
    """The element blocks each work-group of *layout* computes at *elements* elements (one
    without ``groups``; 0, many, where a looping layout's element count is unknown)."""
    if not layout.groups:
        return 1
    return chunks(chunks(elements, layout.block), layout.groups) if elements else 0


def idles(layout: NodeLayout, elements: int | None) -> bool:
    """Whether *layout*'s work-groups that loop over the blocks outnumber the blocks of
    *elements* elements: the extra groups compute on clamped elements and store nothing
    (``groups = 0``, a group a block, does the same work without them)."""
    return bool(layout.groups and elements and layout.groups > chunks(elements, layout.block))


#: the share of the second-largest bound that does not overlap the largest (as
#: :mod:`feinsum.prediction` counts it)
OVERLAP = 0.5


#: cycles a work-group waits for a global read, a local read, a dependent multiply-add
#: (NVIDIA's orders of magnitude; two reads of a rolled loop's iterations in flight)
GLOBAL_WAIT, LOCAL_WAIT, FMA_WAIT = 300.0, 15.0, 6.0


def _latency(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout) -> float:
    """The cycles one work-group waits in sequence per block: per rolled reduction
    iteration a read and a dependent multiply-add, a global read per flat round that is
    not unrolled (or one for all), a global read per element copy."""
    passes = chunks(e.nrows, layout.rows_per_pass)
    split = outer(e, stages, layout)
    trips = length(e, split) if split else 1
    def copy(count: int) -> float:  # a copy loop, unrolled up to 16 rounds
        rounds = chunks(count, layout.work_items)
        return GLOBAL_WAIT * (rounds if rounds > 16 else 1)

    total = 0.0
    for (r, c), o in owners(e).items():
        mode = access(e, stages, c, layout.registers)
        if o == r and mode in ("local", "registers"):
            n = math.prod(length(e, i) for i in e.in_indices[c])
            if sliced(e, stages, layout, c):
                total += passes * trips * copy(n // trips)
            elif not layout.groups:
                total += copy(n)
        elif mode == "staged" and (o == r or c in specific(e)):
            total += passes * copy(layout.block * math.prod(
                length(e, i) for i in e.in_indices[c] if i != element(e)))
    for s, st in enumerate(stages):
        inside = trips if s < 2 else 1
        if flat_stage(e, stages, layout, s):
            size = math.prod(length(e, i) for i in stage_out(e, stages, s, split))
            rounds = chunks(size * layout.block, layout.work_items)
            total += passes * inside * GLOBAL_WAIT * (rounds if rounds > 16 else 1)
            continue
        if direct_stage(e, stages, layout, s):
            total += passes * GLOBAL_WAIT
            continue
        rolled = math.prod(length(e, i) for i in stage_indices(e, stages, s)
                           if i not in st.out and i != split
                           and i not in private_indices(e, stages, s, layout.registers))
        glob = any(col != "w" and access(e, stages, int(col), layout.registers)
                   in ("lanes", "broadcast") for col in st.inputs)
        total += passes * inside * rolled * ((GLOBAL_WAIT if glob else LOCAL_WAIT) + FMA_WAIT)
    return total


def _flat_cost(e: BatchedEinsum, stages: Sequence[Stage], points: int, sg: int
               ) -> tuple[float, float]:
    """A flat first stage's wavefronts and multiply-adds per element (and subgroup): its
    entries spread over all the lanes, an operand ending with the stage's outputs read
    coalesced (a run of a subgroup's values), the others one line per access, the result
    stored to local memory in runs."""
    st, isz = stages[0], itemsize(e)
    rows = e.nrows if any(int(c) in specific(e) for c in st.inputs) else 1
    entries = math.prod(length(e, i) for i in st.out) * rows / sg  # subgroup rounds
    run = max(1, -(-sg * isz // (sg * 4)))
    reads = sum(run if e.in_indices[int(c)][-1] in st.out else 1 for c in st.inputs)
    return entries * (points * reads + run), entries * points * max(1, len(st.inputs) - 1)


def resident_groups(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout,
                    device: Any) -> int:
    """Work-groups of *layout* one compute unit holds at once (its registers over the
    group's estimate, allocated a subgroup at a time; its local memory, where the device's
    L1 holds it, over the group's)."""
    sg = _subgroup(device)
    isz = itemsize(e)
    regs = allocated_registers(registers(e, stages, layout), sg) * -(-layout.work_items // sg)
    by_regs = int(device.registers_per_compute_unit
                  or GENERIC_GPU["registers_per_compute_unit"]) // max(1, regs)
    # where the L1 holds local memory, part of it stays cache (7/8 at most for local
    # memory), and each group's local memory takes a little more (1 KiB of it)
    local = local_entries(e, stages, layout) * isz + 1024
    capacity = max(device.local_mem_size, device.l1_cache_size * 7 // 8)
    return max(1, min(by_regs, capacity // local, MAX_GROUPS_PER_UNIT))



@functools.lru_cache(maxsize=1 << 16)
def node_plans(e: BatchedEinsum) -> list[int | None]:
    """The contraction plans (``last``, :func:`feinsum.toolbox.dense.plans`) the layout
    runs."""
    return [c for c in plans(e) if node_reason(e, element_stages(e, c)) is None]


def private_registers(device: Any) -> int:
    """32-bit registers a work-item may take (the device's, or a generic GPU's)."""
    return int(device.registers_per_work_item or GENERIC_GPU["registers_per_work_item"])


def misfit(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, device: Any
           ) -> str | None:
    """Which of the device's limits *layout* exceeds (``None``: it fits): local memory,
    registers per work-item, :data:`MAX_UNROLLED`."""
    isz = itemsize(e)
    local = local_entries(e, stages, layout) * isz
    if local > device.local_mem_size:
        return f"{local} bytes of local memory > local_mem_size {device.local_mem_size}"
    regs = registers(e, stages, layout)
    if regs > private_registers(device):
        return (f"about {regs} registers per work-item > registers_per_work_item "
                f"{private_registers(device)}")
    group = regs * layout.work_items
    units = int(device.registers_per_compute_unit or GENERIC_GPU["registers_per_compute_unit"])
    if group > units:
        return (f"about {group} registers per work-group > registers_per_compute_unit "
                f"{units}")
    code = unrolled_statements(e, stages, layout)
    if code > MAX_UNROLLED:
        return f"{code} unrolled multiply-adds per block > {MAX_UNROLLED}"
    return None


@functools.lru_cache(maxsize=256)
def any_layout_fits(e: BatchedEinsum, device: Any) -> bool:
    """Whether :func:`best_layout` finds a layout (it stops at the first that fits)."""
    e = cast(BatchedEinsum, _Same(e))
    return any(not misfit(e, plan_stages(e, last), layout, device)
               for last, layout in _candidates(e, device))


def _candidates(e: BatchedEinsum, device: Any) -> Iterator[tuple[int | None, NodeLayout]]:
    sg, sizes = _subgroup(device), device.max_work_item_sizes
    limit = min(device.max_work_group_size, 1024)
    for last, lanes, k in itertools.product(node_plans(e), lane_options(e), range(7)):
        rows = 2 ** k
        if not sg <= lanes * rows <= limit or lanes > sizes[0] or rows > sizes[1]:
            continue
        stages = plan_stages(e, last)
        regs = [False, True] if any(access(e, stages, c, True) == "registers"
                                    for c in range(e.noperands)) else [False]
        splits = [False, True] if _split_offered(e, stages, device) else [False]
        flats = [False, True] if flat_possible(e, stages) else [False]
        for n, f, reg, sp, fl, cut in itertools.product(
                (1, 2, 4, 8), range(1, e.nrows + 1), regs, splits, flats, (False, True)):
            lay = NodeLayout(lanes, rows, n, f, reg, 0, sp, fl, cut)
            if cut and (reg or not any(sliced(e, stages, lay, c) for c in range(e.noperands))):
                continue
            yield last, lay
            # one wave of work-groups looping over the blocks: operators staged once
            yield last, NodeLayout(lanes, rows, n, f, reg, device.compute_units
                                   * resident_groups(e, stages, lay, device), sp, fl, cut)


def _split_offered(e: BatchedEinsum, stages: Sequence[Stage], device: Any) -> bool:
    """Whether the default's search tries split layouts of the plan *stages*: where the
    first stage's result goes through local memory (the divergence's: one slice of it
    there at a time); where it stays in registers (the gradient's), only if the einsum's
    element-independent operands do not fit the local memory whole (slices are staged
    again for every block, which the estimate undercounts: on the ``mi250x`` model it took
    them for the gradient at 35 nodes, predicted 40 % slower)."""
    if split_index(e, stages) is None:
        return False
    if not kept_private(e, stages, 0):
        return True
    return not operator_fits(e, device)


class _Same:
    """An einsum looked up by identity: the search below asks the caches of this module
    about one einsum thousands of times, and a spec's own hash walks all of it."""

    def __init__(self, e: BatchedEinsum) -> None:
        self._e = e

    def __getattr__(self, name: str) -> Any:
        return getattr(self._e, name)


@functools.lru_cache(maxsize=256)
def ranked_layouts(e: BatchedEinsum, device: Any, elements: int | None = None,
                   count: int = 1) -> tuple[tuple[int | None, NodeLayout], ...]:
    """The *count* plans and layouts of least :func:`layout_cost` (fewer registers first
    on a tie) among those that fit *device* (one block per work-group, or one wave of
    work-groups looping over the blocks, never more of them than blocks), best first;
    *elements*: the element count, where known."""
    ranked: dict[tuple[int | None, NodeLayout], tuple[float, int]] = {}
    e = cast(BatchedEinsum, _Same(e))
    for last, layout in _candidates(e, device):
        stages = plan_stages(e, last)
        if (last, layout) in ranked or idles(layout, elements) or misfit(
                e, stages, layout, device):
            continue
        ranked[last, layout] = (layout_cost(e, stages, layout, device, elements),
                                registers(e, stages, layout))
    return tuple(sorted(ranked, key=ranked.__getitem__)[:count])


def best_layout(e: BatchedEinsum, device: Any, elements: int | None = None
                ) -> tuple[int | None, NodeLayout] | None:
    """The first of :func:`ranked_layouts`, or ``None`` if no layout fits."""
    best = ranked_layouts(e, device, elements)
    return best[0] if best else None


# }}}
