"""A JSON form of a :class:`~feinsum.BatchedEinsum`: plain data, no code.

Format (``"version": 1``)::

    {"format": "feinsum.BatchedEinsum", "version": 1,
     "in_indices": [["i", "j"], ["j"]], "out_indices": ["i"],
     "reduction": "sum", "block_sparse": null,
     "arrays": [{"name": "A", "shape": [35, "E"], "dtype": "float64", "order": "C"}, ...],
     "formulas": [{"name": "K", "arguments": ["i", "j"],
                   "expression": "exp((-1) * sum(d, (x[i, d] + (-1) * y[j, d])**2))",
                   "arrays": ["x", "y"]}, ...],
     "rows": [[["A"], ["b", "b"]], ...]}

``rows[r][c]`` lists the names of the factors of operand ``c`` of row ``r``. A formula
is stored as expression text and parsed back with loopy's parser
(:func:`feinsum.spec.formulas.parse_expression`), never evaluated. :func:`spec_to_json` checks
that the text parses back to the same expression and raises
:class:`~feinsum.SpecificationError` for constants that text cannot carry (``inf``, numpy
scalars); expressions built by hand as n-ary pymbolic sums come back in the parser's
nested form, with the same canonical key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pymbolic.primitives as prim

from feinsum.errors import FeinsumError, SpecificationError
from feinsum.spec.model import Array, BatchedEinsum, BlockSparse, Formula

FORMAT = "feinsum.BatchedEinsum"
VERSION = 1


# {{{ expressions as text


def constant_text(value: object) -> str:
    """Text of a numeric constant: Python ``int``/``float``/``complex`` (numpy's float64 and
    complex128 count as those); other numpy scalars as ``float32(2.0)`` (not parseable)."""
    if isinstance(value, (bool, np.bool_)):
        raise SpecificationError(f"boolean constant {value!r} in a formula is not supported")
    if isinstance(value, int):
        text = str(int(value))
    elif isinstance(value, float):
        text = repr(float(value))
    elif isinstance(value, complex):
        text = repr(complex(value))
    elif isinstance(value, np.generic):
        return f"{type(value).__name__}({value.item()!r})"
    else:
        raise SpecificationError(f"{value!r} is not a numeric constant")
    return f"({text})" if text.startswith("-") else text


def expression_text(expr: Any, flat: bool = False) -> str:
    """Formula text that loopy's parser reads back as *expr* (every compound operand in
    parentheses). With *flat*, nested sums and products print as one n-ary operation
    (``a + b + c``), the form the canonical text uses."""
    from loopy.symbolic import Reduction

    from feinsum.spec.formulas import reduction_name

    def arg(e: Any, *bare: type) -> str:
        """*e* as an operand: in parentheses unless atomic or one of the *bare* types."""
        s = text(e)
        atomic = (prim.Variable, prim.Subscript, prim.Call, prim.If, Reduction, *bare)
        return s if isinstance(e, atomic) or not isinstance(e, prim.ExpressionNode) else f"({s})"

    def terms(e: Any, cls: Any) -> list[Any]:
        if flat and isinstance(e, cls):
            return [t for c in e.children for t in terms(c, cls)]
        return [e]

    def text(e: Any) -> str:
        if not isinstance(e, prim.ExpressionNode):
            return constant_text(e)
        if isinstance(e, prim.Variable):
            return e.name
        if isinstance(e, prim.Subscript):
            idx = e.index_tuple
            return f"{text(e.aggregate)}[{', '.join(text(i) for i in idx) if idx else '()'}]"
        if isinstance(e, prim.Sum):
            return " + ".join(
                arg(t, prim.Product, prim.Quotient, prim.Power)
                for c in e.children for t in terms(c, prim.Sum))
        if isinstance(e, prim.Product):
            return " * ".join(
                arg(t, prim.Power) for c in e.children for t in terms(c, prim.Product))
        if isinstance(e, prim.Quotient):
            return f"{arg(e.numerator, prim.Power)} / {arg(e.denominator, prim.Power)}"
        if isinstance(e, prim.Power):
            return f"{arg(e.base)}**{arg(e.exponent)}"
        if isinstance(e, prim.Call):
            return f"{text(e.function)}({', '.join(text(p) for p in e.parameters)})"
        if isinstance(e, prim.Comparison):
            bare = (prim.Sum, prim.Product, prim.Quotient, prim.Power)
            return f"{arg(e.left, *bare)} {e.operator} {arg(e.right, *bare)}"
        if isinstance(e, prim.If):
            return f"if({text(e.condition)}, {text(e.then)}, {text(e.else_)})"
        if isinstance(e, Reduction):
            names = [str(i) for i in e.inames]
            inames = names[0] if len(names) == 1 else "(" + ", ".join(names) + ")"
            return f"{reduction_name(e)}({inames}, {text(e.expr)})"
        raise SpecificationError(f"{type(e).__name__} ({e}) cannot be written as formula text")

    return text(expr)


def _normal_form(expr: Any) -> Any:
    """*expr* as nested tuples, sums and products flattened and constants as their text:
    what must survive a trip through text."""
    from loopy.symbolic import Reduction

    from feinsum.spec.formulas import reduction_name

    def terms(e: Any, cls: Any) -> list[Any]:
        return [t for c in e.children for t in terms(c, cls)] if isinstance(e, cls) else [e]

    def visit(e: Any) -> Any:
        if not isinstance(e, prim.ExpressionNode):
            return ("constant", constant_text(e))
        if isinstance(e, prim.Variable):
            return ("variable", e.name)
        if isinstance(e, prim.Subscript):
            return ("subscript", visit(e.aggregate), tuple(visit(i) for i in e.index_tuple))
        if isinstance(e, (prim.Sum, prim.Product)):
            return (type(e).__name__, tuple(visit(t) for t in terms(e, type(e))))
        if isinstance(e, Reduction):
            inames = tuple(str(i) for i in e.inames)
            return ("reduce", reduction_name(e), inames, e.allow_simultaneous, visit(e.expr))
        if isinstance(e, prim.Comparison):
            return ("compare", e.operator, visit(e.left), visit(e.right))
        if isinstance(e, prim.Call):
            return ("call", visit(e.function), tuple(visit(p) for p in e.parameters))
        if isinstance(e, prim.Quotient):
            return ("quotient", visit(e.numerator), visit(e.denominator))
        if isinstance(e, prim.Power):
            return ("power", visit(e.base), visit(e.exponent))
        if isinstance(e, prim.If):
            return ("if", visit(e.condition), visit(e.then), visit(e.else_))
        raise SpecificationError(f"{type(e).__name__} ({e}) cannot be written as text")

    return visit(expr)


# }}}


def spec_to_json(e: BatchedEinsum) -> dict[str, Any]:
    """The JSON-ready form of *e* (a dict of lists, strings and numbers)."""
    from feinsum.spec.formulas import parse_expression

    formulas = []
    for f in e.formulas:
        text = expression_text(f.expression)
        back = parse_expression(text, f.name)
        if _normal_form(back) != _normal_form(f.expression):
            raise SpecificationError(
                f"formula {f.name!r}: its expression {f.expression} cannot be written as text "
                f"that parses back to the same expression (got {back}); use Python numbers "
                "and functions the parser knows"
            )
        formulas.append({
            "name": f.name,
            "arguments": list(f.arguments),
            "expression": text,
            "arrays": [a.name for a in f.arrays],
        })
    bs = e.block_sparse
    return {
        "format": FORMAT,
        "version": VERSION,
        "in_indices": [list(idx) for idx in e.in_indices],
        "out_indices": list(e.out_indices),
        "reduction": e.reduction,
        "block_sparse": None if bs is None else {
            "out_index": bs.out_index, "reduction_index": bs.reduction_index},
        "arrays": [
            {"name": a.name, "shape": list(a.shape), "dtype": a.dtype.name, "order": a.order}
            for a in e.arrays
        ],
        "formulas": formulas,
        "rows": [[[f.name for f in entry] for entry in row] for row in e.arguments],
    }


# {{{ reading


def _bad(where: str, what: str) -> SpecificationError:
    return SpecificationError(f"spec JSON: {where}: {what}")


def _get(d: Mapping[str, Any], key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise _bad(where, f"missing key {key!r}")
    value = d[key]
    if not isinstance(value, typ):
        names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise _bad(f"{where}.{key}", f"expected {names}, got {type(value).__name__} {value!r}")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise _bad(where, f"expected a list of strings, got {value!r}")
    return tuple(value)


def _read_array(d: Any, where: str) -> Array:
    if not isinstance(d, dict):
        raise _bad(where, f"expected an object, got {d!r}")
    shape = _get(d, "shape", list, where)
    for k, n in enumerate(shape):
        if isinstance(n, bool) or not isinstance(n, (int, str)):
            raise _bad(f"{where}.shape[{k}]", f"a length is an integer or a symbol, got {n!r}")
    return Array(
        _get(d, "name", str, where), tuple(shape), _get(d, "dtype", str, where),
        _get(d, "order", str, where),
    )


def spec_from_json(d: Mapping[str, Any] | str) -> BatchedEinsum:
    """Read back what :func:`spec_to_json` wrote (a dict, or its JSON text).

    Raises :class:`~feinsum.SpecificationError` (naming the offending field) on malformed
    input.
    """
    if isinstance(d, str):
        try:
            d = json.loads(d)
        except json.JSONDecodeError as exc:
            raise SpecificationError(f"spec JSON: not valid JSON: {exc}") from exc
    if not isinstance(d, Mapping):
        raise _bad("top level", f"expected an object, got {type(d).__name__}")
    if d.get("format") != FORMAT:
        raise _bad("format", f"expected {FORMAT!r}, got {d.get('format')!r}")
    version = d.get("version")
    if version != VERSION:
        raise _bad("version", f"unsupported version {version!r} (this feinsum reads {VERSION})")
    try:
        return _read(d)
    except SpecificationError:
        raise
    except (FeinsumError, TypeError, ValueError, KeyError) as exc:
        raise SpecificationError(f"spec JSON: {exc}") from exc


def _read(d: Mapping[str, Any]) -> BatchedEinsum:
    from feinsum.spec.formulas import parse_expression

    arrays: dict[str, Array] = {}
    for k, ad in enumerate(_get(d, "arrays", list, "spec")):
        a = _read_array(ad, f"arrays[{k}]")
        if a.name in arrays:
            raise _bad(f"arrays[{k}]", f"array {a.name!r} is listed twice")
        arrays[a.name] = a
    factors: dict[str, Array | Formula] = dict(arrays)
    for k, fd in enumerate(_get(d, "formulas", list, "spec")):
        where = f"formulas[{k}]"
        if not isinstance(fd, dict):
            raise _bad(where, f"expected an object, got {fd!r}")
        name = _get(fd, "name", str, where)
        if name in factors:
            raise _bad(where, f"name {name!r} is used twice")
        members = []
        for member in _strings(_get(fd, "arrays", list, where), f"{where}.arrays"):
            if member not in arrays:
                raise _bad(f"{where}.arrays", f"unknown array {member!r}")
            members.append(arrays[member])
        expr = parse_expression(_get(fd, "expression", str, where), name)
        args = _strings(_get(fd, "arguments", list, where), f"{where}.arguments")
        factors[name] = Formula(name, args, expr, tuple(members))
    rows = []
    for r, row in enumerate(_get(d, "rows", list, "spec")):
        if not isinstance(row, list):
            raise _bad(f"rows[{r}]", f"expected a list of operands, got {row!r}")
        entries = []
        for c, entry in enumerate(row):
            names = _strings(entry, f"rows[{r}][{c}]")
            unknown = [n for n in names if n not in factors]
            if unknown:
                raise _bad(f"rows[{r}][{c}]", f"unknown array or formula {unknown[0]!r}")
            entries.append(tuple(factors[n] for n in names))
        rows.append(tuple(entries))
    in_indices = _get(d, "in_indices", list, "spec")
    bsd = _get(d, "block_sparse", (dict, type(None)), "spec")
    bs = None if bsd is None else BlockSparse(
        _get(bsd, "out_index", str, "block_sparse"),
        _get(bsd, "reduction_index", str, "block_sparse"),
    )
    return BatchedEinsum(
        tuple(_strings(idx, f"in_indices[{c}]") for c, idx in enumerate(in_indices)),
        _strings(_get(d, "out_indices", list, "spec"), "out_indices"),
        tuple(rows),
        _get(d, "reduction", str, "spec"),  # type: ignore[arg-type]
        bs,
    )


# }}}

# vim: foldmethod=marker
