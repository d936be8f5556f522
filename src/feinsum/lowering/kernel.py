"""The reference loopy kernel of a batched einsum: what every recipe receives.

:func:`generate_loopy` follows the contract in ``docs/architecture.md`` ("The
reference kernel"); ``docs/lowering.rst`` writes out the details that contract
leaves open (argument order, reduction operation names, casts). In short, for
``K = exp(-sum(d, (x[i,d]-y[j,d])**2)/(2*s**2))`` times ``b[j]`` summed over ``j``::

    [N, M] -> {[i, j, d]: 0 <= i < N and 0 <= j < M and 0 <= d < 3}

    K(i, j) := exp(-sum(d, (x[i, d] - y[j, d])**2) / (2*s**2))
    op0_r0(i, j) := K(i, j)
    op1_r0(j) := b[j]
    out0[i] = sum(j, op0_r0(i, j)*op1_r0(j))        {id=row0}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pymbolic.primitives as prim

import feinsum.lowering.loopy_setup  # noqa: F401  (loopy must never prompt for input)
from feinsum.errors import SpecificationError
from feinsum.spec.dtypes import check_reduction_dtypes, compute_dtype, formula_dtype
from feinsum.spec.formulas import variable_name
from feinsum.spec.model import INDEX_REDUCTIONS, Array, BatchedEinsum, Formula, Length

if TYPE_CHECKING:
    import loopy as lp

#: The loopy target of every reference kernel.
KERNEL_NAME = "einsum"
LANG_VERSION = (2018, 2)
#: dtype of length-symbol arguments, inames and argmin/argmax index outputs.
INDEX_DTYPE = np.dtype(np.int32)


def output_names(e: BatchedEinsum) -> tuple[str, ...]:
    """The output arguments, in argument order: ``out0`` (``out0_index``), ``out1``..."""
    names: list[str] = []
    for r in range(e.nrows):
        names.append(f"out{r}")
        if e.reduction in INDEX_REDUCTIONS:
            names.append(f"out{r}_index")
    return tuple(names)


def operand_rule_name(row: int, column: int) -> str:
    """Name of the substitution rule holding operand *column* of *row*."""
    return f"op{column}_r{row}"


def feature_inames(e: BatchedEinsum) -> dict[str, dict[str, str]]:
    """For each formula, its feature indices' iname names.

    A feature index keeps its name unless it clashes with an einsum index, an
    array, a formula, a length symbol, or a same-named feature index of a different
    length in another formula; then it becomes ``{formula}_{index}``."""
    from feinsum.spec.formulas import feature_indices

    taken = set(e.indices) | {a.name for a in e.arrays} | {f.name for f in e.formulas}
    taken |= set(e.length_symbols)
    lengths: dict[str, set[Length]] = {}
    for f in e.formulas:
        for d, n in feature_indices(f).items():
            lengths.setdefault(d, set()).add(n)
    result: dict[str, dict[str, str]] = {}
    for f in e.formulas:
        result[f.name] = {
            d: d if d not in taken and len(lengths[d]) == 1 else f"{f.name}_{d}"
            for d in feature_indices(f)
        }
    return result


def _check_reserved_names(e: BatchedEinsum) -> None:
    reserved = {KERNEL_NAME, *output_names(e)}
    reserved |= {operand_rule_name(r, c) for r in range(e.nrows) for c in range(e.noperands)}
    for what, names in (
        ("array", [a.name for a in e.arrays]),
        ("formula", [f.name for f in e.formulas]),
        ("index", list(e.indices)),
        ("length symbol", list(e.length_symbols)),
    ):
        for name in names:
            if name in reserved:
                raise SpecificationError(
                    f"{what} {name!r}: the name is taken by the reference kernel (outputs are "
                    "out{r}, operands op{c}_r{r}, the kernel einsum); rename it"
                )


# {{{ formula expressions


def typed_constant(value: Any, dtype: np.dtype[Any]) -> Any:
    """A formula constant as the formula computes it (dtype: the formula's result
    dtype): a float becomes a numpy scalar of the formula's (real) precision, a complex
    one of its complex precision, an integer stays a Python int."""
    if isinstance(value, complex):
        return (dtype if dtype.kind == "c" else np.result_type(dtype, np.complex64)).type(value)
    if isinstance(value, (float, np.floating)):
        real = np.dtype(dtype.char.lower()) if dtype.kind == "c" else dtype
        return (real if real.kind == "f" else np.dtype(np.float64)).type(value)
    return value


def _formula_rule_body(f: Formula, inames: Mapping[str, str],
                       dtype: np.dtype[Any] | None = None) -> Any:
    """The formula's expression with typed constants, casts of arrays to the formula's
    dtype (*dtype*: what it computes in, :func:`feinsum.spec.dtypes.formula_dtype`;
    default: its own), feinsum's NaN-propagating min/max, and renamed feature
    indices."""
    from loopy.library.reduction import MaxReductionOperation, MinReductionOperation
    from loopy.symbolic import Reduction, TypeCast
    from pymbolic.mapper import IdentityMapper

    from feinsum.lowering.loopy_ops import MaxReduction, MinReduction
    from feinsum.spec.formulas import formula_result_dtype

    computed: np.dtype[Any] = formula_result_dtype(f) if dtype is None else dtype
    arrays = {a.name: a for a in f.arrays}

    def cast(expr: Any, dt: np.dtype[Any]) -> Any:
        return expr if dt == computed else TypeCast(computed, expr)

    class Lower(IdentityMapper):  # type: ignore[misc]
        def map_constant(self, expr: Any) -> Any:
            return typed_constant(expr, computed)

        def map_variable(self, expr: prim.Variable) -> Any:
            if expr.name in arrays:
                return cast(expr, arrays[expr.name].dtype)
            return prim.Variable(inames.get(expr.name, expr.name))

        def map_subscript(self, expr: prim.Subscript) -> Any:
            index = tuple(self.rec(i) for i in expr.index_tuple)
            name = variable_name(expr.aggregate)
            return cast(prim.Subscript(prim.Variable(name), index), arrays[name].dtype)

        def map_reduction(self, expr: Any) -> Any:
            op = expr.operation
            if isinstance(op, MaxReductionOperation):
                op = MaxReduction()
            elif isinstance(op, MinReductionOperation):
                op = MinReduction()
            return Reduction(op, tuple(inames.get(i, i) for i in expr.inames),
                             self.rec(expr.expr), expr.allow_simultaneous)

    return Lower()(f.expression)


# }}}


def generate_loopy(e: BatchedEinsum) -> lp.TranslationUnit:
    """The reference loopy kernel of *e* (see the module docstring and
    ``docs/lowering.rst``): one kernel named ``einsum``, no tags, no transformations,
    target :class:`loopy.PyOpenCLTarget`."""
    if e.block_sparse is not None:
        return _block_sparse_module().generate_block_sparse_loopy(e)

    import loopy as lp
    from loopy.kernel.instruction import make_assignment
    from loopy.symbolic import Reduction, TypeCast

    from feinsum.lowering.loopy_ops import OPERATIONS, register_extra_functions
    from feinsum.spec.formulas import feature_indices

    _check_reserved_names(e)
    check_reduction_dtypes(e)
    features = feature_inames(e)

    # {{{ domain

    bounds = {i: e.lengths[i] for i in e.indices}
    for f in e.formulas:
        for d, n in feature_indices(f).items():
            bounds.setdefault(features[f.name][d], n)
    params = e.length_symbols
    constraints = " and ".join(f"0 <= {i} < {n}" for i, n in bounds.items())
    domain = ("[" + ", ".join(params) + "] -> " if params else "") + (
        "{[" + ", ".join(bounds) + "]: " + constraints + "}"
    )

    # }}}

    # {{{ arguments

    def shape(lengths: tuple[Length, ...]) -> tuple[Any, ...]:
        return tuple(prim.Variable(n) if isinstance(n, str) else n for n in lengths)

    args: list[Any] = [
        lp.ValueArg(a.name, a.dtype) if a.ndim == 0
        else lp.GlobalArg(a.name, a.dtype, shape=shape(a.shape), order=a.order)
        for a in e.arrays
    ]
    out_shape = shape(tuple(e.lengths[i] for i in e.out_indices))
    for r in range(e.nrows):
        args.append(lp.GlobalArg(f"out{r}", e.value_dtype(r), shape=out_shape, order="C",
                                 is_output=True))
        if e.reduction in INDEX_REDUCTIONS:
            args.append(lp.GlobalArg(f"out{r}_index", INDEX_DTYPE, shape=out_shape, order="C",
                                     is_output=True))
    args.extend(lp.ValueArg(n, INDEX_DTYPE) for n in params)

    # }}}

    # {{{ substitution rules and instructions

    rules: list[Any] = [
        lp.SubstitutionRule(f.name, f.arguments,
                            _formula_rule_body(f, features[f.name], formula_dtype(e, f)))
        for f in e.formulas
    ]

    def factor_expr(f: Array | Formula, idx: tuple[prim.Variable, ...], dt: np.dtype[Any]) -> Any:
        if isinstance(f, Array):
            expr: Any = prim.Subscript(prim.Variable(f.name), idx) if idx else prim.Variable(f.name)
            fdt = f.dtype
        else:
            expr, fdt = prim.Call(prim.Variable(f.name), idx), formula_dtype(e, f)
        return expr if fdt == dt else TypeCast(dt, expr)

    red = e.reduction_indices
    out_idx = tuple(prim.Variable(i) for i in e.out_indices)

    def out(name: str) -> Any:
        return prim.Subscript(prim.Variable(name), out_idx) if out_idx else prim.Variable(name)

    insns: list[Any] = []
    for r, row in enumerate(e.arguments):
        dt = compute_dtype(e, r)
        factors = []
        for c, entry in enumerate(row):
            idx = tuple(prim.Variable(i) for i in e.in_indices[c])
            name = operand_rule_name(r, c)
            body = prim.Product(tuple(factor_expr(f, idx, dt) for f in entry)) if len(
                entry) > 1 else factor_expr(entry[0], idx, dt)
            rules.append(lp.SubstitutionRule(name, e.in_indices[c], body))
            factors.append(prim.Call(prim.Variable(name), idx) if idx else prim.Variable(name))
        product = prim.Product(tuple(factors)) if len(factors) > 1 else factors[0]
        if not red:
            # loopy warns about and drops a reduction over no inames: write the product
            expr: Any = product
        elif e.reduction == "sum":
            expr = Reduction("sum", red, product)
        elif e.reduction in INDEX_REDUCTIONS:
            expr = Reduction(OPERATIONS[e.reduction](), red, (product, prim.Variable(red[0])))
        else:
            expr = Reduction(OPERATIONS[e.reduction](), red, product)
        assignees: tuple[Any, ...] = (out(f"out{r}"),)
        if e.reduction in INDEX_REDUCTIONS:
            assignees += (out(f"out{r}_index"),)
        insns.append(make_assignment(assignees, expr, id=f"row{r}"))

    # }}}

    t_unit = lp.make_kernel(
        domain, [*rules, *insns], args,
        name=KERNEL_NAME, lang_version=LANG_VERSION, target=lp.PyOpenCLTarget(),
    )
    return register_extra_functions(t_unit, called_functions(e))


def called_functions(e: BatchedEinsum) -> set[str]:
    """Names of the functions *e*'s formulas call."""
    from feinsum.spec.formulas import walk

    return {variable_name(x.function) for f in e.formulas for x in walk(f.expression)
            if isinstance(x, prim.Call)}


#: The lowering of block-sparse specifications: :mod:`feinsum.reductions.block_sparse` (a
#: package above this one) registers itself when imported, as ``feinsum.generate_loopy``,
#: ``feinsum.evaluate``, the recipes, measurement and ``feinsum.compile`` all do.
_BLOCK_SPARSE: list[Any] = []


def register_block_sparse(lowering: Any) -> None:
    """Lower and evaluate block-sparse specifications with *lowering* (a module with
    ``generate_block_sparse_loopy(e)`` and ``evaluate_block_sparse(e, arrays)``)."""
    _BLOCK_SPARSE[:] = [lowering]


def _block_sparse_module() -> Any:
    if not _BLOCK_SPARSE:
        raise SpecificationError(
            "block-sparse specifications are lowered by feinsum.reductions.block_sparse, "
            "which is not imported: `import feinsum.reductions` first (feinsum.generate_loopy "
            "and feinsum.evaluate do)")
    return _BLOCK_SPARSE[0]


# vim: foldmethod=marker
