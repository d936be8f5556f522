"""Bounded-memory numpy evaluation of a batched einsum: the answer kernels are checked against.

:func:`evaluate` has the reference kernel's semantics (:mod:`feinsum.lowering.kernel`):

* each row's product is computed in numpy's result type of its factors, a formula
  in its own result type (its arrays cast to it, its float constants of that type);
* ``min``/``max`` propagate NaN; ``argmin``/``argmax`` return the first index of
  the extremum (a NaN counts as the extremum); indices are int32;
* ``logsumexp`` is max-shifted (no overflow); all ``-inf`` gives ``-inf``.

Memory stays bounded: sums of plain arrays go to :func:`numpy.einsum` (whose
intermediates ``optimize=True`` keeps within the inputs' size); everything else is
evaluated block by block over the (output x reduction) index space, each block
holding at most about :data:`BLOCK_ELEMENTS` elements per intermediate (feature
axes of formulas included). Output indices are split first, in order; reduction
indices only when a single output element's reduction does not fit, the partial
results then being combined.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np
import pymbolic.primitives as prim

from feinsum.errors import EvaluationError, FeinsumError
from feinsum.lowering.kernel import typed_constant
from feinsum.spec.formulas import variable_name
from feinsum.spec.model import INDEX_REDUCTIONS, Array, BatchedEinsum, Formula

#: Elements (of the output block times the reduction indices times feature axes) one
#: block may hold: 2**24 float64 numbers are 128 MiB.
BLOCK_ELEMENTS = 2**24

_erf = np.vectorize(math.erf, otypes=[np.float64])

#: numpy equivalents of :data:`feinsum.spec.formulas.FUNCTIONS` (C semantics: fmin/fmax
#: ignore NaN, as in OpenCL).
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh,
    "log1p": np.log1p, "expm1": np.expm1, "rsqrt": lambda x: 1 / np.sqrt(x),
    "erf": lambda x: _erf(x).astype(np.result_type(x, np.float32)),
    "floor": np.floor, "ceil": np.ceil, "fmin": np.fmin, "fmax": np.fmax,
    "min": np.minimum, "max": np.maximum,
}

#: Reductions over formula feature indices (max/min propagate NaN, as feinsum_max/min).
_FEATURE_REDUCTIONS: dict[str, Callable[..., Any]] = {
    "sum": np.sum, "product": np.prod, "max": np.max, "min": np.min,
}

_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
    "==": np.equal, "!=": np.not_equal,
}


# {{{ input validation


def _bind_arrays(
    e: BatchedEinsum, arrays: Mapping[str, Any]
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Check *arrays* against the spec; return them (in the spec's dtypes) and the
    values of the length symbols, read off their shapes."""
    if not isinstance(arrays, Mapping):
        raise EvaluationError(
            f"arrays must be a mapping from array name to numpy array, got {type(arrays).__name__}"
        )
    values: dict[str, np.ndarray] = {}
    symbols: dict[str, tuple[int, str]] = {}
    for a in e.arrays:
        if a.name not in arrays:
            given = ", ".join(sorted(map(str, arrays))) or "none"
            raise EvaluationError(
                f"missing array {a.name!r} (shape {_shape_text(a)}, {a.dtype}); pass it as "
                f"arrays[{a.name!r}] (arrays given: {given})"
            )
        v = np.asarray(arrays[a.name])
        if v.ndim != a.ndim:
            raise EvaluationError(
                f"array {a.name!r} has rank {v.ndim} (shape {v.shape}) but the specification "
                f"gives it rank {a.ndim} (shape {_shape_text(a)}); pass an array of that shape"
            )
        for k, (n, got) in enumerate(zip(a.shape, v.shape, strict=True)):
            if isinstance(n, int):
                if got != n:
                    raise EvaluationError(
                        f"array {a.name!r} has shape {v.shape} but the specification gives "
                        f"{_shape_text(a)} (axis {k} must have length {n})"
                    )
            elif n in symbols and symbols[n][0] != got:
                first, where = symbols[n]
                raise EvaluationError(
                    f"length {n!r} is {first} in {where} but {got} in array {a.name!r} "
                    f"(axis {k}); arrays sharing a length symbol must agree on it"
                )
            else:
                symbols.setdefault(n, (got, f"array {a.name!r} (axis {k})"))
        if _kind(v.dtype) != _kind(a.dtype):
            raise EvaluationError(
                f"array {a.name!r} has dtype {v.dtype} but the specification gives {a.dtype}; "
                f"convert it, e.g. arrays[{a.name!r}].astype(np.{a.dtype.name})"
            )
        values[a.name] = v if v.dtype == a.dtype else v.astype(a.dtype)
    return values, {n: got for n, (got, _) in symbols.items()}


def _kind(dt: np.dtype[Any]) -> str:
    return {"i": "integer", "u": "integer", "b": "boolean", "f": "real", "c": "complex"}.get(
        dt.kind, dt.kind
    )


def _shape_text(a: Array) -> str:
    return "(" + ", ".join(map(str, a.shape)) + ("," if a.ndim == 1 else "") + ")"


# }}}


# {{{ formulas


class _Block:
    """One block of the (output x reduction) index space.

    Values computed on it are numpy arrays with one axis per entry of ``axes`` (the
    block's length, or 1 where the value does not depend on the index), followed by
    one axis per enclosing feature reduction; or numpy scalars."""

    def __init__(self, arrays: Mapping[str, np.ndarray], axes: tuple[str, ...],
                 slices: Mapping[str, slice],
                 formulas: Mapping[tuple[str, tuple[str, ...]], _FormulaEval]) -> None:
        self.arrays = arrays
        self.axes = axes
        self.slices = slices
        self.formulas = formulas
        self._cache: dict[tuple[str, tuple[str, ...]], Any] = {}

    def place(self, block: np.ndarray, positions: list[int], ndim: int) -> np.ndarray:
        """*block*, whose axis k belongs at axis ``positions[k]`` of an *ndim*-axis value
        (a repeated position takes the diagonal)."""
        distinct = sorted(set(positions))
        if positions != distinct:
            letters = {p: chr(ord("a") + k) for k, p in enumerate(distinct)}
            block = np.einsum("".join(letters[p] for p in positions) + "->"
                              + "".join(letters[p] for p in distinct), block)
        shape = [1] * ndim
        for p, n in zip(distinct, block.shape, strict=True):
            shape[p] = n
        return block.reshape(shape)

    def array(self, a: Array, indices: tuple[str, ...], dtype: np.dtype[Any]) -> Any:
        """``a[indices]`` on this block (indices are einsum indices)."""
        v = self.arrays[a.name]
        v = v[tuple(self.slices[i] for i in indices)].astype(dtype, copy=False)
        if v.ndim == 0:
            return v[()]
        return self.place(v, [self.axes.index(i) for i in indices], len(self.axes))

    def formula(self, f: Formula, indices: tuple[str, ...]) -> Any:
        """The formula applied to *indices* (einsum indices) on this block, cached."""
        key = (f.name, indices)
        if key not in self._cache:
            self._cache[key] = self.formulas[key](self)
        return self._cache[key]


class _FormulaEval:
    """Evaluates one formula application (a formula on given einsum indices) on blocks."""

    def __init__(self, f: Formula, indices: tuple[str, ...], symbols: Mapping[str, int],
                 dtype: np.dtype[Any]) -> None:
        from feinsum.spec.formulas import feature_indices

        self.arrays = {a.name: a for a in f.arrays}
        self.expression = f.expression
        self.args = dict(zip(f.arguments, indices, strict=True))
        self.dtype = dtype
        self.features = {
            d: n if isinstance(n, int) else symbols[n] for d, n in feature_indices(f).items()
        }

    def __call__(self, block: _Block) -> Any:
        self.block = block
        with np.errstate(all="ignore"):
            value = self.rec(self.expression, ())
        if np.ndim(value) == 0:
            return np.asarray(value).astype(self.dtype)[()]
        return value.astype(self.dtype, copy=False)

    def _axis(self, name: str, scope: tuple[str, ...]) -> tuple[int, slice, int]:
        """(axis, slice, full length) of a formula argument or feature index."""
        if name in scope:
            return len(self.block.axes) + scope.index(name), slice(None), self.features[name]
        idx = self.args[name]
        sl = self.block.slices[idx]
        return self.block.axes.index(idx), sl, sl.stop - sl.start

    def rec(self, expr: Any, scope: tuple[str, ...]) -> Any:
        from loopy.symbolic import Reduction

        from feinsum.spec.formulas import reduction_name

        ndim = len(self.block.axes) + len(scope)
        if isinstance(expr, (int, float, complex, np.number)):
            return typed_constant(expr, self.dtype)
        if isinstance(expr, prim.Variable):
            if expr.name in self.arrays:
                return self.block.arrays[expr.name].astype(self.dtype)[()]
            # an index used as a value: int32, as loopy's inames
            axis, sl, n = self._axis(expr.name, scope)
            start = sl.start or 0
            return self.block.place(np.arange(start, start + n, dtype=np.int32), [axis], ndim)
        if isinstance(expr, prim.Subscript):
            places = [self._axis(variable_name(i), scope) for i in expr.index_tuple]
            v = self.block.arrays[variable_name(expr.aggregate)][tuple(sl for _, sl, _ in places)]
            return self.block.place(v.astype(self.dtype, copy=False), [p for p, _, _ in places],
                                    ndim)
        if isinstance(expr, Reduction):
            inner = (*scope, *expr.inames)
            value = np.asarray(self.rec(expr.expr, inner))
            shape = list(value.shape) if value.ndim else [1] * (ndim + len(expr.inames))
            for d in expr.inames:
                shape[len(self.block.axes) + inner.index(d)] = self.features[d]
            axes = tuple(range(ndim, ndim + len(expr.inames)))
            reduce = _FEATURE_REDUCTIONS[reduction_name(expr)]
            return reduce(np.broadcast_to(value, shape), axis=axes)
        if isinstance(expr, prim.Sum):
            return _fold(np.add, [self.rec(c, scope) for c in expr.children])
        if isinstance(expr, prim.Product):
            return _fold(np.multiply, [self.rec(c, scope) for c in expr.children])
        if isinstance(expr, prim.Quotient):
            return np.true_divide(self.rec(expr.numerator, scope),
                                  self.rec(expr.denominator, scope))
        if isinstance(expr, prim.Power):
            return np.power(self.rec(expr.base, scope), self.rec(expr.exponent, scope))
        if isinstance(expr, prim.Call):
            fn = _FUNCTIONS[variable_name(expr.function)]
            return fn(*(self.rec(p, scope) for p in expr.parameters))
        if isinstance(expr, prim.Comparison):
            return _COMPARISONS[expr.operator](self.rec(expr.left, scope),
                                               self.rec(expr.right, scope))
        if isinstance(expr, prim.If):
            return np.where(self.rec(expr.condition, scope), self.rec(expr.then, scope),
                            self.rec(expr.else_, scope))
        raise FeinsumError(f"cannot evaluate {type(expr).__name__} ({expr}) in a formula")


def _fold(fn: Callable[[Any, Any], Any], values: list[Any]) -> Any:
    result = values[0]
    for v in values[1:]:
        result = fn(result, v)
    return result


# }}}


# {{{ reductions


def _reduce(kind: str, value: np.ndarray, axes: tuple[int, ...], dtype: np.dtype[Any],
            offset: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Reduce *value* over *axes*: (value, int32 index or None). *offset* is the first
    reduction index of the block (argmin/argmax)."""
    if not axes:
        return value.astype(dtype, copy=False), None
    if kind == "sum":
        return value.sum(axis=axes, dtype=dtype), None
    if kind in ("min", "max"):
        return (value.min if kind == "min" else value.max)(axis=axes).astype(dtype), None
    if kind in INDEX_REDUCTIONS:
        (axis,) = axes
        arg = (np.argmin if kind == "argmin" else np.argmax)(value, axis=axis)
        best = np.take_along_axis(value, np.expand_dims(arg, axis), axis).squeeze(axis)
        return best.astype(dtype), (arg + offset).astype(np.int32)
    # logsumexp, shifted by the maximum where it is finite
    value = value.astype(dtype, copy=False)
    m = value.max(axis=axes, keepdims=True)
    shift = np.where(np.isfinite(m), m, 0).astype(dtype)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = np.exp(value - shift).sum(axis=axes)
        return (np.log(s) + shift.squeeze(axis=axes)).astype(dtype), None


def _combine(kind: str, acc: tuple[np.ndarray, np.ndarray | None],
             new: tuple[np.ndarray, np.ndarray | None]) -> tuple[np.ndarray, np.ndarray | None]:
    """Combine the partial results of two blocks of reduction indices (*acc* first)."""
    (a, ai), (b, bi) = acc, new
    if kind == "sum":
        return a + b, None
    if kind == "min":
        return np.minimum(a, b), None
    if kind == "max":
        return np.maximum(a, b), None
    if kind == "logsumexp":
        with np.errstate(invalid="ignore"):  # NaN and inf - inf propagate as NaN
            return np.logaddexp(a, b), None
    better = (b < a) if kind == "argmin" else (b > a)
    if a.dtype.kind == "f":
        better = (better & ~np.isnan(a)) | (np.isnan(b) & ~np.isnan(a))
    return np.where(better, b, a), np.where(better, cast(np.ndarray, bi), cast(np.ndarray, ai))


# }}}


# {{{ evaluation


def _block_sizes(lengths: list[int], budget: int) -> list[int]:
    """Block length per axis (in splitting priority order) so the block holds at most
    *budget* elements (at least one per axis)."""
    sizes = [max(1, n) for n in lengths]  # a zero length still needs a nonzero step
    for k in range(len(sizes)):
        if math.prod(sizes) <= budget:
            break
        sizes[k] = max(1, budget // (math.prod(sizes) // sizes[k]))
    return sizes


def _is_plain_sum_row(e: BatchedEinsum, r: int) -> bool:
    return e.reduction == "sum" and all(isinstance(f, Array) for entry in e.arguments[r]
                                        for f in entry)


def _einsum_row(e: BatchedEinsum, r: int, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    from feinsum.spec.dtypes import compute_dtype

    dtype = compute_dtype(e, r)
    letters = {i: chr(ord("a") + k) if k < 26 else chr(ord("A") + k - 26)
               for k, i in enumerate(e.indices)}
    operands = [
        _fold(np.multiply, [arrays[f.name].astype(dtype, copy=False) for f in entry])
        for entry in e.arguments[r]
    ]
    spec = ",".join("".join(letters[i] for i in idx) for idx in e.in_indices)
    spec += "->" + "".join(letters[i] for i in e.out_indices)
    return np.asarray(np.einsum(spec, *operands, optimize=True))


def evaluate(
    e: BatchedEinsum, arrays: Mapping[str, Any], *, block_elements: int = BLOCK_ELEMENTS
) -> dict[str, np.ndarray]:
    """Evaluate *e* on *arrays* (name -> numpy array) with numpy, in bounded memory.

    Returns ``{"out0": ..., "out1": ...}`` (and ``"out{r}_index"`` for argmin/argmax).
    Length symbols take their values from the arrays' shapes. Raises
    :class:`~feinsum.EvaluationError` (naming the array) for a missing array, a wrong
    rank or shape, a length symbol the arrays disagree on, or a dtype of the wrong
    kind; an array of the right kind but another precision is converted.
    *block_elements* bounds the elements of one block (see the module docstring).
    """
    if e.block_sparse is not None:
        from feinsum.lowering.kernel import _block_sparse_module

        return dict(_block_sparse_module().evaluate_block_sparse(e, arrays))

    from feinsum.lowering.reduction_updates import neutral_value
    from feinsum.spec.dtypes import check_reduction_dtypes, compute_dtype, formula_dtype
    from feinsum.spec.formulas import feature_indices

    check_reduction_dtypes(e)
    values, symbols = _bind_arrays(e, arrays)
    lengths = {i: n if isinstance(n, int) else symbols[n] for i, n in e.lengths.items()}
    out_shape = tuple(lengths[i] for i in e.out_indices)
    results: dict[str, np.ndarray] = {}
    general: list[int] = []
    for r in range(e.nrows):
        if _is_plain_sum_row(e, r):
            results[f"out{r}"] = _einsum_row(e, r, values).astype(e.value_dtype(r), copy=False)
        else:
            general.append(r)
            dt = e.value_dtype(r)
            # what an empty reduction gives (a runtime length of 0); blocks overwrite the rest
            results[f"out{r}"] = np.full(out_shape, neutral_value(e.reduction, dt), dt)
            if e.reduction in INDEX_REDUCTIONS:
                results[f"out{r}_index"] = np.full(out_shape, -1, np.int32)
    if not general:
        return _ordered(e, results)

    # {{{ blocks over the (output x reduction) space

    dtypes = {r: compute_dtype(e, r) for r in general}
    evaluators = {(f.name, e.in_indices[c]): _FormulaEval(f, e.in_indices[c], symbols,
                                                          formula_dtype(e, f))
                  for r in general for c, entry in enumerate(e.arguments[r]) for f in entry
                  if isinstance(f, Formula)}
    axes = (*e.out_indices, *e.reduction_indices)
    features = 1
    for f in e.formulas:
        features = max(features, math.prod(
            n if isinstance(n, int) else symbols[n] for n in feature_indices(f).values()))
    sizes = _block_sizes([lengths[i] for i in axes], max(1, block_elements // features))
    starts = [range(0, lengths[i], b) for i, b in zip(axes, sizes, strict=True)]
    nout = len(e.out_indices)
    red_axes = tuple(range(nout, len(axes)))
    for out_starts in itertools.product(*starts[:nout]):
        out_sl = {i: slice(s, min(s + b, lengths[i]))
                  for i, s, b in zip(e.out_indices, out_starts, sizes, strict=False)}
        partial: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        for red_starts in itertools.product(*starts[nout:]):
            red_sl = {i: slice(s, min(s + b, lengths[i])) for i, s, b in
                      zip(e.reduction_indices, red_starts, sizes[nout:], strict=True)}
            block = _Block(values, axes, {**out_sl, **red_sl}, evaluators)
            for r in general:
                dtype = dtypes[r]
                product = _fold(np.multiply, [
                    block.array(f, e.in_indices[c], dtype) if isinstance(f, Array)
                    else np.asarray(block.formula(f, e.in_indices[c])).astype(dtype, copy=False)
                    for c, entry in enumerate(e.arguments[r]) for f in entry
                ])
                shape = tuple(out_sl[i].stop - out_sl[i].start for i in e.out_indices) + tuple(
                    red_sl[i].stop - red_sl[i].start for i in e.reduction_indices)
                new = _reduce(e.reduction, np.broadcast_to(product, shape), red_axes,
                              results[f"out{r}"].dtype, red_starts[0] if red_starts else 0)
                partial[r] = new if r not in partial else _combine(e.reduction, partial[r], new)
        where = tuple(out_sl[i] for i in e.out_indices)
        for r, (value, index) in partial.items():
            results[f"out{r}"][where] = value
            if index is not None:
                results[f"out{r}_index"][where] = index

    # }}}

    return _ordered(e, results)


def _ordered(e: BatchedEinsum, results: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from feinsum.lowering.kernel import output_names

    return {name: results[name] for name in output_names(e)}


# }}}

# vim: foldmethod=marker
