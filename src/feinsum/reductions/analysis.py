"""A spec seen as a kernel reduction ``out[i, e...] = Red_j value(i, j, e...)``.

The kernel-reduction templates (:mod:`feinsum.reductions.templates`, ``transforms/tiled_1d.py``)
and the block-sparse reference lowering (:mod:`feinsum.reductions.block_sparse`) write their kernels
from this analysis:

* :func:`analyze` classifies a spec's indices: the long output index ``i`` (the
  rows), the reduction index ``j``, the other (short) output indices, and every array as
  an *i-variable* (read with ``i``), a *j-variable* (read with ``j``) or a parameter;
* :func:`row_terms` writes each row's value as a product of *factors* (formulas inlined,
  feature reductions unrolled, short output indices fixed), ready to be rewritten by a
  template (i-variables packed into vector registers, j-variables read from a local
  tile...);
* :func:`long_axis`, :func:`n_short`, :func:`flat_short`, :func:`short_index` address
  the short axes of an i- or j-variable as one flat position.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pymbolic.primitives as prim

from feinsum.lowering.reduction_updates import select_better
from feinsum.spec.model import Array, BatchedEinsum, Length, is_long

# {{{ analysis


@dataclass(frozen=True)
class Form:
    """A spec seen as a kernel reduction (see :func:`analyze`)."""

    e: BatchedEinsum
    i: str
    j: str
    short_out: tuple[str, ...]
    short_lengths: tuple[int, ...]
    i_arrays: tuple[Array, ...]
    j_arrays: tuple[Array, ...]
    param_arrays: tuple[Array, ...]
    dtype: np.dtype[Any]

    @property
    def m(self) -> Length:
        return self.e.lengths[self.i]

    @property
    def n(self) -> Length:
        return self.e.lengths[self.j]

    @property
    def nvalues(self) -> int:
        """Accumulators per output row: rows of the spec times the short output tuples."""
        return self.e.nrows * int(np.prod(self.short_lengths, dtype=np.int64))

    def short_tuples(self) -> list[tuple[int, ...]]:
        return list(itertools.product(*(range(n) for n in self.short_lengths)))


def array_indices(e: BatchedEinsum) -> dict[str, set[str]]:
    """For each array, the spec indices its axes are read with (formula arrays included)."""
    from feinsum.spec.formulas import walk

    used: dict[str, set[str]] = {a.name: set() for a in e.arrays}
    for _r, c, f in e.factors():
        if isinstance(f, Array):
            used[f.name] |= set(e.in_indices[c])
            continue
        argmap = dict(zip(f.arguments, e.in_indices[c], strict=True))
        for x in walk(f.expression):
            if isinstance(x, prim.Subscript):
                names = [getattr(i, "name", None) for i in x.index_tuple]
                used[str(x.aggregate)] |= {argmap[n] for n in names if n in argmap}
    return used


def analyze(e: BatchedEinsum, *, block_sparse: bool = False, short_rows: bool = False
            ) -> Form | str:
    """The spec as a kernel reduction, or the reason it is not one.

    A kernel reduction has exactly one reduction index ``j`` (long), one long output
    index ``i``, other output indices short (fixed lengths), real values, and no array
    read with both ``i`` and ``j`` (that would be an ``M x N`` input). ``short_rows``:
    a spec whose only output index is short (few rows, a fixed ``M``) is one too.
    """
    from feinsum.spec.dtypes import check_reduction_dtypes, compute_dtype

    if (e.block_sparse is not None) != block_sparse:
        return ("the spec carries a block-sparse restriction" if e.block_sparse is not None
                else "the spec carries no block-sparse restriction")
    red = e.reduction_indices
    if len(red) != 1:
        return f"a kernel reduction has one reduction index, this spec has {len(red)}"
    j = red[0]
    if e.block_sparse is not None:
        i = e.block_sparse.out_index
        if e.block_sparse.reduction_index != j:
            return "the block-sparse restriction is not on the reduction index"
    else:
        longs = [k for k in e.out_indices if is_long(e.lengths[k])]
        if short_rows and not longs and len(e.out_indices) == 1:
            longs = list(e.out_indices)
        if len(longs) != 1:
            return f"a kernel reduction has one long output index, this spec has {len(longs)}"
        i = longs[0]
        if not is_long(e.lengths[j]):
            return "the reduction index is short (an ordinary einsum)"
    short = tuple(k for k in e.out_indices if k != i)
    if any(not isinstance(e.lengths[k], int) for k in short):
        return "an output index other than the rows has a symbolic length"
    try:
        check_reduction_dtypes(e)
    except Exception as exc:
        return str(exc)
    dtypes = {compute_dtype(e, r) for r in range(e.nrows)} | {
        e.value_dtype(r) for r in range(e.nrows)}
    if any(dt.kind not in "f" for dt in dtypes):
        return "kernel-reduction templates handle real floating-point values only"
    if len(dtypes) != 1:
        return "rows of different dtypes"
    used = array_indices(e)
    i_arr: list[Array] = []
    j_arr: list[Array] = []
    p_arr: list[Array] = []
    for a in e.arrays:
        u = used[a.name]
        if i in u and j in u:
            return f"array {a.name!r} is read with both {i!r} and {j!r} (an M x N input)"
        (i_arr if i in u else j_arr if j in u else p_arr).append(a)
    for a in (*i_arr, *j_arr):
        ax = [n for n in a.shape if not isinstance(n, int)]
        if len(ax) > 1:
            return f"array {a.name!r} has more than one symbolic axis"
    shorts = tuple(int(e.lengths[k]) for k in short)  # type: ignore[arg-type]
    return Form(e, i, j, short, shorts, tuple(i_arr), tuple(j_arr), tuple(p_arr),
                dtypes.pop())


# }}}


# {{{ row values as products of factors


def _unroll_reductions(expr: Any, lengths: dict[str, int]) -> Any:
    """Replace feature reductions by explicit sums/products/selects (lengths are short)."""
    from loopy.library.reduction import (
        ProductReductionOperation,
        SumReductionOperation,
    )
    from loopy.symbolic import IdentityMapper, SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    from feinsum.lowering.loopy_ops import MaxReduction, MinReduction

    class Unroll(IdentityMapper):  # type: ignore[misc]
        def map_reduction(self, r: Any) -> Any:
            body = self.rec(r.expr)
            terms: list[Any] = []
            for vals in itertools.product(*(range(lengths[n]) for n in r.inames)):
                subst = dict(zip(r.inames, vals, strict=True))
                terms.append(SubstitutionMapper(make_subst_func(subst))(body))
            op = r.operation
            if isinstance(op, SumReductionOperation):
                return prim.Sum(tuple(terms)) if len(terms) > 1 else terms[0]
            if isinstance(op, ProductReductionOperation):
                return prim.Product(tuple(terms)) if len(terms) > 1 else terms[0]
            if isinstance(op, (MaxReduction, MinReduction)):
                cmp = ">" if isinstance(op, MaxReduction) else "<"
                acc = terms[0]
                for t in terms[1:]:
                    acc = select_better(t, acc, cmp)
                return acc
            raise NotImplementedError(f"feature reduction {op}")

        def map_power(self, p: Any) -> Any:
            base, ex = self.rec(p.base), self.rec(p.exponent)
            if isinstance(ex, (int, np.integer)) and 1 <= int(ex) <= 4:
                return prim.Product((base,) * int(ex))  # type: ignore[arg-type]
            return prim.Call(prim.Variable("pow"), (base, ex))

    return Unroll()(expr)


@dataclass(frozen=True)
class RowTerm:
    """The value of one accumulator: output row ``row`` at short output indices
    ``short`` is the product of ``factors`` (expressions over the arrays, ``i``, ``j``)."""

    row: int
    short: tuple[int, ...]
    factors: tuple[Any, ...]


def row_terms(form: Form, *, unroll_short: bool = True) -> list[RowTerm]:
    """Every accumulator's product of factors, formulas inlined with their feature
    reductions unrolled. With ``unroll_short`` the short output indices are fixed to
    constants (one term per tuple), else they stay variables (one term per row)."""
    from loopy.symbolic import SubstitutionMapper, TypeCast
    from pymbolic.mapper.substitutor import make_subst_func

    from feinsum.lowering.kernel import _formula_rule_body, feature_inames
    from feinsum.spec.dtypes import compute_dtype, formula_dtype
    from feinsum.spec.formulas import feature_indices

    e = form.e
    features = feature_inames(e)
    tuples = form.short_tuples() if unroll_short else [None]
    terms = []
    for r, row in enumerate(e.arguments):
        dt = compute_dtype(e, r)
        for t in tuples:
            fixed: dict[str, Any] = {} if t is None else dict(zip(form.short_out, t, strict=True))
            factors = []
            for c, entry in enumerate(row):
                idx = tuple(fixed.get(k, prim.Variable(k)) for k in e.in_indices[c])
                for f in entry:
                    if isinstance(f, Array):
                        x: Any = prim.Subscript(prim.Variable(f.name), idx) if idx else (
                            prim.Variable(f.name))
                        fdt = f.dtype
                    else:
                        fdt = formula_dtype(e, f)
                        body = _formula_rule_body(f, features[f.name], fdt)
                        lengths = {features[f.name][d]: int(n)  # type: ignore[call-overload]
                                   for d, n in feature_indices(f).items()}
                        body = _unroll_reductions(body, lengths)
                        argmap = dict(zip(f.arguments, idx, strict=True))
                        x = SubstitutionMapper(make_subst_func(argmap))(body)
                    factors.append(x if fdt == dt else TypeCast(dt, x))
            terms.append(RowTerm(r, t or (), tuple(factors)))
    return terms


def accumulator_values(form: Form) -> int:
    """Values a row's accumulators take: one per row term, two where the reduction keeps a
    second one (argmin/argmax's index, log-sum-exp's sum)."""
    per_term = 2 if form.e.reduction in ("argmin", "argmax", "logsumexp") else 1
    return per_term * len(row_terms(form))


def product(factors: Sequence[Any]) -> Any:
    """The product of ``factors`` (the factor itself when there is one)."""
    factors = list(factors)
    return factors[0] if len(factors) == 1 else prim.Product(tuple(factors))


#: calls whose value is never negative (or NaN)
_NONNEGATIVE_CALLS = frozenset({"exp", "exp2", "native_exp", "native_exp2", "fabs", "abs",
                                "sqrt", "native_sqrt", "cosh"})


def nonnegative(expr: Any) -> bool:
    """Whether ``expr`` is never negative (it may be NaN) whatever its variables hold:
    squares (a factor twice), sums and products of such, ``exp``, ``fabs``, ``sqrt``,
    constants >= 0. False when it cannot tell."""
    from loopy.symbolic import TypeCast

    if isinstance(expr, (int, float, np.integer, np.floating)):
        return bool(expr >= 0)
    if isinstance(expr, TypeCast):
        return nonnegative(expr.child)
    if isinstance(expr, prim.Sum):
        return all(nonnegative(c) for c in expr.children)
    if isinstance(expr, prim.Product):
        counts: dict[Any, int] = {}
        for c in expr.children:
            counts[c] = counts.get(c, 0) + 1
        return all(n % 2 == 0 or nonnegative(c) for c, n in counts.items())
    if isinstance(expr, prim.Power):
        ex = expr.exponent
        return ((isinstance(ex, (int, np.integer)) and int(ex) % 2 == 0)
                or nonnegative(expr.base))
    if isinstance(expr, prim.Call) and isinstance(expr.function, prim.Variable):
        return expr.function.name in _NONNEGATIVE_CALLS
    return False


def nonnegative_terms(form: Form) -> bool:
    """Whether every term of every row of ``form`` is never negative (:func:`nonnegative`
    of each factor)."""
    return all(nonnegative(f) for t in row_terms(form) for f in t.factors)


def clamps_nan(form: Form | str) -> bool:
    """Whether the recipes' ``clamp_nan`` option applies to ``form``: a min or argmin over
    floating-point terms that are never negative (they may be NaN; :func:`nonnegative_terms`),
    such as a squared distance."""
    return (not isinstance(form, str) and form.e.reduction in ("min", "argmin")
            and form.dtype.kind == "f" and nonnegative_terms(form))


def checked_clamp_nan(form: Form, clamp_nan: bool) -> bool:
    """``clamp_nan``, refused where it does not apply (:func:`clamps_nan`)."""
    if clamp_nan and not clamps_nan(form):
        from feinsum.errors import InvalidConfigurationError

        raise InvalidConfigurationError(
            "clamp_nan needs a min or argmin over terms that are never negative (a squared "
            "distance...): set it to false for this einsum")
    return clamp_nan


def depends_on(expr: Any, names: set[str]) -> bool:
    """Whether ``expr`` reads any variable in ``names``."""
    from loopy.symbolic import get_dependencies

    return bool(get_dependencies(expr) & names)


# }}}

# {{{ array layout: the short axes of an i- or j-variable as one flat position


def long_axis(a: Array) -> int:
    """The position of the long (symbolic) axis of an i- or j-array."""
    axes = [k for k, n in enumerate(a.shape) if not isinstance(n, int)]
    if len(axes) != 1:
        # a fixed long length (not canonicalized): the first long one
        axes = [k for k, n in enumerate(a.shape) if is_long(n)]
    return axes[0]


def flat_short(a: Array, idx: Sequence[Any]) -> int:
    """Row-major flat position of the constant short indices of an access to ``a``."""
    la = long_axis(a)
    pos = 0
    for k, n in enumerate(a.shape):
        if k == la:
            continue
        pos = pos * int(n) + int(idx[k])
    return pos


def n_short(a: Array) -> int:
    """The number of flat short positions of ``a`` (the product of its short axes)."""
    la = long_axis(a)
    return int(np.prod([int(n) for k, n in enumerate(a.shape) if k != la], dtype=np.int64))


def short_index(a: Array, flat: int, long_idx: Any) -> tuple[Any, ...]:
    """The full index of ``a`` for flat short position ``flat`` and long index ``long_idx``."""
    la = long_axis(a)
    shorts = [int(n) for k, n in enumerate(a.shape) if k != la]
    vals = list(np.unravel_index(flat, shorts)) if shorts else []
    out = []
    for k in range(len(a.shape)):
        out.append(long_idx if k == la else int(vals.pop(0)))
    return tuple(out)


# }}}

# vim: foldmethod=marker
