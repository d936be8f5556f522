"""A Genred-style builder for kernel reductions: ``a_i = Red_j F(x_i, y_j, p)``.

:func:`kernel_reduction` turns a formula over *i-variables* (one row per output point),
*j-variables* (one row per reduced point) and *parameters* into a
:class:`~feinsum.BatchedEinsum` with formula operands, which every other part of feinsum
(evaluation, lowering, recipes, the database) understands::

    e = kernel_reduction("exp(-sqdist(x, y) / (2*s**2)) * b",
                         i_vars={"x": 3}, j_vars={"y": 3, "b": 1}, params={"s": 1})

The formula language works on *vectors*: a variable of dimension ``D > 1`` is a vector
(KeOps' ``Vi(x, D)``), of dimension 1 a scalar. Arithmetic (``+ - * / **``) and the
functions of :data:`feinsum.spec.formulas.FUNCTIONS` act elementwise, broadcasting scalars;
``x[k]`` takes component ``k``; these reduce a vector to a scalar:

=====================  =========================================
``sqdist(a, b)``       ``sum_d (a_d - b_d)^2``
``sqnorm(a)``          ``sum_d a_d^2`` (also ``sqnorm2``)
``norm(a)``            ``sqrt(sqnorm(a))``
``dot(a, b)``          ``sum_d a_d b_d``
``sum(a)``             ``sum_d a_d``
=====================  =========================================

**Vector results.** A formula whose value is a vector of dimension ``E`` (a ``b_j`` in
``R^E``) gives an *extra output index* ``e`` of length ``E``: the output is ``(M, E)``,
as in KeOps. When the formula is a product of scalar factors and one j- or i-variable
(``K(x_i, y_j) * b_j``), that variable becomes its own operand (``"ij,je->ie"``), so a
recipe evaluates the kernel once for all ``E`` columns.

**Shapes.** i-variables are ``(M, D)`` arrays (``(M,)`` when ``D = 1``), j-variables
``(N, D)``, parameters 0-d (``D = 1``) or ``(D,)``; ``M`` and ``N`` stay length symbols
(runtime sizes; :meth:`~feinsum.BatchedEinsum.with_lengths` fixes them).

**Reductions.** ``sum``, ``min``, ``max``, ``logsumexp``, and ``argmin``/``argmax``/
``min_argmin``/``max_argmax``: the last four make the same spec, whose outputs are the
extremum (``out0``) and its int32 index (``out0_index``; ties go to the smallest index).
``axis="j"`` reduces over the j-variables (one result per i), ``axis="i"`` over the
i-variables (one result per j).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pymbolic.primitives as prim

from feinsum.errors import FormulaError, SpecificationError
from feinsum.spec.model import Array, BatchedEinsum, BlockSparse, array, formula

#: builder reduction names and the spec reduction each makes
REDUCTIONS: dict[str, str] = {
    "sum": "sum", "min": "min", "max": "max", "logsumexp": "logsumexp",
    "argmin": "argmin", "argmax": "argmax", "min_argmin": "argmin", "max_argmax": "argmax",
}
_VECTOR_REDUCERS = {"sqdist", "sqnorm", "sqnorm2", "norm", "dot", "sum"}
_C = prim.Variable("feinsum_component")  # placeholder of the vector component


class _Builder:
    def __init__(self, i_vars: Mapping[str, int], j_vars: Mapping[str, int],
                 params: Mapping[str, int], dtype: Any, lengths: tuple[str, str]) -> None:
        from feinsum.spec.formulas import FUNCTIONS

        self.functions = FUNCTIONS
        self.arrays: dict[str, Array] = {}
        self.dims: dict[str, int] = {}
        self.role: dict[str, str] = {}
        self.nfeature = 0
        for role, vars_, n in (("i", i_vars, lengths[0]), ("j", j_vars, lengths[1]),
                               ("p", params, None)):
            for name, d in vars_.items():
                if name in self.arrays:
                    raise SpecificationError(f"variable {name!r} is declared twice")
                if name in ("i", "j", "e") or name in FUNCTIONS or name in _VECTOR_REDUCERS:
                    raise SpecificationError(f"{name!r} is reserved; rename the variable")
                d = int(d)
                if d < 1:
                    raise SpecificationError(f"variable {name!r}: dimension {d} < 1")
                if n is None:
                    shape: tuple[Any, ...] = () if d == 1 else (d,)
                else:
                    shape = (n,) if d == 1 else (n, d)
                self.arrays[name] = array(name, shape, dtype)
                self.dims[name] = d
                self.role[name] = role

    # {{{ translation: expression -> (scalar expression with placeholder, dimension)

    def _access(self, name: str, comp: Any) -> Any:
        role, d = self.role[name], self.dims[name]
        idx: tuple[Any, ...] = ()
        if role != "p":
            idx = (prim.Variable(role),)
        if d > 1:
            idx = (*idx, comp)
        return prim.Subscript(prim.Variable(name), idx) if idx else prim.Variable(name)

    def tr(self, expr: Any) -> tuple[Any, int]:
        if isinstance(expr, (int, float, np.integer, np.floating)):
            return expr, 1
        if isinstance(expr, prim.Variable):
            if expr.name not in self.arrays:
                raise FormulaError(f"unknown variable {expr.name!r}; declare it in i_vars, "
                                   "j_vars or params")
            return self._access(expr.name, _C), self.dims[expr.name]
        if isinstance(expr, prim.Subscript):
            agg = expr.aggregate
            if not isinstance(agg, prim.Variable) or agg.name not in self.arrays:
                raise FormulaError(f"{expr}: only declared variables can be indexed")
            (k,) = expr.index_tuple
            if not isinstance(k, (int, np.integer)) or not 0 <= k < self.dims[agg.name]:
                raise FormulaError(f"{expr}: component index out of range")
            if self.dims[agg.name] == 1:
                return self._access(agg.name, _C), 1
            # formulas index arrays with indices only: select the component in a sum
            from loopy.symbolic import Reduction

            d = self._feature()
            pick = prim.If(prim.Comparison(prim.Variable(d), "==", int(k)),
                           self._access(agg.name, prim.Variable(d)), 0)
            return Reduction("sum", (d,), pick), 1
        if isinstance(expr, (prim.Sum, prim.Product)):
            parts = [self.tr(c) for c in expr.children]
            return type(expr)(tuple(p for p, _ in parts)), self._dim(parts, expr)
        if isinstance(expr, prim.Quotient):
            a, b = self.tr(expr.numerator), self.tr(expr.denominator)
            return prim.Quotient(a[0], b[0]), self._dim([a, b], expr)
        if isinstance(expr, prim.Power):
            a, b = self.tr(expr.base), self.tr(expr.exponent)
            return prim.Power(a[0], b[0]), self._dim([a, b], expr)
        if isinstance(expr, prim.Call):
            fn = expr.function.name if isinstance(expr.function, prim.Variable) else None
            args = [self.tr(p) for p in expr.parameters]
            if fn in _VECTOR_REDUCERS:
                return self._reduce(fn, args, expr), 1
            if fn not in self.functions:
                raise FormulaError(f"unknown function {fn!r} in {expr}")
            return prim.Call(expr.function, tuple(a for a, _ in args)), self._dim(args, expr)
        raise FormulaError(f"{expr}: {type(expr).__name__} is not supported in formulas")

    def _feature(self) -> str:
        self.nfeature += 1
        return f"d{self.nfeature - 1}"

    @staticmethod
    def _dim(parts: list[tuple[Any, int]], where: Any) -> int:
        dims = {d for _, d in parts if d > 1}
        if len(dims) > 1:
            raise FormulaError(f"{where}: vectors of dimensions {sorted(dims)} do not match")
        return dims.pop() if dims else 1

    def _reduce(self, fn: str, args: list[tuple[Any, int]], where: Any) -> Any:
        from loopy.symbolic import Reduction, SubstitutionMapper
        from pymbolic.mapper.substitutor import make_subst_func

        want = 2 if fn in ("sqdist", "dot") else 1
        if len(args) != want:
            raise FormulaError(f"{where}: {fn} takes {want} argument(s)")
        if fn == "sqdist":
            diff = prim.Sum((args[0][0], prim.Product((-1, args[1][0]))))
            body: Any = prim.Power(diff, 2)
        elif fn == "dot":
            body = prim.Product((args[0][0], args[1][0]))
        elif fn in ("sqnorm", "sqnorm2", "norm"):
            body = prim.Power(args[0][0], 2)
        else:
            body = args[0][0]
        dim = self._dim(args, where)
        if dim == 1:
            result = body
        else:
            d = self._feature()
            body = SubstitutionMapper(make_subst_func({_C.name: prim.Variable(d)}))(body)
            result = Reduction("sum", (d,), body)
        return prim.Call(prim.Variable("sqrt"), (result,)) if fn == "norm" else result

    # }}}


def _factors(expr: Any) -> list[Any]:
    if isinstance(expr, prim.Product):
        return [f for c in expr.children for f in _factors(c)]
    return [expr]


def kernel_reduction(
    formula_text: str | Any,
    *,
    i_vars: Mapping[str, int],
    j_vars: Mapping[str, int],
    params: Mapping[str, int] | None = None,
    reduction: str = "sum",
    axis: str = "j",
    dtype: Any = np.float32,
    lengths: tuple[str, str] = ("M", "N"),
    block_sparse: bool = False,
) -> BatchedEinsum:
    """The kernel reduction ``Red_{axis} formula`` as a :class:`~feinsum.BatchedEinsum`
    (see the module docstring for the formula language, shapes and outputs).

    ``block_sparse=True`` restricts the reduction to KeOps-format ranges given at run
    time (:mod:`feinsum.reductions.block_sparse`, :mod:`feinsum.reductions.ranges`).

    >>> e = kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
    ...                      j_vars={"y": 3, "b": 4}, params={"g": 1})
    >>> e.subscripts, dict(e.lengths)
    ('ij,je->ie', {'i': 'M', 'e': 4, 'j': 'N'})
    """
    import pymbolic

    if reduction not in REDUCTIONS:
        raise SpecificationError(
            f"unknown reduction {reduction!r}; choose one of {', '.join(REDUCTIONS)}")
    if axis not in ("i", "j"):
        raise SpecificationError(f"axis must be 'i' or 'j', got {axis!r}")
    b = _Builder(i_vars, j_vars, params or {}, dtype, lengths)
    try:
        expr = pymbolic.parse(formula_text) if isinstance(formula_text, str) else formula_text
    except Exception as exc:
        raise FormulaError(f"cannot parse {formula_text!r}: {exc}") from exc
    value, dim = b.tr(expr)
    out, red = ("i", "j") if axis == "j" else ("j", "i")
    e_idx = prim.Variable("e")
    from loopy.symbolic import SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    if dim > 1:
        value = SubstitutionMapper(make_subst_func({_C.name: e_idx}))(value)
    out_indices = (out, "e") if dim > 1 else (out,)

    # a plain vector variable factor becomes its own operand (K(i, j) * b[j, e])
    factors = _factors(value)
    plain: list[tuple[Array, tuple[str, ...]]] = []
    rest = []
    for f in factors:
        role = b.role.get(str(getattr(getattr(f, "aggregate", None), "name", "")))
        if (not plain and len(factors) > 1 and isinstance(f, prim.Subscript)
                and role in ("i", "j")
                and f.index_tuple == ((prim.Variable(role), e_idx) if dim > 1
                                      else (prim.Variable(role),))):
            plain.append((b.arrays[str(f.aggregate)], tuple(str(v) for v in f.index_tuple)))
        else:
            rest.append(f)
    body: Any = rest[0] if len(rest) == 1 else prim.Product(tuple(rest)) if rest else 1
    from loopy.symbolic import get_dependencies

    deps = get_dependencies(body)
    used = [k for k in ("i", "j", "e") if k in deps]
    for k in ("i", "j"):  # the formula carries both point clouds
        if k not in used:
            used.insert(("i", "j").index(k), k)
    used_arrays = [a for n, a in b.arrays.items() if n in deps]
    f = formula("F", tuple(used), body, used_arrays)
    operands: list[Any] = [f]
    in_indices: list[tuple[str, ...]] = [tuple(used)]
    for a, idx in plain:
        operands.append(a)
        in_indices.append(idx)
    bs = BlockSparse(out, red) if block_sparse else None
    return BatchedEinsum(tuple(in_indices), out_indices, ((*((o,) for o in operands),),),
                         REDUCTIONS[reduction], bs)  # type: ignore[arg-type]
