"""Kernel templates for kernel reductions ``out[i, e...] = Red_j value(i, j, e...)``.

The KeOps-style recipes (``transforms/kernel_vec_cpu.py``, ``tiled_1d.py``, ``tiled_2d.py``,
``block_sparse.py``) and the block-sparse reference lowering (:mod:`feinsum.block_sparse`)
restructure the reference kernel so much that they write a new loopy kernel from the
spec instead of tagging the reference one. The pieces they share live here:

* :func:`analyze` classifies a spec's indices: the long output index ``i`` (the
  rows), the reduction index ``j``, the other (short) output indices, and every array as
  an *i-variable* (read with ``i``), a *j-variable* (read with ``j``) or a parameter;
* :func:`row_terms` writes each row's value as a product of *factors* (formulas inlined,
  feature reductions unrolled, short output indices fixed), ready to be rewritten by a
  template (i-variables packed into vector registers, j-variables read from a local
  tile...);
* :class:`Updater` emits the online update of each reduction kind as explicit loopy
  statements (``if(cond, a, b)`` selects, no ``fmin``/``fmax``), which stay valid when
  the accumulators are OpenCL vectors: ``sum``; ``min``/``max`` (NaN propagates);
  ``argmin``/``argmax`` (ties to the smallest index, NaN wins at its first index);
  ``logsumexp`` as a (max, scaled sum) pair with one ``exp`` per term.
* :func:`enable_vector_calls` lets loopy vectorize OpenCL's elementwise math builtins
  (``exp``, ``sqrt``...) over a ``vec`` iname: OpenCL overloads them for vector types,
  but loopy 2025.2 refuses every call under ``vec`` and silently falls back to
  per-lane scalar code.

Every template returns a kernel named ``einsum`` with the reference kernel's arguments
(arrays, outputs ``out{r}``/``out{r}_index``, int32 length symbols) so that results can
be validated against :func:`feinsum.evaluate`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymbolic.primitives as prim

from feinsum.errors import SpecificationError
from feinsum.spec import INDEX_REDUCTIONS, Array, BatchedEinsum, Length, is_long

#: OpenCL builtins that act elementwise on vector types.
ELEMENTWISE_FUNCTIONS = frozenset({
    "exp", "log", "sqrt", "rsqrt", "fabs", "abs", "sin", "cos", "tan", "tanh", "sinh", "cosh",
    "log1p", "expm1", "erf", "floor", "ceil", "fmin", "fmax", "exp2", "log2", "pow",
})

#: how many accumulators (vectors) a work-item may keep: beyond that, registers spill
MAX_ACCUMULATORS = 64

# loopy parses dim_tags strings (its annotations say tag objects)
_VEC3: Any = "c,c,vec"
_VEC1: Any = "vec"


# {{{ loopy vectorization of elementwise calls


def enable_vector_calls() -> None:
    """Let loopy's vectorizability check accept elementwise OpenCL builtins on vectors."""
    import loopy.expression as lexpr

    checker = lexpr.VectorizabilityChecker
    if getattr(checker.map_call, "_feinsum", False):
        return
    original = checker.map_call

    def map_call(self: Any, expr: prim.Call) -> bool:
        fn = expr.function
        name = getattr(fn, "name", None)
        if name is None:  # ResolvedFunction
            name = getattr(getattr(fn, "function", None), "name", None)
        if name in ELEMENTWISE_FUNCTIONS:
            return any([self.rec(p) for p in expr.parameters])
        return bool(original(self, expr))

    map_call._feinsum = True  # type: ignore[attr-defined]
    checker.map_call = map_call  # type: ignore[method-assign]


# }}}


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
    extra: dict[str, Any] = field(default_factory=dict)

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


def _array_indices(e: BatchedEinsum) -> dict[str, set[str]]:
    """For each array, the spec indices its axes are read with (formula arrays included)."""
    from feinsum.formulas import walk

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


def analyze(e: BatchedEinsum, *, block_sparse: bool = False) -> Form | str:
    """The spec as a kernel reduction, or the reason it is not one.

    A kernel reduction has exactly one reduction index ``j`` (long), one long output
    index ``i``, other output indices short (fixed lengths), real values, and no array
    read with both ``i`` and ``j`` (that would be an ``M x N`` input).
    """
    from feinsum.lowering import check_reduction_dtypes, compute_dtype

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
    used = _array_indices(e)
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

    from feinsum.loopy_ops import MaxReduction, MinReduction

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


def select_better(new: Any, old: Any, cmp: str) -> Any:
    """``new`` if it beats ``old`` (``cmp`` ``<`` for min) or is NaN, else ``old``; with
    comparisons and selects only (vectorizable)."""
    return prim.If(prim.Comparison(new, cmp, old), new,
                   prim.If(prim.Comparison(new, "!=", new), new, old))


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

    from feinsum.formulas import feature_indices, formula_result_dtype
    from feinsum.lowering import _formula_rule_body, compute_dtype, feature_inames

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
                        body = _formula_rule_body(f, features[f.name])
                        lengths = {features[f.name][d]: int(n)  # type: ignore[call-overload]
                                   for d, n in feature_indices(f).items()}
                        body = _unroll_reductions(body, lengths)
                        argmap = dict(zip(f.arguments, idx, strict=True))
                        x = SubstitutionMapper(make_subst_func(argmap))(body)
                        fdt = formula_result_dtype(f)
                    factors.append(x if fdt == dt else TypeCast(dt, x))
            terms.append(RowTerm(r, t or (), tuple(factors)))
    return terms


def product(factors: Sequence[Any]) -> Any:
    factors = list(factors)
    return factors[0] if len(factors) == 1 else prim.Product(tuple(factors))


def depends_on(expr: Any, names: set[str]) -> bool:
    from loopy.symbolic import get_dependencies

    return bool(get_dependencies(expr) & names)


# }}}


# {{{ online reduction updates as explicit statements


def neutral_value(kind: str, dtype: np.dtype[Any]) -> Any:
    """The value of an empty reduction: 0, +inf (min), -inf (max, logsumexp); the extreme
    values of integer dtypes."""
    if kind == "sum":
        return dtype.type(0)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return dtype.type(info.max if kind in ("min", "argmin") else info.min)
    if kind in ("min", "argmin"):
        return dtype.type(np.inf)
    return dtype.type(-np.inf)


@dataclass
class Updater:
    """Statements of one accumulator of reduction ``kind``.

    Temporaries (names given by the template, shapes decided by it): ``acc`` (value; for
    logsumexp the running maximum), ``aux`` (argmin/argmax: the index, in ``index_dtype``;
    logsumexp: the scaled sum). ``acc_ref``/``aux_ref`` are the accesses
    (``acc[3, ii]``), ``value`` the expression of the new term, ``index`` its reduction
    index (an expression, for argmin/argmax). All selects are written so that vector
    accumulators work.
    """

    kind: str
    dtype: np.dtype[Any]

    @property
    def index_dtype(self) -> np.dtype[Any]:
        """Index accumulator dtype: as wide as the value (a vector select needs equal widths)."""
        return np.dtype(np.int64) if self.dtype.itemsize == 8 else np.dtype(np.int32)

    @property
    def needs_aux(self) -> bool:
        return self.kind in ("argmin", "argmax", "logsumexp")

    def init(self, acc: Any, aux: Any) -> list[tuple[Any, Any]]:
        """(assignee, expression) pairs initialising the accumulator."""
        out = [(acc, neutral_value(self.kind, self.dtype))]
        if self.kind in INDEX_REDUCTIONS:
            out.append((aux, self.index_dtype.type(-1)))
        elif self.kind == "logsumexp":
            out.append((aux, self.dtype.type(0)))
        return out

    def update(self, acc: Any, aux: Any, value: Any, index: Any = None,
               *, ordered: bool = True) -> list[tuple[Any, Any]]:
        """(assignee, expression) pairs folding ``value`` into the accumulator, in order
        (each reads the accumulators as left by the previous one). ``ordered``: terms
        arrive in increasing index order (else argmin/argmax compare indices on ties)."""
        k = self.kind
        if k == "sum":
            return [(acc, prim.Sum((acc, value)))]
        if k in ("min", "max"):
            return [(acc, select_better(value, acc, "<" if k == "min" else ">"))]
        if k in INDEX_REDUCTIONS:
            cmp = "<" if k == "argmin" else ">"
            better = prim.Comparison(value, cmp, acc)
            is_nan = prim.Comparison(value, "!=", value)
            acc_nan = prim.Comparison(acc, "!=", acc)
            if ordered:
                # first strictly better term wins; the first NaN wins and stays
                new_idx = prim.If(better, index, prim.If(is_nan, prim.If(acc_nan, aux, index),
                                                          aux))
                return [(aux, new_idx), (acc, select_better(value, acc, cmp))]
            # any order: compare indices on ties; comparisons and selects only (no
            # logical operators, which loopy does not vectorize); aux < 0: empty so far
            smaller = prim.Comparison(index, "<", aux)
            empty = prim.Comparison(aux, "<", 0)
            numbers = prim.If(better, index, prim.If(
                prim.Comparison(value, "==", acc),
                prim.If(smaller, index, prim.If(empty, index, aux)), aux))
            new_idx = prim.If(is_nan, prim.If(acc_nan, prim.If(smaller, index, aux), index),
                              prim.If(acc_nan, aux, numbers))
            new_acc = prim.If(is_nan, value, prim.If(acc_nan, acc, prim.If(better, value, acc)))
            return [(aux, new_idx), (acc, new_acc)]
        if k == "logsumexp":
            # acc = running max m, aux = sum of exp(v - m); one exp per term:
            # d = v - m; t = exp(-|d|); d > 0: s = s*t + 1, m = v; d <= 0: s += t;
            # d NaN (v NaN, or both infinite of one sign): s unchanged, m = NaN if v is.
            d = prim.Sum((value, prim.Product((-1, acc))))
            t = prim.Call(prim.Variable("exp"),
                          (prim.Product((-1, prim.Call(prim.Variable("fabs"), (d,)))),))
            pos = prim.Comparison(d, ">", 0)
            nonpos = prim.Comparison(d, "<=", 0)
            one = self.dtype.type(1)
            return [
                (aux, prim.If(pos, prim.Sum((prim.Product((aux, t)), one)),
                              prim.If(nonpos, prim.Sum((aux, t)), aux))),
                (acc, prim.If(pos, value, prim.If(prim.Comparison(value, "!=", value),
                                                  value, acc))),
            ]
        raise ValueError(f"unknown reduction {k!r}")

    def combine(self, acc: Any, aux: Any, acc2: Any, aux2: Any) -> list[tuple[Any, Any]]:
        """Fold a partial accumulator (``acc2``, ``aux2``) into (``acc``, ``aux``) (scalars;
        for two-pass schemes)."""
        k = self.kind
        if k == "sum":
            return [(acc, prim.Sum((acc, acc2)))]
        if k in ("min", "max"):
            return [(acc, select_better(acc2, acc, "<" if k == "min" else ">"))]
        if k in INDEX_REDUCTIONS:
            return self.update(acc, aux, acc2, aux2, ordered=False)
        # logsumexp pairs (m, s): m' = max(m, m2); s' = s exp(m - m') + s2 exp(m2 - m')
        mx = prim.If(prim.Comparison(acc2, ">", acc), acc2, acc)
        nan = prim.LogicalOr((prim.Comparison(acc, "!=", acc),
                              prim.Comparison(acc2, "!=", acc2)))
        inf = prim.Comparison(prim.Call(prim.Variable("fabs"), (mx,)), "==",
                              self.dtype.type(np.inf))

        def scaled(s: Any, m: Any) -> Any:
            return prim.If(prim.Comparison(s, "==", 0), s, prim.Product((
                s, prim.Call(prim.Variable("exp"), (prim.Sum((m, prim.Product((-1, mx)))),)))))

        return [
            (aux, prim.If(nan, aux, prim.If(inf, prim.Sum((aux, aux2)),
                                            prim.Sum((scaled(aux, acc), scaled(aux2, acc2)))))),
            (acc, prim.If(prim.Comparison(acc2, "!=", acc2), acc2, prim.If(nan, acc, mx))),
        ]

    def result(self, acc: Any, aux: Any) -> Any:
        """The reduced value from the accumulator."""
        if self.kind == "logsumexp":
            return prim.Sum((acc, prim.Call(prim.Variable("log"), (aux,))))
        return acc


# }}}


# {{{ kernel scaffolding


def reference_args(e: BatchedEinsum) -> list[Any]:
    """The reference kernel's arguments (arrays, outputs, length symbols), in its order."""
    from dataclasses import replace

    from feinsum.lowering import generate_loopy

    dense = replace(e, block_sparse=None) if e.block_sparse is not None else e
    return list(generate_loopy(dense).default_entrypoint.args)


def length_str(n: Length) -> str:
    return str(n)


def length_expr(n: Length) -> Any:
    return prim.Variable(n) if isinstance(n, str) else n


def var(name: str) -> prim.Variable:
    return prim.Variable(name)


def sub(name: str, *idx: Any) -> Any:
    return prim.Subscript(prim.Variable(name), tuple(idx)) if idx else prim.Variable(name)


def out_access(form: Form, name: str, row_expr: Any, short: Sequence[Any]) -> Any:
    """``out{r}[...]`` with the row index ``row_expr`` and short indices in spec order."""
    fixed = dict(zip(form.short_out, short, strict=True))
    idx = tuple(row_expr if k == form.i else fixed[k] for k in form.e.out_indices)
    return prim.Subscript(prim.Variable(name), idx)


class Rewriter:
    """Rewrites array accesses of factor expressions: ``fn(name, index_tuple)`` returns a
    replacement or ``None`` (keep); ``variables`` maps index names to expressions (the
    spec's ``i`` and ``j`` to the template's row and reduction expressions)."""

    def __init__(self, fn: Any, variables: dict[str, Any] | None = None) -> None:
        from loopy.symbolic import IdentityMapper

        outer = fn
        names = dict(variables or {})

        class M(IdentityMapper):  # type: ignore[misc]
            def map_subscript(self, expr: prim.Subscript) -> Any:
                idx = tuple(self.rec(i) for i in expr.index_tuple)
                agg: Any = expr.aggregate
                new = outer(agg.name, idx)
                return new if new is not None else prim.Subscript(expr.aggregate, idx)

            def map_variable(self, expr: prim.Variable) -> Any:
                return names.get(expr.name, expr)

        self.mapper = M()

    def __call__(self, expr: Any) -> Any:
        return self.mapper(expr)


def short_axes(a: Array, index_of_axis: Sequence[str | None]) -> list[int]:
    """Positions of the axes of ``a`` that are not the long (symbolic) one."""
    return [k for k, n in enumerate(a.shape) if isinstance(n, int)]


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


# {{{ the CPU vector-layout kernel (kernel_vec_cpu, block_sparse recipes)


def vec_kernel(e: BatchedEinsum, V: int, U: int, *, block_sparse: bool = False,
               nsplit: int = 1, tile: int = 1) -> Any:
    """The CPU vector-layout kernel (``transforms/kernel_vec_cpu.py``): each work-item owns
    ``U`` vectors of ``V`` consecutive output rows, i-variables packed into private
    vectors (rows past the end repeat the last row and are not stored), j-variables
    broadcast, accumulators in vectors.

    ``block_sparse``: work-item ``io`` follows row ``io`` of a host-prepared launch table
    ``launch[nblocks, 3]`` (cluster ``k``, first row, end row; see
    :func:`feinsum.block_sparse.launch_table`) and reduces over the cluster's ranges
    ``redranges_j[slices_i[k-1]:slices_i[k]]`` (none when ``k < 0``) with data-dependent
    loop bounds.

    ``nsplit > 1`` (KeOps' GpuConv2D, for few rows and many terms): the reduction index
    is dealt to ``nsplit`` work-items per row block (second grid axis ``jb``) in tiles
    of ``tile`` consecutive terms, cyclically (``j = (jt*nsplit + jb)*tile + jj``), so
    each work-item reads its own stretches of the j-variables (``tile = 1``: every
    ``nsplit``-th term, which makes every work-item touch every cache line). They write
    partial accumulators to a global ``(terms, M, nsplit)`` buffer; after a global
    barrier, a second device kernel combines them (:meth:`Updater.combine`) and writes
    the outputs.
    """
    import loopy as lp

    enable_vector_calls()
    split = nsplit > 1
    if split and block_sparse:
        raise SpecificationError(
            "a block-sparse reduction cannot also be split over j (nsplit > 1)")
    form = analyze(e, block_sparse=block_sparse)
    if isinstance(form, str):
        raise SpecificationError(f"this kernel template does not fit the spec: {form}")
    upd = Updater(e.reduction, form.dtype)
    ii, io = var("ii"), var("io")
    tiled = split and tile > 1
    if tiled:
        j: Any = (var("jt") * nsplit + var("jb")) * tile + var("jj")
    elif split:
        j = var("jl") * nsplit + var("jb")
    else:
        j = var("j")
    i_names = {a.name: a for a in form.i_arrays}
    temps: list[Any] = []
    insns: list[Any] = []
    outer = frozenset({"io"})
    row_inames = {"io", "jb"} if split else {"io"}
    setup: set[str]
    if block_sparse:
        from feinsum.block_sparse import RANGE_DTYPE, range_args

        priv = lp.AddressSpace.PRIVATE
        temps += [lp.TemporaryVariable(name, RANGE_DTYPE, shape=(), address_space=priv)
                  for name in ("kc", "rstart", "rend", "sstart", "send", "jstart", "jend")]
        kc = var("kc")
        insns += [
            lp.Assignment("kc", sub("launch", io, 0), id="kc", within_inames=outer),
            lp.Assignment("rstart", sub("launch", io, 1), id="rstart", within_inames=outer),
            lp.Assignment("rend", sub("launch", io, 2), id="rend", within_inames=outer),
            lp.Assignment("sstart", prim.If(prim.Comparison(kc, ">", 0),
                                            sub("slices_i", kc - 1), 0),
                          id="sstart", within_inames=outer, depends_on=frozenset({"kc"})),
            lp.Assignment("send", prim.If(prim.Comparison(kc, ">=", 0), sub("slices_i", kc), 0),
                          id="send", within_inames=outer, depends_on=frozenset({"kc"})),
            lp.Assignment("jstart", sub("redranges_j", var("s"), 0), id="jstart",
                          within_inames=frozenset({"io", "s"}),
                          depends_on=frozenset({"sstart", "send"})),
            lp.Assignment("jend", sub("redranges_j", var("s"), 1), id="jend",
                          within_inames=frozenset({"io", "s"}),
                          depends_on=frozenset({"sstart", "send"})),
        ]
        first: Any = var("rstart")
        end: Any = var("rend")
        setup = {"kc", "rstart", "rend"}
    else:
        first, end = io * (U * V), length_expr(form.m)
        setup = set()

    def row(u: int, lane: Any) -> Any:
        return first + u * V + lane

    def clamp(r: Any) -> Any:
        return prim.If(prim.Comparison(r, "<", end), r, end - 1)

    pack_ids = []
    for a in form.i_arrays:
        ns = n_short(a)
        temps.append(lp.TemporaryVariable(f"{a.name}_v", a.dtype, shape=(U, ns, V),
                                          dim_tags=_VEC3))
        for u in range(U):
            for s in range(ns):
                pid = f"pack_{a.name}_{u}_{s}"
                insns.append(lp.Assignment(
                    sub(f"{a.name}_v", u, s, ii),
                    sub(a.name, *short_index(a, s, clamp(row(u, ii)))),
                    id=pid, within_inames=frozenset({*row_inames, "ii"}),
                    depends_on=frozenset(setup)))
                pack_ids.append(pid)

    terms = row_terms(form)
    nt = len(terms)
    temps.append(lp.TemporaryVariable("acc", form.dtype, shape=(U, nt, V), dim_tags=_VEC3))
    if upd.needs_aux:
        aux_dt = upd.index_dtype if e.reduction in INDEX_REDUCTIONS else form.dtype
        temps.append(lp.TemporaryVariable("aux", aux_dt, shape=(U, nt, V), dim_tags=_VEC3))
    hot = frozenset({"io", "s", "j", "ii"} if block_sparse else
                    {"io", "jb", "jt", "jj", "ii"} if tiled else
                    {"io", "jb", "jl", "ii"} if split else {"io", "j", "ii"})
    hot_deps = {"jstart", "jend"} if block_sparse else set()
    fac_temps: dict[Any, str] = {}
    update_ids: list[str] = []
    init_ids: list[str] = []
    for u in range(U):
        def to_vec(name: str, idx: tuple[Any, ...], u: int = u) -> Any:
            a = i_names.get(name)
            return None if a is None else sub(f"{name}_v", u, flat_short(a, idx), ii)

        rewrite = Rewriter(to_vec, {form.i: row(u, ii), form.j: j})
        fac_temps.clear()
        for t, term in enumerate(terms):
            acc, aux = sub("acc", u, t, ii), sub("aux", u, t, ii)
            my_inits = [f"init_{u}_{t}_{k}" for k in range(2)]
            for sid, (lhs, rhs) in zip(my_inits, upd.init(acc, aux), strict=False):
                insns.append(lp.Assignment(lhs, rhs, id=sid,
                                           within_inames=frozenset({*row_inames, "ii"})))
                init_ids.append(sid)
            factors = []
            for f in term.factors:
                g = rewrite(f)
                if depends_on(g, {f"{a}_v" for a in i_names}) and not isinstance(
                        g, prim.Subscript):
                    if g not in fac_temps:
                        name = f"f{u}_{len(fac_temps)}"
                        fac_temps[g] = name
                        temps.append(lp.TemporaryVariable(name, form.dtype, shape=(V,),
                                                          dim_tags=_VEC1))
                        insns.append(lp.Assignment(
                            sub(name, ii), g, id=f"fac_{name}", within_inames=hot,
                            depends_on=frozenset({*pack_ids, *hot_deps})))
                    g = sub(fac_temps[g], ii)
                factors.append(g)
            value = product(factors)
            deps = {f"fac_{fn}" for fn in fac_temps.values()} | hot_deps
            prev: str | None = None
            for k, (lhs, rhs) in enumerate(upd.update(acc, aux, value, j,
                                                      ordered=not block_sparse)):
                sid = f"upd_{u}_{t}_{k}"
                insns.append(lp.Assignment(
                    lhs, rhs, id=sid, within_inames=hot,
                    depends_on=frozenset({*deps, *init_ids, *pack_ids,
                                          *([prev] if prev else [])})))
                update_ids.append(sid)
                prev = sid

    lane = var("is")
    nstore = 2 if (upd.needs_aux if split else e.reduction in INDEX_REDUCTIONS) else 1
    store_ids = [f"store_{u}_{t}_{k}" for u in range(U) for t in range(nt) for k in range(nstore)]
    # rows of distinct stores never coincide (loopy cannot tell with data-dependent rows)
    nosync = frozenset((sid, "any") for sid in store_ids) if block_sparse else frozenset()
    for u in range(U):
        r = row(u, lane)
        for t, term in enumerate(terms):
            acc, aux = sub("acc", u, t, lane), sub("aux", u, t, lane)
            if split:  # partial accumulators, combined by the second kernel
                stores = [(sub("part", t, r, var("jb")), acc)]
                if upd.needs_aux:
                    stores.append((sub("part_aux", t, r, var("jb")), aux))
            else:
                stores = [(out_access(form, f"out{term.row}", r, term.short),
                           upd.result(acc, aux))]
                if e.reduction in INDEX_REDUCTIONS:
                    stores.append((out_access(form, f"out{term.row}_index", r, term.short),
                                   aux))
            for k, (lhs, rhs) in enumerate(stores):
                sid = f"store_{u}_{t}_{k}"
                insns.append(lp.Assignment(
                    lhs, rhs, id=sid, within_inames=frozenset({*row_inames, "is"}),
                    depends_on=frozenset({*update_ids, *init_ids, *setup}),
                    no_sync_with=frozenset(x for x in nosync if x[0] != sid),
                    predicates=frozenset[Any]({prim.Comparison(r, "<", end)})))

    if split:
        # {{{ second pass: combine the nsplit partial accumulators of every row

        glob = lp.AddressSpace.GLOBAL
        mexpr = length_expr(form.m)
        temps.append(lp.TemporaryVariable("part", form.dtype, shape=(nt, mexpr, nsplit),
                                          address_space=glob))
        if upd.needs_aux:
            aux_dt = upd.index_dtype if e.reduction in INDEX_REDUCTIONS else form.dtype
            temps.append(lp.TemporaryVariable("part_aux", aux_dt, shape=(nt, mexpr, nsplit),
                                              address_space=glob))
            temps.append(lp.TemporaryVariable("acc2_aux", aux_dt, shape=(nt,),
                                              address_space=lp.AddressSpace.PRIVATE))
        temps.append(lp.TemporaryVariable("acc2", form.dtype, shape=(nt,),
                                          address_space=lp.AddressSpace.PRIVATE))
        insns.append(lp.BarrierInstruction("gb", synchronization_kind="global",
                                           depends_on=frozenset(store_ids)))
        r2, jb2 = var("r2"), var("jb2")
        ids2: list[str] = []
        for t, term in enumerate(terms):
            acc, aux = sub("acc2", t), sub("acc2_aux", t)
            for k, (lhs, rhs) in enumerate(upd.init(acc, aux)):
                insns.append(lp.Assignment(lhs, rhs, id=f"init2_{t}_{k}",
                                           within_inames=frozenset({"r2"}),
                                           depends_on=frozenset({"gb"})))
                ids2.append(f"init2_{t}_{k}")
            prev = None
            for k, (lhs, rhs) in enumerate(upd.combine(acc, aux, sub("part", t, r2, jb2),
                                                       sub("part_aux", t, r2, jb2))):
                insns.append(lp.Assignment(
                    lhs, rhs, id=f"comb_{t}_{k}", within_inames=frozenset({"r2", "jb2"}),
                    depends_on=frozenset({"gb", *ids2, *([prev] if prev else [])})))
                prev = f"comb_{t}_{k}"
                ids2.append(prev)
            stores = [(out_access(form, f"out{term.row}", r2, term.short), upd.result(acc, aux))]
            if e.reduction in INDEX_REDUCTIONS:
                stores.append((out_access(form, f"out{term.row}_index", r2, term.short), aux))
            for k, (lhs, rhs) in enumerate(stores):
                insns.append(lp.Assignment(lhs, rhs, id=f"out2_{t}_{k}",
                                           within_inames=frozenset({"r2"}),
                                           depends_on=frozenset({"gb", *ids2})))

        # }}}

    params = [str(s) for s in (form.m, form.n) if isinstance(s, str)]
    pre = "[" + ", ".join(dict.fromkeys(params)) + "] -> " if params else ""
    lanes = f"{{[ii, is]: 0 <= ii < {V} and 0 <= is < {V}}}"
    args = reference_args(e)
    if block_sparse:
        domains = [
            "[nblocks] -> {[io]: 0 <= io < nblocks}",
            "[sstart, send] -> {[s]: sstart <= s < send}",
            "[jstart, jend] -> {[j]: jstart <= j < jend}",
            lanes,
        ]
        args += [*range_args(),
                 lp.GlobalArg("launch", RANGE_DTYPE, shape=(var("nblocks"), 3)),
                 lp.ValueArg("nblocks", RANGE_DTYPE)]
    elif split:
        domains = [
            f"{pre}{{[io]: 0 <= io and {U * V}*io < {form.m}}}",
            lanes,
            # jl's domain under jb's: work-items without terms (jb >= N) still store
            f"{{[jb]: 0 <= jb < {nsplit}}}",
            "[" + ", ".join(dict.fromkeys([*params, "jb"])) + "] -> " + (
                f"{{[jt, jj]: 0 <= jt and 0 <= jj < {tile} and "
                f"{nsplit * tile}*jt + {tile}*jb + jj < {form.n}}}" if tiled else
                f"{{[jl]: 0 <= jl and {nsplit}*jl + jb < {form.n}}}"),
            f"{pre}{{[r2, jb2]: 0 <= r2 < {form.m} and 0 <= jb2 < {nsplit}}}",
        ]
    else:
        domains = [
            f"{pre}{{[io]: 0 <= io and {U * V}*io < {form.m}}}",
            lanes,
            f"{pre}{{[j]: 0 <= j < {form.n}}}",
        ]
    knl = lp.make_kernel(
        domains, insns, [*args, *temps], name="einsum",
        lang_version=(2018, 2), target=lp.PyOpenCLTarget(),
        silenced_warnings=["vectorize_failed", "read_no_write(*)", "v1_scheduler_fallback",
                           "unused_inames", "write_race(store_*)", "iname-order"],
    )
    tags = {"io": "g.0", "ii": "vec", "is": "unr"}
    if split:
        tags.update({"jb": "g.1", "r2": "g.0"})
    return lp.tag_inames(knl, tags)


# }}}
