"""Flop and byte counts of a batched einsum, for rooflines and database records.

The counts are of the *computation the spec describes*, under the conventions
below, not of any particular kernel (a recipe's kernel may do more, e.g. the
reference kernel's logsumexp takes an ``exp`` and a ``log1p`` per term).

Conventions (flops are real floating-point or integer operations):

* **Operand products.** Each reduction term multiplies the row's factors: ``F - 1``
  multiplies for ``F`` factors (all operands' factors together), counted once per
  point of the full (output x reduction) index space; the sum adds each term to
  its accumulator: one add per term. So a multiply-add (FMA) is 2 flops, and
  ``ik,kj->ij`` costs ``2 n^3``. With no reduction index there is no add.
* **Complex arithmetic.** Complex add = 2, complex multiply = 6, complex times
  real = 2 (real factors are multiplied together first, then once into the
  complex product), complex division = 11 (by a real: 2). Flops are keyed by the
  dtype of the operation's result (``"complex64"``), counted in real flops.
* **Formulas.** Each operation of a formula is counted once per point of the
  index space it depends on (its arguments' einsum indices and the feature
  indices it reads), that is with loop invariants hoisted: in
  ``exp(-sum(d, (x[i,d]-y[j,d])**2)/(2*s**2))`` the subtraction and the square
  count per ``(i, j, d)``, the ``exp`` and the division per ``(i, j)``, and
  ``2*s**2`` once. A formula applied to the same indices in several operands or
  rows counts once. Add, subtract, multiply, divide, compare, ``abs``,
  ``floor``, ``ceil``, ``fmin``/``fmax`` = 1 flop each; negation is free;
  ``x**n`` for an integer ``n >= 1`` = ``n - 1`` multiplies (``x**2`` = one
  multiply; a negative ``n`` adds one division); other powers are a ``pow`` call.
  A feature reduction over ``D`` values costs ``D`` adds (sum), multiplies
  (product) or compares (min/max) per point of the enclosing index space.
  Array reads, type casts and a conditional's select are free.
* **Special functions** (``exp``, ``log``, ``sqrt``, ``erf``, ``pow``, ...) are
  counted separately, by name, as calls, not flops.
* **min / max / argmin / argmax**: one compare (1 flop) per term; the index
  bookkeeping of argmin/argmax is free.
* **logsumexp**: per term one ``exp`` call, one add and one compare (2 flops),
  the online max-shifted sum; per output element one ``log`` call and one add.
* **Bytes**: the footprint of every input array, counted once however often it
  is read, plus every output (``out{r}`` and int32 ``out{r}_index``) once. A
  0-d array counts its item size.

A block-sparse spec is costed as its dense counterpart (an upper bound: the
kept fraction is only known from the ranges, at run time).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymbolic.primitives as prim

from feinsum.errors import FeinsumError, SpecificationError
from feinsum.spec.formulas import variable_name
from feinsum.spec.model import INDEX_REDUCTIONS, Array, BatchedEinsum, Formula, Length

#: Functions costing 1 flop; every other function call is a special-function call.
_CHEAP_FUNCTIONS = frozenset({"abs", "floor", "ceil", "fmin", "fmax", "min", "max"})


@dataclass(frozen=True)
class Cost:
    """What a batched einsum costs (see the module docstring for the conventions)."""

    #: Real flops per dtype name (``{"float32": 2097152}``).
    flops: Mapping[str, int] = field(default_factory=dict)
    #: Special-function calls per function name (``{"exp": 1000000}``).
    special: Mapping[str, int] = field(default_factory=dict)
    #: Bytes moved: every input and output array's footprint, once.
    bytes: int = 0

    @property
    def total_flops(self) -> int:
        """Flops of every dtype together (special-function calls not included)."""
        return sum(self.flops.values())

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, flops per byte."""
        return self.total_flops / self.bytes if self.bytes else math.inf


class _Counter:
    def __init__(self) -> None:
        self.flops: Counter[str] = Counter()
        self.special: Counter[str] = Counter()

    def add(self, dtype: np.dtype[Any], n: int) -> None:
        if n:
            self.flops[np.dtype(dtype).name] += n


# {{{ formulas


class _FormulaCost:
    """Counts one formula application; returns each node's dependency set."""

    def __init__(self, f: Formula, args: Mapping[str, str], lengths: Mapping[str, int],
                 counter: _Counter) -> None:
        from feinsum.spec.formulas import feature_indices, formula_result_dtype

        self.dtype = formula_result_dtype(f)
        self.args = args
        self.lengths = dict(lengths)
        self.features = feature_indices(f)
        self.counter = counter
        self.complex = self.dtype.kind == "c"

    def points(self, deps: frozenset[str]) -> int:
        return math.prod(self.lengths[d] for d in deps)

    def arith(self, deps: frozenset[str], real: int, cplx: int | None = None) -> None:
        """Count an operation of *real* flops (*cplx* if the formula is complex)."""
        n = cplx if (self.complex and cplx is not None) else real
        self.counter.add(self.dtype, n * self.points(deps))

    def rec(self, expr: Any) -> frozenset[str]:
        from loopy.symbolic import Reduction

        from feinsum.spec.formulas import reduction_name

        if isinstance(expr, (int, float, complex, np.number)):
            return frozenset()
        if isinstance(expr, prim.Variable):
            if expr.name in self.args:
                return frozenset({self.args[expr.name]})
            return frozenset({expr.name}) if expr.name in self.features else frozenset()
        if isinstance(expr, prim.Subscript):
            return frozenset().union(*(self.rec(i) for i in expr.index_tuple))
        if isinstance(expr, Reduction):
            body = self.rec(expr.expr)
            deps = body | frozenset(expr.inames)
            op = reduction_name(expr)
            self.arith(deps, 1, 6 if op == "product" else 2 if op == "sum" else 1)
            return body - frozenset(expr.inames)
        if isinstance(expr, prim.Sum):
            deps = frozenset().union(*(self.rec(c) for c in expr.children))
            self.arith(deps, len(expr.children) - 1, 2 * (len(expr.children) - 1))
            return deps
        if isinstance(expr, prim.Product):
            children = [c for c in expr.children if not (isinstance(c, (int, float)) and c == -1)]
            deps = frozenset().union(*(self.rec(c) for c in children))
            self.arith(deps, len(children) - 1, 6 * (len(children) - 1))
            return deps
        if isinstance(expr, prim.Quotient):
            deps = self.rec(expr.numerator) | self.rec(expr.denominator)
            self.arith(deps, 1, 11)
            return deps
        if isinstance(expr, prim.Power):
            deps = self.rec(expr.base) | self.rec(expr.exponent)
            n = expr.exponent
            if isinstance(n, (int, np.integer)) and not isinstance(n, bool):
                mults = max(abs(int(n)) - 1, 0)
                self.arith(deps, mults, 6 * mults)
                if n < 0:
                    self.arith(deps, 1, 11)
            else:
                self.counter.special["pow"] += self.points(deps)
            return deps
        if isinstance(expr, prim.Call):
            deps = frozenset().union(*(self.rec(p) for p in expr.parameters))
            name = variable_name(expr.function)
            if name in _CHEAP_FUNCTIONS:
                self.arith(deps, 1)
            else:
                self.counter.special[name] += self.points(deps)
            return deps
        if isinstance(expr, prim.Comparison):
            deps = self.rec(expr.left) | self.rec(expr.right)
            self.arith(deps, 1)
            return deps
        if isinstance(expr, prim.If):
            return self.rec(expr.condition) | self.rec(expr.then) | self.rec(expr.else_)
        raise FeinsumError(f"cost: cannot count {type(expr).__name__} ({expr}) in a formula")


# }}}


def _product_flops(dtypes: list[np.dtype[Any]]) -> int:
    """Real flops of multiplying factors of these dtypes (real ones first)."""
    ncomplex = sum(dt.kind == "c" for dt in dtypes)
    nreal = len(dtypes) - ncomplex
    return max(nreal - 1, 0) + 6 * max(ncomplex - 1, 0) + (2 if nreal and ncomplex else 0)


def _resolve(n: Length, lengths: Mapping[str, int]) -> int:
    return n if isinstance(n, int) else int(lengths[n])


def cost(e: BatchedEinsum, lengths: Mapping[str, int] | None = None) -> Cost:
    """Flops (per dtype), special-function calls and bytes of *e*; see the module
    docstring for the conventions. *lengths* gives a value to every length symbol
    (``{"E": 50000}``)."""
    from feinsum.spec.dtypes import compute_dtype
    from feinsum.spec.formulas import feature_indices, formula_result_dtype

    lengths = dict(lengths or {})
    missing = [s for s in e.length_symbols if s not in lengths]
    if missing:
        raise SpecificationError(
            f"cost: no value for length symbol {missing[0]!r}; pass lengths="
            + "{" + ", ".join(f"{s!r}: ..." for s in e.length_symbols) + "}"
        )
    for s in e.length_symbols:
        if isinstance(lengths[s], bool) or not isinstance(lengths[s], (int, np.integer)) or (
                lengths[s] < 1):
            raise SpecificationError(f"cost: length {s!r} must be a positive integer, "
                                     f"got {lengths[s]!r}")
    index_len = {i: _resolve(n, lengths) for i, n in e.lengths.items()}
    out_points = math.prod(index_len[i] for i in e.out_indices)
    red_points = math.prod(index_len[i] for i in e.reduction_indices)
    terms = out_points * red_points
    counter = _Counter()

    # formulas: each distinct application once
    applied: set[tuple[str, tuple[str, ...]]] = set()
    for _, c, f in e.factors():
        if isinstance(f, Formula) and (f.name, e.in_indices[c]) not in applied:
            applied.add((f.name, e.in_indices[c]))
            feat = {d: _resolve(n, lengths) for d, n in feature_indices(f).items()}
            _FormulaCost(f, dict(zip(f.arguments, e.in_indices[c], strict=True)),
                         {**index_len, **feat}, counter).rec(f.expression)

    for r, row in enumerate(e.arguments):
        dtype = compute_dtype(e, r)
        factor_dtypes = [f.dtype if isinstance(f, Array) else formula_result_dtype(f)
                         for entry in row for f in entry]
        counter.add(dtype, _product_flops(factor_dtypes) * terms)
        if not e.reduction_indices:
            continue
        add = 2 if dtype.kind == "c" else 1
        if e.reduction == "sum":
            counter.add(dtype, add * terms)
        elif e.reduction == "logsumexp":
            value = e.value_dtype(r)
            counter.add(value, 2 * terms + out_points)
            counter.special["exp"] += terms
            counter.special["log"] += out_points
        else:  # min, max, argmin, argmax: one compare per term
            counter.add(dtype, terms)

    nbytes = sum(math.prod(_resolve(n, lengths) for n in a.shape) * a.dtype.itemsize
                 for a in e.arrays)
    for r in range(e.nrows):
        nbytes += out_points * e.value_dtype(r).itemsize
        if e.reduction in INDEX_REDUCTIONS:
            nbytes += out_points * 4
    return Cost(flops=dict(counter.flops), special=dict(counter.special), bytes=nbytes)


def contraction_flops(e: BatchedEinsum, lengths: Mapping[str, int] | None = None) -> int:
    """Real flops of the cheapest pairwise contraction order of every row of *e*.

    :func:`cost` counts every term of the full index space; a kernel that contracts
    ``xre,rij,xej->ei`` as ``W[r,e,j] = sum_x J u`` then ``sum_{r,j} D W`` does a
    fraction of that. This is the flop count a roofline should be drawn with: for each
    row, the operands are contracted two at a time (a multiply-add, 2 flops, per point
    of the pair's joint index space; a plain multiply, 1 flop, where nothing is summed),
    an index summed as soon as no remaining operand and not the output carries it, over
    the best order (exhaustive over orders: rows have few operands). Defined for real
    ``sum`` einsums of plain arrays; anything else gets :func:`cost`'s total.
    """
    naive = cost(e, lengths).total_flops
    if e.reduction != "sum" or any(
            not isinstance(f, Array) or f.dtype.kind == "c" for _, _, f in e.factors()):
        return naive
    index_len = {i: _resolve(n, lengths or {}) for i, n in e.lengths.items()}
    sets = [frozenset(ix) for ix in e.in_indices]
    out = frozenset(e.out_indices)
    full = (1 << len(sets)) - 1

    def kept(mask: int) -> frozenset[str]:
        inside = frozenset().union(*(sets[c] for c in range(len(sets)) if mask >> c & 1))
        outside = frozenset().union(*(sets[c] for c in range(len(sets))
                                      if not mask >> c & 1))
        return inside & (out | outside)

    def points(ix: frozenset[str]) -> int:
        return math.prod(index_len[i] for i in ix)

    best: dict[int, int] = {}
    for mask in range(1, full + 1):  # subsets in increasing order: parts come first
        if mask & (mask - 1) == 0:  # one operand: sum out what only it carries
            c = mask.bit_length() - 1
            best[mask] = points(sets[c]) if kept(mask) != sets[c] else 0
            continue
        result, low = None, mask & -mask
        sub = (mask - 1) & mask
        while sub:
            if sub & low:  # each split once: the part holding the lowest operand
                joint = kept(sub) | kept(mask ^ sub)
                pair = points(joint) * (2 if joint - kept(mask) else 1)
                total = best[sub] + best[mask ^ sub] + pair
                result = total if result is None else min(result, total)
            sub = (sub - 1) & mask
        best[mask] = int(result or 0)
    return min(naive, best[full] * e.nrows)


@dataclass(frozen=True)
class RooflineWork:
    """What a measurement's GFLOP/s and roofline point are computed from."""

    #: :func:`contraction_flops`: no kernel needs more, so no correctly measured rate of it
    #: can exceed the device's peak.
    flops: int
    #: :func:`cost`'s bytes: every array's footprint, once.
    bytes: int
    #: The dtype doing most of the arithmetic (whose peak bounds the rate).
    dtype: str


def roofline_work(e: BatchedEinsum, lengths: Mapping[str, int] | None = None) -> RooflineWork:
    """The flops, bytes and dtype by which the autotuner, the database's records and the
    reports rate *e* (every length fixed, or given by *lengths*)."""
    c = cost(e, lengths)
    dtype = max(c.flops, key=c.flops.__getitem__) if c.flops else e.value_dtype(0).name
    return RooflineWork(contraction_flops(e, lengths), c.bytes, dtype)


# vim: foldmethod=marker
