"""One warp's memory access, address by address: cache lines, sectors and bank conflicts.

loopy's statistics (``lp.get_mem_access_map``) give an access's lane strides, but not for
an index with a ``min()`` clamp or a ``?:`` (its stride collector raises
``NotImplementedError``), and they merge the accesses of one variable. Here every access
of a statement is evaluated for each lane of one warp (its local ids, the other loop
indices at their first value, the lengths as given), so clamps, integer divisions and
vector widths count as the code computes them:

* a global access costs one L1 wavefront per distinct cache line the warp touches, and
  moves its distinct 32-byte sectors;
* a local access costs the largest number of distinct 4-byte words one bank is asked for
  (a broadcast is one), and at least its bytes over the bank width;
* a private array the compiler cannot keep in registers (indexed by a loop it does not
  unroll) lives in the stack, interleaved by lane: its bytes over a line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pymbolic.primitives as prim
from loopy.symbolic import WalkMapper
from pymbolic.mapper.evaluator import EvaluationMapper

from feinsum.errors import PredictionError

SECTOR_BYTES = 32
#: the widest load or store of one lane (128 bits on NVIDIA and AMD GPUs)
VECTOR_BYTES = 16


@dataclass(frozen=True)
class Access:
    """One memory access of a statement, as one warp executes it once."""

    #: "global", "local" or "stack" (a private array outside the registers)
    space: str
    variable: str
    write: bool
    #: bytes each active lane moves (a vector access: all its lanes)
    lane_bytes: int
    #: L1 / local-memory wavefronts
    wavefronts: float
    #: distinct 32-byte sectors (global only)
    sectors: float
    #: executions by warps (whole launch) and by one warp
    runs: float = 0.0
    serial: float = 0.0
    #: the rolled loops around it (what its latency repeats with)
    loop: frozenset[str] = frozenset()
    #: a read under a ``?:`` (the compiler issues it after the condition, unbatched)
    conditional: bool = False
    #: memory instructions of one warp execution (a load or store moves at most
    #: :data:`VECTOR_BYTES` per lane)
    instructions: float = 1.0


class _Evaluator(EvaluationMapper):  # type: ignore[misc]
    """Integer evaluation of a loopy index (C semantics are not needed: indices >= 0)."""

    def map_type_cast(self, expr: Any) -> Any:
        return self.rec(expr.child)

    def map_tagged_variable(self, expr: Any) -> Any:
        return self.context[expr.name]

    def map_if(self, expr: Any) -> Any:
        return self.rec(expr.then) if self.rec(expr.condition) else self.rec(expr.else_)

    def map_min(self, expr: Any) -> Any:
        return min(self.rec(c) for c in expr.children)

    def map_max(self, expr: Any) -> Any:
        return max(self.rec(c) for c in expr.children)

    def map_floor_div(self, expr: Any) -> Any:
        return self.rec(expr.numerator) // self.rec(expr.denominator)

    def map_remainder(self, expr: Any) -> Any:
        return self.rec(expr.numerator) % self.rec(expr.denominator)


class SubscriptCollector(WalkMapper):  # type: ignore[misc]
    """Every ``name[index]`` and bare variable an expression reads; *conditional* names
    those read under a ``?:``. *implied*: whether a condition always holds where the
    expression runs (the compiler folds such a ``?:`` into its first branch)."""

    def __init__(self, implied: Callable[[Any], bool] | None = None) -> None:
        super().__init__()
        self.found: list[tuple[str, tuple[Any, ...] | None]] = []
        self.conditional: set[int] = set()
        self._depth = 0
        self._implied = implied

    def map_if(self, expr: prim.If, *args: Any) -> None:
        if self._implied is not None and self._implied(expr.condition):
            self.rec(expr.then, *args)
            return
        self.rec(expr.condition, *args)
        self._depth += 1
        self.rec(expr.then, *args)
        self.rec(expr.else_, *args)
        self._depth -= 1

    def map_subscript(self, expr: prim.Subscript, *args: Any) -> None:
        idx = expr.index if isinstance(expr.index, tuple) else (expr.index,)
        if self._depth:
            self.conditional.add(len(self.found))
        self.found.append((getattr(expr.aggregate, "name", str(expr.aggregate)), idx))
        self.rec(expr.index, *args)

    def map_variable(self, expr: prim.Variable, *args: Any) -> None:
        self.found.append((expr.name, None))

    map_tagged_variable = map_variable  # type: ignore[assignment]


def flat_offset(var: Any, index: Sequence[Any], context: Mapping[str, int],
                vec_inames: frozenset[str] = frozenset()) -> tuple[int, int]:
    """``(offset in entries, vector lanes)`` of ``var[index]`` at *context*: the strides of
    its dimension tags, a vector axis indexed by a ``vec`` loop (*vec_inames*) or by
    ``None`` (the whole vector, :func:`whole_vector`) counting its lanes."""
    from loopy.kernel.array import FixedStrideArrayDimTag, VectorArrayDimTag

    ev = _Evaluator(context)
    tags = var.dim_tags or (None,) * len(index)
    offset, lanes = 0, 1
    for tag, i in zip(tags, index, strict=False):
        if isinstance(tag, VectorArrayDimTag):
            if i is None or (isinstance(i, prim.Variable) and i.name in vec_inames):
                lanes = int(var.shape[tags.index(tag)])
                continue
            offset += int(ev(i))
            continue
        stride = 1 if tag is None else tag.stride
        if isinstance(tag, FixedStrideArrayDimTag) and not isinstance(stride, int):
            stride = ev(stride)
        offset += int(stride) * int(ev(i))
    return offset, lanes


def whole_vector(var: Any, index: Sequence[Any] | None, unrolled: Collection[str] = ()
                 ) -> tuple[Any, ...] | None:
    """*index* with its vector component replaced by ``None`` where it reads one constant
    component of a vector-typed array (``p[j].s1``), or the component an *unrolled* loop
    runs over: the compiler loads the components one loop body reads of a vector with one
    vector load (PTX ``ld.shared.v4``), so they are one access of the whole vector. None
    where *index* is no such read."""
    from loopy.kernel.array import VectorArrayDimTag

    if index is None or not var.dim_tags:
        return None
    out = list(index)
    for k, (tag, i) in enumerate(zip(var.dim_tags, index, strict=False)):
        if isinstance(tag, VectorArrayDimTag) and (isinstance(i, int) or (
                isinstance(i, prim.Variable) and i.name in unrolled)):
            out[k] = None
            return tuple(out)
    return None


def lane_spans(var: Any, index: Sequence[Any] | None, lanes: Sequence[Mapping[str, int]],
               vec_inames: frozenset[str] = frozenset(), flat: bool = False,
               width: int = 1) -> list[tuple[int, int]]:
    """The bytes ``[lo, hi)`` each active lane (its inames in *lanes*) accesses of
    ``var[index]``; *flat*: *index* is one offset in entries, *width* entries wide (an
    OpenCL ``vloadN``/``vstoreN``)."""
    import numpy as np

    itemsize = np.dtype(var.dtype.numpy_dtype).itemsize
    spans = []
    for ctx in lanes:
        try:
            if index is None:
                off, vec = 0, 1
            elif flat:
                off, vec = int(_Evaluator(ctx)(index[0])), width
            else:
                off, vec = flat_offset(var, index, ctx, vec_inames)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            raise PredictionError(
                f"cannot evaluate the index {index} of {var.name}: {exc}") from exc
        spans.append((off * itemsize, (off + vec) * itemsize))
    return spans


def warp_access(space: str, name: str, write: bool, spans: Sequence[tuple[int, int]],
                line_bytes: int, banks: int, bank_bytes: int) -> Access:
    """What one warp's access costs, its active lanes' bytes in *spans*."""
    width = max((hi - lo for lo, hi in spans), default=0)
    insns = float(max(1, math.ceil(width / VECTOR_BYTES)))
    if space == "stack":
        return Access(space, name, write, width,
                      float(math.ceil(len(spans) * width / line_bytes)), 0.0,
                      instructions=insns)
    if space == "global":
        lines = {b // line_bytes for lo, hi in spans for b in range(lo, hi, 4)}
        sectors = {b // SECTOR_BYTES for lo, hi in spans for b in range(lo, hi, 4)}
        return Access(space, name, write, width, float(max(len(lines), insns)),
                      float(len(sectors)), instructions=insns)
    words = {b // bank_bytes for lo, hi in spans for b in range(lo, hi, bank_bytes)}
    per_bank: dict[int, int] = {}
    for w in words:
        per_bank[w % banks] = per_bank.get(w % banks, 0) + 1
    least = math.ceil(len(words) / banks)
    return Access(space, name, write, width,
                  float(max(max(per_bank.values(), default=1), least, insns)), 0.0,
                  instructions=insns)
