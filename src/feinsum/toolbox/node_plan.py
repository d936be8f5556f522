"""The plan of :mod:`feinsum.toolbox.nodes` (the GPU layout of element-batched operators):
each stage's lane index, how each operand is read, the sizes a layout takes (local memory,
registers, unrolled statements). :mod:`feinsum.toolbox.node_layouts` searches the layouts
for a device's default."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pymbolic.primitives as prim
from pymbolic.mapper.evaluator import evaluate

from feinsum.spec.model import Array, BatchedEinsum
from feinsum.toolbox import dense
from feinsum.toolbox.dense import (
    Stage,
    element_reason,
    element_stages,
    row_specific,
    stage_indices,
)

#: :func:`feinsum.toolbox.dense.element_index`, remembered (the default search asks it
#: tens of thousands of times about one einsum)
element_index = functools.lru_cache(maxsize=1 << 12)(dense.element_index)

#: 32-bit registers every work-item needs besides the values it keeps (indices, addresses).
BASE_REGISTERS = 24
#: Unrolled multiply-add statements of a block at most (code size, compile time).
MAX_UNROLLED = 4096
#: Work-groups per compute unit a looping grid launches at most (``groups``).
MAX_GROUPS_PER_UNIT = 32
#: Reduction points of a flat first stage at most (:func:`flat_stage`: written out).
MAX_FLAT_TERMS = 8


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
    #: the first stage computed flat over the block (:func:`flat_stage`)
    flat: bool = False
    #: operators staged one slice of the split index at a time (:func:`sliced`)
    sliced: bool = False
    #: a stage's local operands read two reduction points at a time (:func:`pair_index`)
    pairs: bool = False
    #: a flat stage's rounds take whole elements' entries (:func:`flat_width`)
    flat_whole: bool = True

    @property
    def block(self) -> int:
        """Elements per block (per work-group and loop trip)."""
        return self.rows * self.elements

    @property
    def work_items(self) -> int:
        return self.lanes * self.rows


def layout_of(params: Mapping[str, Any]) -> NodeLayout:
    """The layout a ``dg_nodes`` configuration names."""
    return NodeLayout(params["node_lanes"], params["rows"], params["elements"],
                      params["rows_per_pass"], params["operator"] == "registers",
                      params["groups"], params["split"], params["flat"],
                      params["operator"] == "slice", params["pairs"], params["flat_whole"])


def params_of(last: int | None, layout: NodeLayout) -> dict[str, Any]:
    """The ``dg_nodes`` configuration of plan *last* and *layout*."""
    operator = "registers" if layout.registers else "slice" if layout.sliced else "local"
    return {"last": last, "node_lanes": layout.lanes, "rows": layout.rows,
            "elements": layout.elements, "rows_per_pass": layout.rows_per_pass,
            "operator": operator, "groups": layout.groups, "split": layout.split,
            "flat": layout.flat, "pairs": layout.pairs, "flat_whole": layout.flat_whole}


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
    of the first (not its lane index) that the second reduces: the divergence's ``r``
    (``W[j]`` for one ``r`` at a time, so that the local memory holds one slice of that
    result) or the gradient's (its first-stage result, kept in registers, for one ``r`` at
    a time, so that the local memory needs one slice of ``D``); ``None``: none."""
    if len(stages) < 2:
        return None
    lane = stage_lane(e, stages, 0)
    cands = [i for i in stages[0].out if i != lane and i not in stages[1].out]
    return max(cands, key=lambda i: length(e, i)) if cands else None


@functools.lru_cache(maxsize=1 << 16)
def flat_possible(e: BatchedEinsum, stages: Sequence[Stage]) -> bool:
    """Whether the first stage can be computed flat (:func:`flat_stage`): its result goes
    to local memory and its reduction has at most :data:`MAX_FLAT_TERMS` points."""
    if len(stages) < 2 or kept_private(e, stages, 0):
        return False
    return math.prod(length(e, i) for i in stage_indices(e, stages, 0)
                     if i not in stages[0].out) <= MAX_FLAT_TERMS


def flat_stage(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, s: int
               ) -> bool:
    """Whether *layout* computes stage *s* flat: the block's entries of its result (its
    output indices and the element, C order) spread over all the work-items, one entry
    per work-item and round, its short reduction written out (divergence's ``W[r,j] =
    sum_x J[x,r,e] u[x,e,j]``: consecutive work-items read consecutive ``u``), no
    accumulators, no lane index."""
    return layout.flat and s == 0 and flat_possible(e, stages)


@functools.lru_cache(maxsize=1 << 16)
def direct_stage(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, s: int
                 ) -> bool:
    """Whether *layout* writes stage *s* out without accumulators: the last stage, not
    inside a split loop, every reduction index indexing registers (so unrolled: gradient's
    ``sum_r J[x,r,e] V[r,i]``): each output entry is one sum."""
    if s != len(stages) - 1 or (s == 1 and outer(e, stages, layout)):
        return False
    red = [i for i in stage_indices(e, stages, s) if i not in stages[s].out]
    return bool(red) and set(red) <= private_indices(e, stages, s, layout.registers)


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


def sliced(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, c: int) -> bool:
    """Whether *layout* stages operator *c* one slice at a time: inside the loop over the
    split index (:func:`split_index`), which is its first index (divergence's ``D[r,i,j]``:
    ``D[r]`` for the ``r`` of the loop), so that local memory holds one slice."""
    split = outer(e, stages, layout)
    return bool(layout.sliced and split and e.in_indices[c][:1] == (split,)
                and access(e, stages, c, layout.registers) == "local")


@functools.lru_cache(maxsize=1 << 16)
def pair_index(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, s: int
               ) -> str | None:
    """The reduction index of stage *s* whose points *layout* reads two at a time
    (``pairs``): the last, contiguous index of every input of the stage, all of them in
    local memory (operators, staged element operands, a flat first stage's result: each
    staged in rows of pairs, one vector load a pair), so that the pad point of an odd
    length multiplies zeros only; ``None``: the stage reads one point at a time."""
    if not layout.pairs or flat_stage(e, stages, layout, s) or direct_stage(
            e, stages, layout, s):
        return None
    split, st = outer(e, stages, layout), stages[s]
    lasts = set()
    for col in st.inputs:
        if col == "w":
            if not flat_stage(e, stages, layout, s - 1):
                return None
            lasts.add(stage_out(e, stages, s - 1, split)[-1])
        elif access(e, stages, int(col), layout.registers) in ("local", "staged"):
            lasts.add(e.in_indices[int(col)][-1])
        else:
            return None
    q = lasts.pop() if len(lasts) == 1 else None
    red = [i for i in stage_indices(e, stages, s) if i not in st.out and i != split]
    if q is None or q not in red or q in private_indices(e, stages, s, layout.registers):
        return None
    return q if length(e, q) > 1 else None


def paired(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, col: int | str,
           s: int | None = None) -> bool:
    """Whether input *col* (an operand column, or ``"w"`` of stage *s*) is staged in rows
    of pairs (:func:`pair_index`)."""
    stage = stage_of(stages, col) if s is None else s
    return pair_index(e, stages, layout, stage) is not None


def pair_shape(e: BatchedEinsum, q: str) -> tuple[int, int]:
    """The pairs of index *q*'s points, and the pairs of one row in local memory (an odd
    number: rows a subgroup reads at once fall on distinct banks)."""
    m = chunks(length(e, q), 2)
    return m, m if m % 2 else m + 1


def pair_entries(e: BatchedEinsum, q: str, rows: int, layout: NodeLayout | None = None,
                 width: int | None = None) -> int:
    """Local entries of *rows* rows of pairs of index *q* (:func:`pair_shape`); with
    *layout*, rows copied by whole rounds of its work-group (every work-item stores in
    every round: the last round's stores land past the rows; *width*: work-items a round,
    as :func:`padded_entries`)."""
    m, P = pair_shape(e, q)
    if layout is not None:
        rows = (padded_entries(rows * m, layout, width) - 1) // m + 1
    return 2 * P * rows


def operator_offset(e: BatchedEinsum, stages: Sequence[Stage], c: int,
                    values: dict[str, Any], sliced: bool = False) -> Any:
    """The local offset of staged operator *c* at *values*: C order, each row after the
    lane index padded by one where :func:`operator_row` says; *sliced*: in the slice of
    its first index's value."""
    idx, row = e.in_indices[c], operator_row(e, stages, c)
    if sliced:
        values = {**values, idx[0]: 0}
    if not row:
        return flat(e, idx, values)
    k = idx.index(stage_lane(e, stages, stage_of(stages, c)))
    return flat(e, idx[:k + 1], values) * (row + 1) + flat(e, idx[k + 1:], values)


@functools.lru_cache(maxsize=1 << 16)
def operator_entries(e: BatchedEinsum, stages: Sequence[Stage], c: int, lanes: int,
                     sliced: bool = False, pairs: bool = False) -> int:
    """Local entries of staged operator *c*: its entries (rows padded, see
    :func:`operator_row`) and what a partial last chunk of its stage's lane index reads
    past them; *sliced*: of one slice along its first index (:func:`sliced`); *pairs*: in
    rows of pairs (:func:`pair_shape`)."""
    idx = e.in_indices[c]
    n = math.prod(length(e, i) for i in idx[1 if sliced else 0:])
    lane = stage_lane(e, stages, stage_of(stages, c))
    if pairs:
        pidx = idx[1 if sliced else 0:-1]
        last = {i: length(e, i) - 1 for i in pidx}
        if lane in last:
            last[lane] = chunks(length(e, lane), lanes) * lanes - 1
        return pair_entries(e, idx[-1], int(evaluate(flat(e, pidx, last))) + 1)
    if lane not in idx:
        return n
    row = operator_row(e, stages, c)
    last = {i: length(e, i) - 1 for i in idx}
    last[lane] = chunks(length(e, lane), lanes) * lanes - 1
    if sliced:
        last[idx[0]] = 0
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


def staged_pitch(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, c: int
                 ) -> int:
    """Local entries of staged element operand *c* per slice of the indices before the
    element: the block's entries, rounded up to whole rounds of the work-group's
    work-items (in rows of pairs where *layout* pairs it)."""
    k = e.in_indices[c].index(element_index(e))
    pre = math.prod(length(e, i) for i in e.in_indices[c][:k])
    count = _element_entries(e, c) // pre * layout.block
    if paired(e, stages, layout, c):
        q = e.in_indices[c][-1]
        return pair_entries(e, q, count // length(e, q), layout)
    return padded_entries(count, layout)


def staged_name(e: BatchedEinsum, layout: NodeLayout, r: int, c: int) -> str:
    """The local array holding row *r*'s staged element operand *c* (one per row of a
    pass, reused pass after pass; one for all rows if they share the operand)."""
    return f"x{c}" if c not in specific(e) else f"x{c}_{r % slots(e, layout)}"


def padded_entries(count: int, layout: NodeLayout, width: int | None = None) -> int:
    """*count* rounded up to whole rounds of the work-group's work-items (a staged block
    has room for every work-item's store; *width*: the work-items that store in a round,
    default all)."""
    w = width or layout.work_items
    return chunks(count, w) * w


def flat_unit(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout) -> int:
    """The entries of one element's flat first-stage result, as work-items store them
    (in rows of pairs where the next stage reads pairs: the pairs)."""
    out = stage_out(e, stages, 0, outer(e, stages, layout))
    size = math.prod(length(e, i) for i in out)
    if paired(e, stages, layout, "w", 1):
        return size // length(e, out[-1]) * pair_shape(e, out[-1])[0]
    return size


def flat_width(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout) -> int:
    """The work-items of one round of a flat first stage: whole elements' entries
    (:func:`flat_unit`), as many as the work-group holds, so that each work-item has the
    same element offset and entry every round (divided once, not in every round); all the
    work-items where one element's entries outnumber them, or without
    :attr:`NodeLayout.flat_whole` (the rounds of before, each dividing its flat index)."""
    unit, work = flat_unit(e, stages, layout), layout.work_items
    return work if unit > work or not layout.flat_whole else work - work % unit


@functools.lru_cache(maxsize=1 << 16)
def local_entries(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout) -> int:
    """Local-memory entries of the kernel: the staged operators, the staged
    element operands of a pass and the stage results kept in local memory."""
    total = 0
    for (r, c), owner in owners(e).items():
        mode = access(e, stages, c, layout.registers)
        if owner == r and mode in ("local", "registers"):
            total += operator_entries(e, stages, c, layout.lanes,
                                      sliced(e, stages, layout, c), paired(
                                          e, stages, layout, c))
    for c in range(e.noperands):
        if access(e, stages, c, layout.registers) == "staged":
            n = slots(e, layout) if c in specific(e) else 1
            k = e.in_indices[c].index(element_index(e))
            pre = math.prod(length(e, i) for i in e.in_indices[c][:k])
            total += pre * staged_pitch(e, stages, layout, c) * n
    for s in range(len(stages) - 1):
        if not kept_private(e, stages, s):
            total += result_entries(e, stages, layout, s) * slots(e, layout)
    return total


def result_entries(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, s: int
                   ) -> int:
    """Local entries of stage *s*'s result (not kept in registers) per row of a pass: the
    block's (padded to whole rounds when computed flat)."""
    out = stage_out(e, stages, s, outer(e, stages, layout))
    n = math.prod(length(e, i) for i in out)
    width = flat_width(e, stages, layout) if flat_stage(e, stages, layout, s) else None
    if paired(e, stages, layout, "w", s + 1):
        return pair_entries(e, out[-1], n // length(e, out[-1]) * layout.block, layout,
                            width)
    return padded_entries(n * layout.block, layout, width) if width else n * layout.block


@functools.lru_cache(maxsize=1 << 16)
def accumulators(e: BatchedEinsum, stages: Sequence[Stage], s: int, layout: NodeLayout
                 ) -> int:
    """Accumulators of stage *s* per work-item and pass (none for a flat or direct
    stage)."""
    if flat_stage(e, stages, layout, s) or direct_stage(e, stages, layout, s):
        return 0
    return cells(e, stages, s, layout)


@functools.lru_cache(maxsize=1 << 16)
def cells(e: BatchedEinsum, stages: Sequence[Stage], s: int, layout: NodeLayout) -> int:
    """Result entries of stage *s* a work-item computes per pass (not flat)."""
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
        total += accumulators(e, stages, s, layout)
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
        if flat_stage(e, stages, layout, s):
            continue
        unrolled = private_indices(e, stages, s, layout.registers)
        total += cells(e, stages, s, layout) * passes * math.prod(
            length(e, i) for i in unrolled)
    return total


@functools.lru_cache(maxsize=1 << 16)
def fetched_values(e: BatchedEinsum, stages: Sequence[Stage], s: int, layout: NodeLayout
                   ) -> int:
    """Values a work-item loads per reduction point of stage *s* (for one pass; both
    points of a pair, :func:`pair_index`)."""
    if flat_stage(e, stages, layout, s) or direct_stage(e, stages, layout, s):
        return 0
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
    return total * (2 if pair_index(e, stages, layout, s) else 1)


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


# }}}
