"""The plan of :mod:`feinsum.toolbox.nodes` (the GPU layout of element-batched operators):
each stage's lane index, how each operand is read, the sizes a layout takes (local memory,
registers, unrolled statements) and the estimate by which a recipe picks its default layout
for a device (:func:`layout_cost`, :func:`best_layout`)."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pymbolic.primitives as prim
from pymbolic.mapper.evaluator import evaluate

from feinsum.devices.info import GENERIC_GPU
from feinsum.spec.model import Array, BatchedEinsum
from feinsum.toolbox.dense import (
    Stage,
    element_index,
    element_reason,
    element_stages,
    plans,
    row_specific,
    stage_indices,
)

#: 32-bit registers every work-item needs besides the values it keeps (indices, addresses).
BASE_REGISTERS = 24
#: Unrolled multiply-add statements of a block at most (code size, compile time).
MAX_UNROLLED = 4096
#: Work-groups per compute unit a looping grid launches at most (``groups``).
MAX_GROUPS_PER_UNIT = 32


@dataclass(frozen=True)
class NodeLayout:
    """How :func:`feinsum.toolbox.nodes.node_kernel` maps an element-batched einsum onto a
    GPU."""

    #: work-items along ``l.0``: each stage's lane index in chunks of this many
    lanes: int
    #: element rows along ``l.1``
    rows: int
    #: elements per work-item (a register tile along the element index)
    elements: int
    #: rows (fields) of a batch sharing every loop
    rows_per_pass: int = 1
    #: each work-item keeps its entries of the staged operators in registers
    registers: bool = False
    #: work-groups launched, each looping over blocks (0: one block per work-group)
    groups: int = 0
    #: loop over the split index (:func:`split_index`) around the first two stages
    split: bool = False

    @property
    def block(self) -> int:
        """Elements per block (per work-group and loop trip)."""
        return self.rows * self.elements

    @property
    def work_items(self) -> int:
        return self.lanes * self.rows


# {{{ the plan: lane indices, access modes, sizes


@functools.lru_cache(maxsize=1 << 12)
def specific(e: BatchedEinsum) -> frozenset[int]:
    """:func:`feinsum.toolbox.dense.row_specific`, remembered."""
    return frozenset(row_specific(e))


@functools.lru_cache(maxsize=1 << 12)
def itemsize(e: BatchedEinsum) -> int:
    """Bytes of the widest output value."""
    return max(e.value_dtype(r).itemsize for r in range(e.nrows))


@functools.lru_cache(maxsize=1 << 12)
def plan_stages(e: BatchedEinsum, last: int | None) -> tuple[Stage, ...]:
    """:func:`feinsum.toolbox.dense.element_stages` (no lane index), remembered."""
    return element_stages(e, last)


def element(e: BatchedEinsum) -> str:
    """The element index of *e* (one the layout runs: see :func:`node_reason`)."""
    return cast(str, element_index(e))


def length(e: BatchedEinsum, i: str) -> int:
    return int(e.lengths[i])


def chunks(n: int, lanes: int) -> int:
    """Chunks of *lanes* entries covering an index of length *n*."""
    return -(-n // lanes)


@functools.lru_cache(maxsize=1 << 16)
def stage_lane(e: BatchedEinsum, stages: Sequence[Stage], s: int) -> str:
    """The lane index of stage *s*: the output's last index if the stage keeps it, else
    its longest output index (the last of equals)."""
    a = e.out_indices[-1]
    if a in stages[s].out:
        return a
    return max(reversed(stages[s].out), key=lambda i: length(e, i))


@functools.lru_cache(maxsize=1 << 16)
def kept_private(e: BatchedEinsum, stages: Sequence[Stage], s: int) -> bool:
    """Whether stage *s*'s result stays in registers (the next stage has the same lane
    index) rather than going to local memory."""
    return s < len(stages) - 1 and stage_lane(e, stages, s) == stage_lane(e, stages, s + 1)


@functools.lru_cache(maxsize=1 << 16)
def split_index(e: BatchedEinsum, stages: Sequence[Stage]) -> str | None:
    """The index a split layout loops over around the first two stages: an output index
    of the first (not its lane index) that the second reduces, the first-stage result
    going through local memory (divergence's ``r``: ``W[j]`` for one ``r`` at a time), so
    that the local memory holds one slice of that result; ``None``: none."""
    if len(stages) < 2 or kept_private(e, stages, 0):
        return None
    lane = stage_lane(e, stages, 0)
    cands = [i for i in stages[0].out if i != lane and i not in stages[1].out]
    return max(cands, key=lambda i: length(e, i)) if cands else None


def outer(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout) -> str | None:
    """The index *layout* loops over around the first two stages (see :func:`split_index`)."""
    return split_index(e, stages) if layout.split else None


def stage_out(e: BatchedEinsum, stages: Sequence[Stage], s: int, split: str | None
              ) -> tuple[str, ...]:
    """Stage *s*'s output indices inside the loop over *split* (the first stage's lose it)."""
    return tuple(i for i in stages[s].out if not (s == 0 and i == split))


@functools.lru_cache(maxsize=1 << 16)
def stage_of(stages: Sequence[Stage], c: int) -> int:
    """The stage that reads operand column *c*."""
    return next(s for s, st in enumerate(stages) if c in st.inputs)


@functools.lru_cache(maxsize=1 << 16)
def access(e: BatchedEinsum, stages: Sequence[Stage], c: int, registers: bool) -> str:
    """How the stage reading operand *c* gets it: ``"lanes"`` (an element operand with the
    lane index, from global memory), ``"broadcast"`` (an element operand without it whose
    last, contiguous index is the element: from global memory, a subgroup's element rows
    one run of addresses), ``"staged"`` (the other element operands, staged per block),
    ``"local"``/``"registers"`` (an operator staged per group, read from local memory or
    kept in registers), ``"global"`` (a scalar operator)."""
    idx = e.in_indices[c]
    lane = stage_lane(e, stages, stage_of(stages, c))
    if element_index(e) in idx:
        return ("lanes" if lane in idx else "broadcast" if idx[-1] == element_index(e)
                else "staged")
    if not idx:
        return "global"
    return "registers" if registers and lane in idx else "local"


def _c_strides(e: BatchedEinsum, idx: Sequence[str]) -> list[int]:
    n = [length(e, i) for i in idx]
    return [math.prod(n[k + 1:]) for k in range(len(n))]


def flat(e: BatchedEinsum, idx: Sequence[str], values: dict[str, Any]) -> Any:
    """The C-order flat offset of *values* (by index) in an array of the indices *idx*."""
    terms = [values[i] * st if st != 1 else values[i]
             for i, st in zip(idx, _c_strides(e, idx), strict=True)]
    return prim.Sum(tuple(terms)) if len(terms) > 1 else terms[0] if terms else 0


@functools.lru_cache(maxsize=1 << 16)
def operator_row(e: BatchedEinsum, stages: Sequence[Stage], c: int) -> int:
    """The entries after the lane index in staged operator *c* (its C stride), padded by
    one in local memory when even, so that the lanes of a subgroup reading a column hit
    distinct banks (0: not padded)."""
    idx = e.in_indices[c]
    lane = stage_lane(e, stages, stage_of(stages, c))
    if lane not in idx:
        return 0
    row = _c_strides(e, idx)[idx.index(lane)]
    return row if row > 1 and row % 2 == 0 else 0


def operator_offset(e: BatchedEinsum, stages: Sequence[Stage], c: int,
                    values: dict[str, Any]) -> Any:
    """The local offset of staged operator *c* at *values*: C order, each row after the
    lane index padded by one where :func:`operator_row` says."""
    idx, row = e.in_indices[c], operator_row(e, stages, c)
    if not row:
        return flat(e, idx, values)
    k = idx.index(stage_lane(e, stages, stage_of(stages, c)))
    return flat(e, idx[:k + 1], values) * (row + 1) + flat(e, idx[k + 1:], values)


@functools.lru_cache(maxsize=1 << 16)
def operator_entries(e: BatchedEinsum, stages: Sequence[Stage], c: int, lanes: int) -> int:
    """Local entries of staged operator *c*: its entries (rows padded, see
    :func:`operator_row`) and what a partial last chunk of its stage's lane index reads
    past them."""
    idx = e.in_indices[c]
    n = math.prod(length(e, i) for i in idx)
    lane = stage_lane(e, stages, stage_of(stages, c))
    if lane not in idx:
        return n
    row = operator_row(e, stages, c)
    last = {i: length(e, i) - 1 for i in idx}
    last[lane] = chunks(length(e, lane), lanes) * lanes - 1
    return max(n + (n // row if row else 0), int(evaluate(operator_offset(e, stages, c, last))) + 1)


def _element_entries(e: BatchedEinsum, c: int) -> int:
    """Entries of element operand *c* per element."""
    return math.prod(length(e, i) for i in e.in_indices[c] if i != element_index(e))


@functools.lru_cache(maxsize=1 << 16)
def owners(e: BatchedEinsum) -> dict[tuple[int, int], int]:
    """``(row, column)`` -> the first row reading the same array(s) in that column (rows
    sharing an operand share its staged copy)."""
    out: dict[tuple[int, int], int] = {}
    for c in range(e.noperands):
        first: dict[tuple[str, ...], int] = {}
        for r in range(e.nrows):
            names = tuple(cast(Array, f).name for f in e.arguments[r][c])
            out[r, c] = first.setdefault(names, r)
    return out


def slots(e: BatchedEinsum, layout: NodeLayout) -> int:
    """Rows of one pass (what per-row local buffers are reused for, pass after pass)."""
    return min(layout.rows_per_pass, e.nrows)


def padded_entries(count: int, layout: NodeLayout) -> int:
    """*count* rounded up to whole rounds of the work-group's work-items (a staged block
    has room for every work-item's store)."""
    return chunks(count, layout.work_items) * layout.work_items


@functools.lru_cache(maxsize=1 << 16)
def local_entries(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout) -> int:
    """Local-memory entries of the kernel: the staged operators, the staged
    element operands of a pass and the stage results kept in local memory."""
    total = 0
    for (r, c), owner in owners(e).items():
        mode = access(e, stages, c, layout.registers)
        if owner == r and mode in ("local", "registers"):
            total += operator_entries(e, stages, c, layout.lanes)
    for c in range(e.noperands):
        if access(e, stages, c, layout.registers) == "staged":
            n = slots(e, layout) if c in specific(e) else 1
            k = e.in_indices[c].index(element_index(e))
            pre = math.prod(length(e, i) for i in e.in_indices[c][:k])
            total += pre * padded_entries(_element_entries(e, c) // pre * layout.block,
                                          layout) * n
    for s in range(len(stages) - 1):
        if not kept_private(e, stages, s):
            total += math.prod(length(e, i) for i in stage_out(
                e, stages, s, outer(e, stages, layout))) * layout.block * slots(e, layout)
    return total


@functools.lru_cache(maxsize=1 << 16)
def accumulators(e: BatchedEinsum, stages: Sequence[Stage], s: int, layout: NodeLayout
                 ) -> int:
    """Accumulators of stage *s* per work-item and pass."""

    lane = stage_lane(e, stages, s)
    others = math.prod(length(e, i) for i in stage_out(e, stages, s, outer(e, stages, layout))
                       if i != lane)
    return (min(layout.rows_per_pass, e.nrows) * layout.elements
            * chunks(length(e, lane), layout.lanes) * others)


@functools.lru_cache(maxsize=1 << 16)
def register_values(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout) -> int:
    """Values a work-item keeps in registers: every stage's accumulators, the stage results
    kept in registers, the operator entries of ``registers`` (all of them: a compiler
    may reuse registers between stages, but a split layout keeps the second stage's
    accumulators live through the first, and the performance model counts them all)."""
    total = 0
    for s in range(len(stages)):
        total += accumulators(e, stages, s, layout) * (2 if kept_private(e, stages, s) else 1)
    for (r, c), owner in owners(e).items():
        if owner == r and access(e, stages, c, layout.registers) == "registers":
            lane = stage_lane(e, stages, stage_of(stages, c))
            n = math.prod(length(e, i) for i in e.in_indices[c] if i != lane)
            total += n * chunks(length(e, lane), layout.lanes)
    return total


@functools.lru_cache(maxsize=1 << 16)
def unrolled_statements(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout) -> int:
    """Multiply-add statements of one block once the accumulator loops and the reduction
    loops that index registers are unrolled (the code size)."""
    total = 0
    passes = chunks(e.nrows, layout.rows_per_pass)
    for s in range(len(stages)):
        unrolled = private_indices(e, stages, s, layout.registers)
        total += accumulators(e, stages, s, layout) * passes * math.prod(
            length(e, i) for i in unrolled)
    return total


@functools.lru_cache(maxsize=1 << 16)
def fetched_values(e: BatchedEinsum, stages: Sequence[Stage], s: int, layout: NodeLayout
                   ) -> int:
    """Values a work-item loads per reduction point of stage *s* (for one pass)."""
    total = 0
    for col in stages[s].inputs:
        dims = fetch_dims(e, stages, s, col, layout.registers,
                          outer(e, stages, layout))
        if dims is None:
            continue
        sizes = {"n": layout.elements,
                 "t": chunks(length(e, stage_lane(e, stages, s)), layout.lanes)}
        copies = slots(e, layout) if col == "w" or int(col) in specific(e) else 1
        total += math.prod(sizes.get(d) or length(e, d) for d in dims) * copies
    return total


@functools.lru_cache(maxsize=1 << 16)
def registers(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout) -> int:
    """An estimate of the 32-bit registers a work-item takes: the values it keeps
    (:func:`register_values`) and loads per reduction point (every stage's), and
    :data:`BASE_REGISTERS`."""
    words = -(-itemsize(e) // 4)
    fetch = sum(fetched_values(e, stages, s, layout) for s in range(len(stages)))
    return BASE_REGISTERS + words * (register_values(e, stages, layout) + fetch)


@functools.lru_cache(maxsize=1 << 16)
def node_reason(e: BatchedEinsum, stages: Sequence[Stage] | None = None) -> str | None:
    """``None`` if :func:`feinsum.toolbox.nodes.node_kernel` can run *e* (with the plan
    *stages*, if given), else why not."""
    why = element_reason(e)
    if why is not None:
        return why
    el, a = element_index(e), e.out_indices[-1]
    if a == el:
        return f"the output's last index {a} is the element index (no node index)"
    for _, c, f in e.factors():
        if cast(Array, f).order != "C" and cast(Array, f).ndim > 1:
            return (f"operand {c} (array {cast(Array, f).name}) is not a C-order array: "
                    "blocks are copied by flat offsets")
    if stages is not None:
        for s, st in enumerate(stages):
            if not st.out:
                return f"stage {s} has no output index besides the element (choose another plan)"
    return None


# }}}


@functools.lru_cache(maxsize=1 << 16)
def private_indices(e: BatchedEinsum, stages: Sequence[Stage], s: int, registers: bool
                    ) -> set[str]:
    """The reduction indices of stage *s* that index private arrays (operator entries in
    registers, the previous stage's result kept in registers): their loops are unrolled."""
    out: set[str] = set()
    lane = stage_lane(e, stages, s)
    for col in stages[s].inputs:
        if col == "w" and kept_private(e, stages, s - 1):
            out |= set(stages[s - 1].out) - {lane}
        elif col != "w" and access(e, stages, int(col), registers) == "registers":
            out |= set(e.in_indices[int(col)]) - {lane}
    return out - set(stages[s].out)


@functools.lru_cache(maxsize=1 << 16)
def fetch_dims(e: BatchedEinsum, stages: Sequence[Stage], s: int, col: int | str,
               registers: bool, split: str | None = None) -> tuple[str, ...] | None:
    """What input *col* of stage *s* varies with among a work-item's accumulators
    (``"n"``: its elements, ``"t"``: the chunks of the lane index, the other output
    indices): it is loaded into registers once per reduction point with these dimensions.
    ``None``: read where it is used (already in registers, or a scalar)."""
    lane = stage_lane(e, stages, s)
    others = [i for i in stage_out(e, stages, s, split) if i != lane]
    if col == "w":
        if kept_private(e, stages, s - 1):
            return None
        return ("n", *(i for i in others if i in stages[s - 1].out))
    idx = e.in_indices[int(col)]
    mode = access(e, stages, int(col), registers)
    if mode in ("registers", "global"):
        return None
    own = (("n",) if element_index(e) in idx else ()) + (("t",) if lane in idx else ())
    return (*own, *(i for i in others if i in idx))




# {{{ the default: an estimate of a layout's time per element


#: fp32 lanes a compute unit issues per clock (NVIDIA's SM, AMD's CU with packed fp32):
#: what :func:`layout_cost` divides multiply-adds by (fp64: times the device's fp64 rate).
FP32_LANES = 128
#: Subgroups a compute unit needs resident to hide memory latencies (:func:`layout_cost`).
LATENCY_SUBGROUPS = 16


@functools.lru_cache(maxsize=1 << 16)
def lane_options(e: BatchedEinsum) -> list[int]:
    """Work-items along ``l.0`` a layout may take: the divisors of the output's last index
    length (no idle lanes) and the powers of two below it (whole subgroups)."""
    n = length(e, e.out_indices[-1])
    return sorted({d for d in range(1, n + 1) if n % d == 0}
                  | {2 ** k for k in range(8) if 2 ** k < n})


def _subgroup(device: Any) -> int:
    return int(device.subgroup_width or GENERIC_GPU["subgroup_width"])


def layout_cost(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, device: Any
                ) -> float:
    """An estimate of a layout's time per element on *device*, in compute-unit clocks:
    the most of its L1/local-memory wavefronts (a wavefront moves one 32-bit word per lane
    of a subgroup; a subgroup's access to ``d`` distinct values of one row takes
    ``d*itemsize / wavefront`` of them, rounded up, once per element row it spans) and
    its multiply-add issue (:data:`FP32_LANES`), stretched when fewer than
    :data:`LATENCY_SUBGROUPS` subgroups fit a compute unit (registers, local memory)."""
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
    for s, st in enumerate(stages):
        lane = stage_lane(e, stages, s)
        points = math.prod(length(e, i) for i in stage_indices(e, stages, s)
                           if i not in st.out)
        acc = accumulators(e, stages, s, layout) * passes
        fma += acc * points * max(1, len(st.inputs) - 1)
        for col in st.inputs:
            dims = fetch_dims(e, stages, s, col, layout.registers)
            if dims is None:
                continue
            sizes = {"n": layout.elements, "t": chunks(length(e, lane), L0)}
            count = math.prod(sizes.get(d) or length(e, d) for d in dims)
            copies = slots(e, layout) if col == "w" or int(col) in specific(e) else 1
            # one run of addresses per subgroup, except a "lanes" read: one per row
            lsu += points * passes * count * copies * waves(
                min(L0, sg) if "t" in dims else 1, spans if "n" in dims else 1,
                col == "w" or access(e, stages, int(col), layout.registers) != "lanes")
        if s == len(stages) - 1 or not kept_private(e, stages, s):  # stores
            lsu += acc * waves(min(L0, sg), spans, s < len(stages) - 1)
    lsu *= warps / B
    # the block's copies into local memory: a global read and a local store per value
    el = element_index(e)
    staged = sum(math.prod(length(e, i) for i in e.in_indices[c] if i != el)
                 * (e.nrows if c in specific(e) else 1) for c in range(e.noperands)
                 if access(e, stages, c, layout.registers) == "staged")
    operators = sum(operator_entries(e, stages, c, L0) for (r, c), o in owners(e).items()
                    if o == r and access(e, stages, c, layout.registers) in ("local",
                                                                           "registers"))
    lsu += 2 * waves(sg) / sg * (staged + (0 if layout.groups else operators / B))
    fp_rate = FP32_LANES / sg * (device.fp64_rate if isz == 8 and device.fp64_rate else 1.0)
    fma = fma * warps / B / fp_rate
    resident = resident_groups(e, stages, layout, device) * warps
    return max(lsu, fma) * max(1.0, LATENCY_SUBGROUPS / resident)


def resident_groups(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout,
                    device: Any) -> int:
    """Work-groups of *layout* one compute unit holds at once (its registers over the
    group's estimate; its local memory, where the device's L1 holds it, over the group's)."""
    sg = _subgroup(device)
    isz = itemsize(e)
    regs = registers(e, stages, layout) * -(-layout.work_items // sg) * sg
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
        splits = [False, True] if split_index(e, stages) else [False]
        for n, f, reg, sp in itertools.product((1, 2, 4, 8), range(1, e.nrows + 1), regs,
                                               splits):
            lay = NodeLayout(lanes, rows, n, f, reg, 0, sp)
            yield last, lay
            # one wave of work-groups looping over the blocks: operators staged once
            yield last, NodeLayout(lanes, rows, n, f, reg, device.compute_units
                                   * resident_groups(e, stages, lay, device), sp)


class _Same:
    """An einsum looked up by identity: the search below asks the caches of this module
    about one einsum thousands of times, and a spec's own hash walks all of it."""

    def __init__(self, e: BatchedEinsum) -> None:
        self._e = e

    def __getattr__(self, name: str) -> Any:
        return getattr(self._e, name)


@functools.lru_cache(maxsize=256)
def best_layout(e: BatchedEinsum, device: Any) -> tuple[int | None, NodeLayout] | None:
    """The plan and layout of least :func:`layout_cost` among those that fit *device*
    (one block per work-group, or one wave of work-groups looping over the blocks), or
    ``None`` if none fits."""
    best: tuple[float, int, int | None, NodeLayout] | None = None
    e = cast(BatchedEinsum, _Same(e))
    for last, layout in _candidates(e, device):
        stages = plan_stages(e, last)
        if misfit(e, stages, layout, device):
            continue
        cost = (layout_cost(e, stages, layout, device), registers(e, stages, layout))
        if best is None or cost < best[:2]:
            best = (*cost, last, layout)  # type: ignore[assignment]
    return None if best is None else (best[2], best[3])


# }}}
