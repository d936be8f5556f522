"""Analysis of formula operands: parsing, name checks, lengths and dtypes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pymbolic.primitives as prim

from feinsum.errors import FormulaError, ShapeError, SpecificationError

if TYPE_CHECKING:
    from feinsum.spec.model import Array, Formula, Length

#: Functions a formula may call (OpenCL and numpy both have them).
FUNCTIONS: frozenset[str] = frozenset(
    {"exp", "log", "sqrt", "abs", "sin", "cos", "tan", "tanh", "sinh", "cosh", "log1p",
     "expm1", "rsqrt", "erf", "floor", "ceil", "fmin", "fmax", "min", "max"}
)
#: Functions whose result is floating point whatever their argument.
TRANSCENDENTAL: frozenset[str] = FUNCTIONS - {"abs", "floor", "ceil", "fmin", "fmax", "min", "max"}
#: Reductions allowed over a feature index inside a formula.
INNER_REDUCTIONS: frozenset[str] = frozenset({"sum", "product", "max", "min"})


def parse_expression(text: str, where: str) -> prim.ExpressionNode:
    """Parse formula text with loopy's parser (``sum(d, ...)`` becomes a reduction)."""
    from loopy.symbolic import parse

    try:
        expr = parse(text)
    except Exception as exc:  # pymbolic raises a variety of parse errors
        raise FormulaError(f"formula {where!r}: cannot parse {text!r}: {exc}") from exc
    return expr  # type: ignore[no-any-return]


def reduction_name(expr: Any) -> str:
    """The name of a loopy Reduction's operation (``sum``, ``max``...)."""
    op = expr.operation
    fallback = type(op).__name__.replace("ReductionOperation", "").lower()
    return str(getattr(op, "name", None) or fallback)


def walk(expr: Any) -> Iterator[Any]:
    """Pre-order walk of a formula expression, reductions included."""
    from loopy.symbolic import Reduction

    yield expr
    if isinstance(expr, Reduction):
        yield from walk(expr.expr)
    elif isinstance(expr, (prim.Sum, prim.Product)):
        for c in expr.children:
            yield from walk(c)
    elif isinstance(expr, (prim.Quotient, prim.FloorDiv, prim.Remainder)):
        yield from walk(expr.numerator)
        yield from walk(expr.denominator)
    elif isinstance(expr, prim.Power):
        yield from walk(expr.base)
        yield from walk(expr.exponent)
    elif isinstance(expr, prim.Call):
        for p in expr.parameters:
            yield from walk(p)
    elif isinstance(expr, prim.Subscript):
        yield from walk(expr.aggregate)
        for i in expr.index_tuple:
            yield from walk(i)
    elif isinstance(expr, (prim.Comparison,)):
        yield from walk(expr.left)
        yield from walk(expr.right)
    elif isinstance(expr, prim.If):
        yield from walk(expr.condition)
        yield from walk(expr.then)
        yield from walk(expr.else_)


def variable_name(expr: Any) -> str:
    """The name of a variable (an array or a called function)."""
    if not isinstance(expr, prim.Variable):
        raise SpecificationError(f"expected a name, got {expr}")
    return expr.name


def check_formula(f: Formula) -> None:
    """Check that a formula only reads its arrays, arguments, bound feature indices and
    known functions, with plain index expressions."""
    from loopy.symbolic import Reduction

    arrays: dict[str, Array] = {}
    for a in f.arrays:
        if arrays.setdefault(a.name, a) != a:
            raise FormulaError(f"formula {f.name!r}: two different arrays named {a.name!r}")
    args = set(f.arguments)
    clash = args & set(arrays)
    if clash:
        raise FormulaError(
            f"formula {f.name!r}: {sorted(clash)[0]!r} is both an index and an array"
        )
    allowed = (int, float, complex, np.number, prim.ExpressionNode)
    if not isinstance(f.expression, allowed):
        raise FormulaError(f"formula {f.name!r}: {f.expression!r} is not an expression")

    def visit(expr: Any, bound: frozenset[str]) -> None:
        if isinstance(expr, (int, float, complex, np.number)):
            return
        if isinstance(expr, Reduction):
            name = reduction_name(expr)
            if name not in INNER_REDUCTIONS:
                raise FormulaError(
                    f"formula {f.name!r}: reduction {name!r} is not allowed inside a formula "
                    f"(allowed: {', '.join(sorted(INNER_REDUCTIONS))})"
                )
            for iname in expr.inames:
                if iname in args or iname in arrays or iname in bound:
                    raise FormulaError(
                        f"formula {f.name!r}: feature index {iname!r} shadows another name"
                    )
            visit(expr.expr, bound | frozenset(expr.inames))
            return
        if isinstance(expr, prim.Variable):
            if expr.name in args or expr.name in bound:
                return
            if expr.name in arrays:
                if arrays[expr.name].ndim:
                    raise FormulaError(
                        f"formula {f.name!r}: array {expr.name!r} of rank {arrays[expr.name].ndim} "
                        "is used without subscripts"
                    )
                return
            raise FormulaError(
                f"formula {f.name!r}: unknown name {expr.name!r}; pass the array in the formula's "
                "arrays (a scalar parameter is a 0-d array)"
            )
        if isinstance(expr, prim.Subscript):
            agg = expr.aggregate
            if not isinstance(agg, prim.Variable) or agg.name not in arrays:
                raise FormulaError(f"formula {f.name!r}: {expr} subscripts an unknown array")
            a = arrays[agg.name]
            if len(expr.index_tuple) != a.ndim:
                raise ShapeError(
                    f"formula {f.name!r}: {expr} uses {len(expr.index_tuple)} indices but "
                    f"{a.name!r} has rank {a.ndim}"
                )
            for i in expr.index_tuple:
                if not isinstance(i, prim.Variable) or not (i.name in args or i.name in bound):
                    raise FormulaError(
                        f"formula {f.name!r}: {expr}: array indices must be plain formula "
                        "arguments or feature indices (no shifts, strides or expressions)"
                    )
            return
        if isinstance(expr, prim.Call):
            fn = expr.function
            if not isinstance(fn, prim.Variable) or fn.name not in FUNCTIONS:
                raise FormulaError(
                    f"formula {f.name!r}: unknown function {fn}; "
                    f"known: {', '.join(sorted(FUNCTIONS))}"
                )
            for p in expr.parameters:
                visit(p, bound)
            return
        if isinstance(expr, (prim.Sum, prim.Product)):
            for c in expr.children:
                visit(c, bound)
            return
        if isinstance(expr, prim.Quotient):
            visit(expr.numerator, bound)
            visit(expr.denominator, bound)
            return
        if isinstance(expr, prim.Power):
            visit(expr.base, bound)
            visit(expr.exponent, bound)
            return
        if isinstance(expr, prim.Comparison):
            visit(expr.left, bound)
            visit(expr.right, bound)
            return
        if isinstance(expr, prim.If):
            visit(expr.condition, bound)
            visit(expr.then, bound)
            visit(expr.else_, bound)
            return
        raise FormulaError(f"formula {f.name!r}: {type(expr).__name__} ({expr}) is not supported")

    visit(f.expression, frozenset())
    index_lengths(f)


def index_lengths(f: Formula) -> dict[str, Length]:
    """Length of every index (argument or feature) the formula's arrays determine."""
    lengths: dict[str, Length] = {}
    for expr in walk(f.expression):
        if isinstance(expr, prim.Subscript):
            name = cast(prim.Variable, expr.aggregate).name
            a = next(a for a in f.arrays if a.name == name)
            for i, n in zip(expr.index_tuple, a.shape, strict=True):
                iname = cast(prim.Variable, i).name  # check_formula: plain indices only
                if lengths.setdefault(iname, n) != n:
                    raise ShapeError(
                        f"formula {f.name!r}: index {iname!r} has lengths {lengths[iname]!r} "
                        f"and {n!r}"
                    )
    from loopy.symbolic import Reduction

    for expr in walk(f.expression):
        if isinstance(expr, Reduction):
            for iname in expr.inames:
                if iname not in lengths:
                    raise ShapeError(
                        f"formula {f.name!r}: feature index {iname!r} indexes no array, so its "
                        "length is unknown"
                    )
    return lengths


def formula_argument_lengths(f: Formula) -> tuple[Length | None, ...]:
    """Lengths of the formula's arguments (``None`` where no array fixes one)."""
    lengths = index_lengths(f)
    return tuple(lengths.get(a) for a in f.arguments)


def feature_indices(f: Formula) -> dict[str, Length]:
    """The formula's inner (feature) indices and their lengths."""
    lengths = index_lengths(f)
    args = set(f.arguments)
    return {i: n for i, n in lengths.items() if i not in args}


def formula_result_dtype(f: Formula) -> np.dtype[Any]:
    """dtype of the formula's value: the arrays' result type, floating if it calls exp/log/..."""
    dtypes = [a.dtype for a in f.arrays]
    for expr in walk(f.expression):
        if isinstance(expr, float):
            dtypes.append(np.dtype(np.float32))
        elif isinstance(expr, complex):
            dtypes.append(np.dtype(np.complex64))
    dt = np.result_type(*dtypes) if dtypes else np.dtype(np.float64)
    calls = {cast(prim.Variable, e.function).name for e in walk(f.expression)
             if isinstance(e, prim.Call)}
    if calls & TRANSCENDENTAL and dt.kind in "iu":
        dt = np.dtype(np.float64)
    if any(isinstance(e, prim.Quotient) for e in walk(f.expression)) and dt.kind in "iu":
        dt = np.dtype(np.float64)
    return dt


def map_formula_arrays(f: Formula, fn: Callable[[Array], Array]) -> Formula:
    """A copy of *f* with every array replaced by ``fn(array)`` (names unchanged)."""
    return replace(f, arrays=tuple(fn(a) for a in f.arrays))
