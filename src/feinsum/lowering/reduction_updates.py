"""Online updates of every reduction kind as explicit loopy statements.

The kernel-reduction templates (:mod:`feinsum.reductions.templates`, ``transforms/tiled_1d.py``)
and the block-sparse reference lowering (:mod:`feinsum.reductions.block_sparse`) fold one term at a
time into accumulators they declare themselves:

* :class:`Updater` emits the online update of each reduction kind as explicit loopy
  statements (``if(cond, a, b)`` selects; ``fmin``/``fmax`` only where NaN is carried as
  -1, :attr:`Updater.nonnegative`), which stay valid when
  the accumulators are OpenCL vectors: ``sum``; ``min``/``max`` (NaN propagates);
  ``argmin``/``argmax`` (ties to the smallest index, NaN wins at its first index);
  ``logsumexp`` as a (max, scaled sum) pair with one ``exp`` per term;
* :func:`neutral_value` is the value of an empty reduction;
* :func:`enable_vector_calls` lets loopy vectorize OpenCL's elementwise math builtins
  (``exp``, ``sqrt``...) over a ``vec`` iname: OpenCL overloads them for vector types,
  but loopy 2025.2 refuses every call under ``vec`` and silently falls back to
  per-lane scalar code;
* :data:`MATH_MODES` are the ``exp``/``log`` flavours the templates offer (the recipes'
  ``math`` parameter): :func:`rewrite_math` rewrites a value's ``exp``/``log`` calls,
  :class:`Updater` uses the mode's functions in its log-sum-exp updates, and
  :func:`register_math` tells loopy the OpenCL built-ins a mode calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pymbolic.primitives as prim
from pytools.tag import Tag, tag_dataclass

from feinsum.spec.model import INDEX_REDUCTIONS

#: OpenCL builtins that act elementwise on vector types.
ELEMENTWISE_FUNCTIONS = frozenset({
    "exp", "log", "sqrt", "rsqrt", "fabs", "abs", "sin", "cos", "tan", "tanh", "sinh", "cosh",
    "log1p", "expm1", "erf", "floor", "ceil", "fmin", "fmax", "exp2", "log2", "pow",
    "native_exp", "native_exp2", "native_log", "native_log2",
})


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


# {{{ exp/log flavours

#: The ``exp``/``log`` flavours of the kernel-reduction templates (the ``math`` parameter):
#: ``accurate``: ``exp``, ``log`` (OpenCL's full-profile accuracy, <= 3 ulp);
#: ``native``: ``native_exp``, ``native_log`` (the hardware's approximations);
#: ``exp2``: ``exp(a*x)`` as ``exp2((a*log2 e)*x)`` with the loop-invariant factors of the
#: argument folded into one constant, log-sum-exp kept in base 2;
#: ``native_exp2``: the same with ``native_exp2``/``native_log2``. Native flavours are
#: float32 only (OpenCL has no double ``native_*``).
MATH_MODES = ("accurate", "native", "exp2", "native_exp2")
LOG2E, LN2 = math.log2(math.e), math.log(2.0)

_EXP = {"accurate": "exp", "native": "native_exp", "exp2": "exp2",
        "native_exp2": "native_exp2"}
_LOG = {"accurate": "log", "native": "native_log", "exp2": "log2",
        "native_exp2": "native_log2"}
#: What each mode may call beyond loopy's OpenCL functions (registered by register_math).
_CALLS = {"accurate": (), "native": ("native_exp", "native_log"), "exp2": ("exp2", "log2"),
          "native_exp2": ("native_exp2", "native_log2", "native_log")}


def is_base2(mode: str) -> bool:
    """Whether *mode* evaluates exponentials in base 2 (log-sum-exp pairs in base-2 units)."""
    return mode in ("exp2", "native_exp2")


def register_math(t_unit: Any, mode: str) -> Any:
    """*t_unit* with the OpenCL built-ins of *mode* that loopy does not know registered."""
    from loopy.transform.callable import register_callable

    from feinsum.lowering.loopy_ops import MathCallable

    if mode not in MATH_MODES:
        raise ValueError(f"unknown math mode {mode!r}; one of {MATH_MODES}")
    for name in _CALLS[mode]:
        t_unit = register_callable(t_unit, name, MathCallable(name))
    return t_unit


def _flat_factors(expr: Any) -> list[Any]:
    if isinstance(expr, prim.Product):
        return [f for c in expr.children for f in _flat_factors(c)]
    return [expr]


def rewrite_math(expr: Any, mode: str, dtype: np.dtype[Any], invariant: Any) -> Any:
    """*expr* with its ``exp``/``log`` calls in the flavour *mode* (:data:`MATH_MODES`).
    Base-2 flavours fold ``log2 e`` and the factors of an ``exp`` argument for which
    ``invariant(factor)`` holds (loop-invariant: parameters, numbers) into one product
    written first, which compilers hoist out of the loop: ``exp(-d*g)`` becomes
    ``exp2((-1.4427*g)*d)``, one multiplication per term."""
    from loopy.symbolic import IdentityMapper

    if mode == "accurate":
        return expr
    log2e = dtype.type(LOG2E)
    exp_name = _EXP[mode]
    log_name = "log" if mode == "exp2" else "native_log"

    class M(IdentityMapper):  # type: ignore[misc]
        def map_call(self, expr: prim.Call) -> Any:
            params = tuple(self.rec(p) for p in expr.parameters)
            name = getattr(expr.function, "name", None)
            if name == "exp" and len(params) == 1:
                (arg,) = params
                if is_base2(mode):
                    fs = _flat_factors(arg)
                    number = log2e
                    inv, rest = [], []
                    for f in fs:
                        if isinstance(f, (int, float, np.number)):
                            number = dtype.type(number * f)
                        elif invariant(f):
                            inv.append(f)
                        else:
                            rest.append(f)
                    head: Any = prim.Product((number, *inv)) if inv else number
                    arg = prim.Product((head, *rest)) if rest else head
                return prim.Call(prim.Variable(exp_name), (arg,))
            if name == "log" and len(params) == 1:
                return prim.Call(prim.Variable(log_name), params)
            return prim.Call(expr.function, params)

    return M()(expr)


def scale_value(expr: Any, factor: Any, invariant: Any) -> Any:
    """``factor * expr`` with the factor distributed over sums and folded, with the
    factors of each product for which ``invariant(f)`` holds, into one product written
    first (a loop invariant): ``log2 e * (b - d*g)`` becomes ``(log2 e)*b + (-log2 e*g)*d``,
    one FMA per term once the invariant product is hoisted."""
    if isinstance(expr, prim.Sum):
        return prim.Sum(tuple(scale_value(t, factor, invariant) for t in expr.children))
    if isinstance(expr, (int, float, np.number)):
        return type(factor)(factor * expr)
    fs = _flat_factors(expr)
    number = factor
    inv, rest = [], []
    for f in fs:
        if isinstance(f, (int, float, np.number)):
            number = type(factor)(number * f)
        elif invariant(f):
            inv.append(f)
        else:
            rest.append(f)
    head: Any = prim.Product((number, *inv)) if inv else number
    return prim.Product((head, *rest)) if rest else head


# }}}


# {{{ online reduction updates as explicit statements


def select_better(new: Any, old: Any, cmp: str) -> Any:
    """``new`` if it beats ``old`` (``cmp`` ``<`` for min) or is NaN, else ``old``; with
    comparisons and selects only (vectorizable)."""
    return prim.If(prim.Comparison(new, cmp, old), new,
                   prim.If(prim.Comparison(new, "!=", new), new, old))


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


@tag_dataclass
class OnNewMinimum(Tag):  # type: ignore[misc]
    """The tag of the statements of a lazy argmin (:meth:`Updater.lazy_index`) that run
    only in a chunk holding a row's new minimum, in a branch: the performance model counts
    them at the rate terms in random order take it."""


@dataclass(frozen=True)
class Updater:
    """Statements of one accumulator of reduction ``kind``.

    Temporaries (names given by the template, shapes decided by it): ``acc`` (value; for
    logsumexp the running maximum), ``aux`` (argmin/argmax: the index, in ``index_dtype``;
    logsumexp: the scaled sum). ``acc_ref``/``aux_ref`` are the accesses
    (``acc[3, ii]``), ``value`` the expression of the new term, ``index`` its reduction
    index (an expression, for argmin/argmax). All selects are written so that vector
    accumulators work. ``math`` (:data:`MATH_MODES`) is the flavour of log-sum-exp's
    ``exp``/``log``; the base-2 ones keep the pair in base-2 units (``acc`` the maximum of
    ``value * log2 e``), which :meth:`result` converts back.
    """

    kind: str
    dtype: np.dtype[Any]
    math: str = "accurate"
    #: the accumulators are scalars: in-order updates may use logical operators, and take
    #: fewer comparisons and selects (no nested selects a compiler turns into branches)
    scalar: bool = False
    #: every term is >= 0 or NaN (a sum of squares, ...): min and argmin then carry a NaN
    #: term as -1 (``fmax(v, -1)``, below every other term, so that the first NaN wins by
    #: the comparison alone: no NaN tests per term; ``fmin`` keeps the minimum: one
    #: instruction each on GPUs, slower than selects in PoCL), :meth:`result` turns -1
    #: back into NaN; terms in index order (:meth:`combine` orders ties by index)
    nonnegative: bool = False

    @property
    def clamps_nan(self) -> bool:
        """Whether NaN terms are carried as -1 (see :attr:`nonnegative`)."""
        return (self.nonnegative and self.kind in ("min", "argmin")
                and self.dtype.kind == "f")

    @property
    def index_dtype(self) -> np.dtype[Any]:
        """Index accumulator dtype: as wide as the value (a vector select needs equal widths)."""
        return np.dtype(np.int64) if self.dtype.itemsize == 8 else np.dtype(np.int32)

    @property
    def needs_aux(self) -> bool:
        """Whether the accumulator has a second temporary ``aux``."""
        return self.kind in ("argmin", "argmax", "logsumexp")

    @property
    def aux_dtype(self) -> np.dtype[Any]:
        """The dtype of ``aux``: the index dtype (argmin/argmax), else the value dtype."""
        return self.index_dtype if self.kind in INDEX_REDUCTIONS else self.dtype

    def init(self, acc: Any, aux: Any) -> list[tuple[Any, Any]]:
        """(assignee, expression) pairs initialising the accumulator."""
        out = [(acc, neutral_value(self.kind, self.dtype))]
        if self.kind in INDEX_REDUCTIONS:
            out.append((aux, self.index_dtype.type(-1)))
        elif self.kind == "logsumexp":
            out.append((aux, self.dtype.type(0)))
        return out

    def update(self, acc: Any, aux: Any, value: Any, index: Any = None,
               *, ordered: bool = True, scratch: Any = None) -> list[tuple[Any, Any]]:
        """(assignee, expression) pairs folding ``value`` into the accumulator, in order
        (each reads the accumulators as left by the previous one). ``ordered``: terms
        arrive in increasing index order (else argmin/argmax compare indices on ties).
        ``scratch``: a temporary of the value dtype where the scalar log-sum-exp update
        keeps the difference to the running maximum (computed once, read four times)."""
        k = self.kind
        if k == "sum":
            return [(acc, prim.Sum((acc, value)))]
        if self.clamps_nan:
            if not ordered:
                raise ValueError("NaN carried as -1 needs the terms in index order")
            return self._clamped_update(acc, aux, value, index)
        if self.scalar and ordered and k in ("min", "max", *INDEX_REDUCTIONS):
            # take the term when it beats acc or is NaN, unless acc is NaN already (the
            # first NaN wins): !(v >= acc) && acc == acc, for min
            worse = ">=" if k in ("min", "argmin") else "<="
            take = prim.LogicalAnd((prim.LogicalNot(prim.Comparison(value, worse, acc)),
                                    prim.Comparison(acc, "==", acc)))
            index_upd = [(aux, prim.If(take, index, aux))] if k in INDEX_REDUCTIONS else []
            return [*index_upd, (acc, prim.If(take, value, acc))]
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
            raw = value
            if is_base2(self.math):
                value = prim.Product((self.dtype.type(LOG2E), value))
            d = prim.Sum((value, prim.Product((-1, acc))))
            t = prim.Call(prim.Variable(_EXP[self.math]),
                          (prim.Product((-1, prim.Call(prim.Variable("fabs"), (d,)))),))
            pos = prim.Comparison(d, ">", 0)
            nonpos = prim.Comparison(d, "<=", 0)
            one = self.dtype.type(1)
            if self.scalar:
                # s = (d > 0 ? s : 1) * t' + (d > 0 ? 1 : s), t' = exp(-inf) = 0 where d is
                # NaN (the select on the argument: the exp is not skipped by a branch)
                first = [] if scratch is None else [(scratch, d)]
                if scratch is not None:
                    d, pos = scratch, prim.Comparison(scratch, ">", 0)
                tt = prim.Call(t.function, (prim.If(
                    prim.Comparison(d, "!=", d), self.dtype.type(-np.inf),
                    prim.Product((-1, prim.Call(prim.Variable("fabs"), (d,))))),))
                return [
                    *first,
                    (aux, prim.Sum((prim.Product((prim.If(pos, aux, one), tt)),
                                    prim.If(pos, one, aux)))),
                    (acc, prim.If(prim.LogicalOr((pos, prim.Comparison(raw, "!=", raw))),
                                  value, acc)),
                ]
            return [
                (aux, prim.If(pos, prim.Sum((prim.Product((aux, t)), one)),
                              prim.If(nonpos, prim.Sum((aux, t)), aux))),
                (acc, prim.If(pos, value, prim.If(prim.Comparison(value, "!=", value),
                                                  value, acc))),
            ]
        raise ValueError(f"unknown reduction {k!r}")

    def carried(self, value: Any) -> Any:
        """A term as the accumulator carries it (:attr:`clamps_nan`): NaN as -1."""
        return prim.Call(prim.Variable("fmax"), (value, self.dtype.type(-1)))

    def _clamped_update(self, acc: Any, aux: Any, value: Any, index: Any
                        ) -> list[tuple[Any, Any]]:
        # a NaN term is -1: the minimum by fmin, the first NaN by the strict comparison
        v = self.carried(value)
        new_acc = (acc, prim.Call(prim.Variable("fmin"), (acc, v)))
        if self.kind == "min":
            return [new_acc]
        return [(aux, prim.If(prim.Comparison(v, "<", acc), index, aux)), new_acc]

    # {{{ argmin with the index found once per chunk (NaN carried as -1)

    @property
    def finds_index_lazily(self) -> bool:
        """Whether the lazy argmin of :meth:`lazy_minimum` applies (an argmin that
        :attr:`clamps_nan`)."""
        return self.clamps_nan and self.kind == "argmin"

    def lazy_minimum(self, best: Any, carried: Any) -> list[tuple[Any, Any]]:
        """Lazy argmin, per term of a chunk: ``best`` (started at the accumulator) takes
        the minimum of the chunk's :meth:`carried` terms; no index yet."""
        if not self.finds_index_lazily:
            raise ValueError("the index is found lazily only for an argmin carrying NaN "
                             "as -1")
        return [(best, prim.Call(prim.Variable("fmin"), (best, carried)))]

    def lazy_found(self, best: Any, acc: Any) -> Any:
        """Lazy argmin, once per chunk: whether the chunk holds a term below the
        accumulator (then, and only then, its index is looked for)."""
        return prim.Comparison(best, "<", acc)

    def lazy_index(self, aux: Any, carried: Any, best: Any, index: Any
                   ) -> list[tuple[Any, Any]]:
        """Lazy argmin, per term of a chunk that :meth:`lazy_found`, taken from the last
        term to the first: ``aux`` becomes the index of the first term equal to ``best``
        (the first NaN's, as -1 is below every other term); the accumulator then takes
        ``best``."""
        return [(aux, prim.If(prim.Comparison(carried, "==", best), index, aux))]

    # }}}

    # {{{ log-sum-exp over chunks of terms

    def chunk_max(self, acc: Any, value: Any) -> list[tuple[Any, Any]]:
        """Chunked log-sum-exp, first step, per term of a chunk: ``acc``, the running
        maximum, takes the term (``fmax``: a NaN term leaves it, it reaches the sum)."""
        return [(acc, prim.Call(prim.Variable("fmax"), (acc, value)))]

    def chunk_rescale(self, acc: Any, aux: Any, shift: Any, new: Any
                      ) -> list[tuple[Any, Any]]:
        """Chunked log-sum-exp, once per chunk after :meth:`chunk_max`: the sum ``aux``
        of ``exp(v - shift)`` moved to the new shift ``new``: the maximum, held above
        the dtype's lowest finite value (a maximum of ``-inf`` leaves a sum of 0, and the
        shift never falls below it, so that no rescaling overflows), 0 for a maximum of
        ``+inf`` (no ``inf - inf``)."""
        lowest = self.dtype.type(np.finfo(self.dtype).min)
        scale = prim.Call(prim.Variable(_EXP[self.math]),
                          (prim.Sum((shift, prim.Product((-1, new)))),))
        return [
            (new, prim.If(prim.Comparison(acc, "==", self.dtype.type(np.inf)),
                          self.dtype.type(0), prim.Call(prim.Variable("fmax"), (acc, lowest)))),
            (aux, prim.Product((aux, scale))),
            (shift, new),
        ]

    @property
    def chunk_start(self) -> Any:
        """The initial shift of chunked log-sum-exp (see :meth:`chunk_rescale`)."""
        return self.dtype.type(np.finfo(self.dtype).min)

    def chunk_term(self, aux: Any, shift: Any, value: Any) -> list[tuple[Any, Any]]:
        """Chunked log-sum-exp, per term after :meth:`chunk_rescale`: one ``exp`` and one
        addition (the argument is at most 0; a NaN term makes the sum NaN). The result
        is :meth:`result` of (``shift``, ``aux``)."""
        return [(aux, prim.Sum((aux, prim.Call(prim.Variable(_EXP[self.math]), (
            prim.Sum((value, prim.Product((-1, shift)))),)))))]

    # }}}

    def combine(self, acc: Any, aux: Any, acc2: Any, aux2: Any) -> list[tuple[Any, Any]]:
        """Fold a partial accumulator (``acc2``, ``aux2``) into (``acc``, ``aux``) (scalars;
        for two-pass schemes)."""
        k = self.kind
        if k == "sum":
            return [(acc, prim.Sum((acc, acc2)))]
        if self.clamps_nan:  # NaN is -1, below every term: the smaller, ties by index
            new_acc = (acc, prim.Call(prim.Variable("fmin"), (acc, acc2)))
            if k == "min":
                return [new_acc]
            take = prim.LogicalOr((prim.Comparison(acc2, "<", acc), prim.LogicalAnd((
                prim.Comparison(acc2, "==", acc), prim.Comparison(aux2, "<", aux)))))
            return [(aux, prim.If(take, aux2, aux)), new_acc]
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
                s, prim.Call(prim.Variable(_EXP[self.math]),
                             (prim.Sum((m, prim.Product((-1, mx)))),)))))

        return [
            (aux, prim.If(nan, aux, prim.If(inf, prim.Sum((aux, aux2)),
                                            prim.Sum((scaled(aux, acc), scaled(aux2, acc2)))))),
            (acc, prim.If(prim.Comparison(acc2, "!=", acc2), acc2, prim.If(nan, acc, mx))),
        ]

    def result(self, acc: Any, aux: Any) -> Any:
        """The reduced value from the accumulator."""
        if self.clamps_nan:
            return prim.If(prim.Comparison(acc, "<", 0), prim.NaN(self.dtype.type), acc)
        if self.kind == "logsumexp":
            total = prim.Sum((acc, prim.Call(prim.Variable(_LOG[self.math]), (aux,))))
            return prim.Product((self.dtype.type(LN2), total)) if is_base2(
                self.math) else total
        return acc


# }}}

# vim: foldmethod=marker
