"""The specification model: a batched einsum is (expression, argument matrix, dtypes, shapes).

A :class:`BatchedEinsum` has

* ``in_indices``: the index tuple of each operand column (``"xre,rij,xej"``),
* ``out_indices``: the indices of every output (shared by all rows),
* ``arguments``: a matrix with one row per output and one entry per column; an
  entry is a tuple of *factors* whose product is the operand. A factor is an
  :class:`Array` (read as ``array[column indices]``) or a :class:`Formula`
  (a substitution rule applied to the column indices),
* ``reduction``: how the reduction indices (input indices not in the output) are
  reduced: ``sum`` (an einsum), ``min``, ``max``, ``argmin``, ``argmax`` (value and
  int32 index) or ``logsumexp``,
* ``block_sparse``: an optional :class:`BlockSparse` restriction.

Lengths are integers or named symbols (``"E"``) for long axes; see
:data:`LONG_THRESHOLD` and :func:`is_long`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import numpy as np
import pymbolic.primitives as prim

from feinsum.errors import (
    DTypeError,
    FormulaError,
    ShapeError,
    SpecificationError,
    SubscriptError,
)

#: A fixed length of at least this many entries counts as *long*: canonical keys
#: abstract it into a symbol (so one database record serves every such length),
#: loop bounds of that size in matched kernels become symbolic, and recipes tile it
#: rather than unroll it. The same threshold is used by every part of feinsum.
LONG_THRESHOLD = 256

Length: TypeAlias = int | str
ReductionKind: TypeAlias = Literal["sum", "min", "max", "argmin", "argmax", "logsumexp"]
REDUCTION_KINDS: tuple[str, ...] = ("sum", "min", "max", "argmin", "argmax", "logsumexp")
#: Reductions that also produce an int32 index output per row.
INDEX_REDUCTIONS: frozenset[str] = frozenset({"argmin", "argmax"})

SUPPORTED_DTYPES: tuple[np.dtype[Any], ...] = tuple(
    np.dtype(t)
    for t in (np.float32, np.float64, np.complex64, np.complex128, np.int32, np.int64)
)

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_long(length: Length) -> bool:
    """Whether *length* counts as long: a symbol, or an integer >= :data:`LONG_THRESHOLD`."""
    return isinstance(length, str) or length >= LONG_THRESHOLD


def as_dtype(dtype: Any, what: str = "dtype") -> np.dtype[Any]:
    """Normalise *dtype* and check feinsum supports it."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise DTypeError(f"{what}: {dtype!r} is not a dtype") from exc
    if dt.byteorder == ">":
        raise DTypeError(f"{what}: big-endian {dt} is not supported; use {dt.newbyteorder('=')}")
    dt = dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt
    if dt not in SUPPORTED_DTYPES:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise DTypeError(f"{what}: {dt} is not supported (supported: {names})")
    return dt


def _check_identifier(name: object, what: str) -> str:
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise SpecificationError(f"{what} must be an identifier, got {name!r}")
    return name


def _check_length(length: object, what: str) -> Length:
    if isinstance(length, bool):
        raise ShapeError(f"{what}: {length!r} is not a length")
    if isinstance(length, (int, np.integer)):
        if length < 1:
            raise ShapeError(f"{what}: lengths must be >= 1, got {length}")
        return int(length)
    if isinstance(length, str) and _IDENTIFIER.match(length):
        return length
    raise ShapeError(f"{what}: a length is a positive integer or a symbol name, got {length!r}")


# {{{ arrays and formulas


@dataclass(frozen=True)
class Array:
    """An input array: a name, a shape of integers and/or length symbols, a dtype, a memory order.

    Zero-dimensional arrays are scalar parameters.
    """

    name: str
    shape: tuple[Length, ...]
    dtype: np.dtype[Any]
    order: Literal["C", "F"] = "C"

    def __post_init__(self) -> None:
        _check_identifier(self.name, "an array name")
        if not isinstance(self.shape, tuple):
            raise ShapeError(f"array {self.name!r}: shape must be a tuple, got {self.shape!r}")
        shape = tuple(
            _check_length(n, f"array {self.name!r}, axis {k}") for k, n in enumerate(self.shape)
        )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", as_dtype(self.dtype, f"array {self.name!r}"))
        if self.order not in ("C", "F"):
            raise SpecificationError(
                f"array {self.name!r}: order must be 'C' or 'F', got {self.order!r}"
            )

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        order = "" if self.order == "C" else ", order='F'"
        return f"array({self.name!r}, {self.shape!r}, {self.dtype.name}{order})"


def array(
    name: str,
    shape: int | str | Sequence[int | str],
    dtype: Any = np.float64,
    order: Literal["C", "F"] = "C",
) -> Array:
    """Describe an input array. *shape* entries are integers or length symbols (``"E"``)."""
    if isinstance(shape, (int, np.integer, str)):
        shape = (shape,)
    if not isinstance(shape, Sequence):
        raise ShapeError(
            f"array {name!r}: shape must be a length or a sequence of lengths, got {shape!r}"
        )
    return Array(name, tuple(shape), dtype, order)


@dataclass(frozen=True)
class Formula:
    """An operand computed by a formula: what a loopy substitution rule is.

    ``expression`` is a pymbolic expression over the formal ``arguments`` (indices),
    the ``arrays`` it reads (``x[i, d]``; 0-d arrays are plain variables), inner
    *feature* indices bound by ``sum(d, ...)``/``max``/``min`` reductions (loopy's
    :class:`loopy.symbolic.Reduction`), numeric constants and function calls
    (``exp``, ``log``, ``sqrt``, ``abs``, ...). Feature index lengths come from the
    shapes of the arrays they index.
    """

    name: str
    arguments: tuple[str, ...]
    expression: prim.ExpressionNode | int | float | complex
    arrays: tuple[Array, ...]

    def __post_init__(self) -> None:
        _check_identifier(self.name, "a formula name")
        for a in self.arguments:
            _check_identifier(a, f"formula {self.name!r}: an argument")
        if len(set(self.arguments)) != len(self.arguments):
            raise FormulaError(f"formula {self.name!r}: repeated argument in {self.arguments}")
        for operand in self.arrays:
            if not isinstance(operand, Array):
                raise FormulaError(f"formula {self.name!r}: {operand!r} is not a feinsum.array")
        # imported here: formula analysis needs loopy, which is slow to import
        from feinsum.spec.formulas import check_formula

        check_formula(self)

    def __repr__(self) -> str:
        return f"formula({self.name!r}, {self.arguments!r}, {str(self.expression)!r})"


def formula(
    name: str,
    arguments: Sequence[str] | str,
    expression: str | prim.ExpressionNode,
    arrays: Iterable[Array],
) -> Formula:
    """Describe a formula operand, e.g. a Gaussian kernel of two point clouds::

        K = feinsum.formula("K", "ij", "exp(-sum(d, (x[i,d] - y[j,d])**2) / (2*s**2))",
                            [x, y, s])
    """
    from feinsum.spec.formulas import parse_expression

    if isinstance(arguments, str):
        arguments = tuple(arguments) if "," not in arguments else tuple(
            a.strip() for a in arguments.split(",")
        )
    expr = parse_expression(expression, name) if isinstance(expression, str) else expression
    if isinstance(arrays, (str, bytes)) or not isinstance(arrays, Iterable):
        raise FormulaError(
            f"formula {name!r}: arrays must be a list of the feinsum.array objects it reads, "
            f"got {arrays!r}"
        )
    return Formula(name, tuple(arguments), expr, tuple(arrays))


Factor: TypeAlias = Array | Formula
Operand: TypeAlias = tuple[Factor, ...]


@dataclass(frozen=True)
class BlockSparse:
    """Restricts the reduction over ``reduction_index`` to blocks given at run time.

    The ranges (KeOps' 6-tuple format) are data, not part of the specification: one
    compiled kernel serves every clustering. A restricted spec never shares a key with
    the dense one.
    """

    out_index: str
    reduction_index: str


# }}}


# {{{ the batched einsum


@dataclass(frozen=True)
class BatchedEinsum:
    """A batched einsum or kernel reduction; see the module docstring."""

    in_indices: tuple[tuple[str, ...], ...]
    out_indices: tuple[str, ...]
    arguments: tuple[tuple[Operand, ...], ...]
    reduction: ReductionKind = "sum"
    block_sparse: BlockSparse | None = None
    _lengths: Mapping[str, Length] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        _validate(self)

    # {{{ derived properties

    @property
    def nrows(self) -> int:
        """Number of outputs (rows of the argument matrix)."""
        return len(self.arguments)

    @property
    def noperands(self) -> int:
        """Number of operand columns."""
        return len(self.in_indices)

    @property
    def indices(self) -> tuple[str, ...]:
        """Every index, in order of first appearance (outputs first)."""
        seen: dict[str, None] = dict.fromkeys(self.out_indices)
        for idx in self.in_indices:
            seen.update(dict.fromkeys(idx))
        return tuple(seen)

    @property
    def reduction_indices(self) -> tuple[str, ...]:
        """Indices reduced over, in order of first appearance."""
        out = set(self.out_indices)
        return tuple(i for i in self.indices if i not in out)

    @property
    def lengths(self) -> Mapping[str, Length]:
        """The length of every index (integers or symbols)."""
        return self._lengths

    @property
    def length_symbols(self) -> tuple[str, ...]:
        """Symbols used as lengths anywhere (index and feature axes), sorted."""
        syms = {n for a in self.arrays for n in a.shape if isinstance(n, str)}
        return tuple(sorted(syms))

    def factors(self) -> Iterator[tuple[int, int, Factor]]:
        """Yield ``(row, column, factor)`` for every factor of the argument matrix."""
        for r, row in enumerate(self.arguments):
            for c, entry in enumerate(row):
                for f in entry:
                    yield r, c, f

    @property
    def arrays(self) -> tuple[Array, ...]:
        """Every distinct input array (formula inputs included), in order of appearance."""
        seen: dict[str, Array] = {}
        for _, _, f in self.factors():
            for a in (f,) if isinstance(f, Array) else f.arrays:
                seen.setdefault(a.name, a)
        return tuple(seen.values())

    @property
    def formulas(self) -> tuple[Formula, ...]:
        """Every distinct formula operand, in order of appearance."""
        seen: dict[str, Formula] = {}
        for _, _, f in self.factors():
            if isinstance(f, Formula):
                seen.setdefault(f.name, f)
        return tuple(seen.values())

    def value_dtype(self, row: int = 0) -> np.dtype[Any]:
        """dtype of the (value) output of *row*."""
        from feinsum.spec.formulas import formula_result_dtype

        dtypes: list[np.dtype[Any]] = []
        for entry in self.arguments[row]:
            for f in entry:
                dtypes.append(f.dtype if isinstance(f, Array) else formula_result_dtype(f))
        if self.reduction == "logsumexp":
            dtypes.append(np.dtype(np.float32))
        return np.result_type(*dtypes)

    @property
    def is_plain_einsum(self) -> bool:
        """A sum over products of arrays: no formulas, no restriction."""
        return (
            self.reduction == "sum"
            and self.block_sparse is None
            and all(isinstance(f, Array) for _, _, f in self.factors())
        )

    @property
    def subscripts(self) -> str:
        """The einsum expression, e.g. ``"xre,rij,xej->ei"`` (multi-letter indices comma-joined
        in brackets)."""

        def fmt(idx: tuple[str, ...]) -> str:
            return "".join(idx) if all(len(i) == 1 for i in self.indices) else "[" + " ".join(
                idx
            ) + "]"

        return ",".join(fmt(i) for i in self.in_indices) + "->" + fmt(self.out_indices)

    def with_lengths(self, lengths: Mapping[str, Length]) -> BatchedEinsum:
        """Substitute lengths for length symbols (``{"E": 50000}``) or for fixed lengths."""
        return _relength(self, lengths)

    # }}}

    def __str__(self) -> str:
        rows = "; ".join(
            "[" + ", ".join("*".join(_factor_name(f) for f in e) for e in row) + "]"
            for row in self.arguments
        )
        red = "" if self.reduction == "sum" else f", reduction={self.reduction}"
        bs = "" if self.block_sparse is None else ", block_sparse"
        return f"BatchedEinsum({self.subscripts!r}, {rows}{red}{bs})"


def _factor_name(f: Factor) -> str:
    return f.name if isinstance(f, Array) else f"{f.name}(...)"


def _validate(e: BatchedEinsum) -> None:
    if not isinstance(e.in_indices, tuple) or not all(isinstance(t, tuple) for t in e.in_indices):
        raise SubscriptError("in_indices must be a tuple of tuples of index names")
    if not e.in_indices:
        raise SubscriptError("an einsum needs at least one operand")
    for c, idx in enumerate(e.in_indices):
        for i in idx:
            _check_identifier(i, f"operand {c}: an index")
        dup = {i for i in idx if idx.count(i) > 1}
        if dup:
            raise SubscriptError(
                f"operand {c}: index {sorted(dup)[0]!r} is repeated inside one operand "
                f"({','.join(idx)}); diagonals and traces are not supported yet"
            )
    for i in e.out_indices:
        _check_identifier(i, "an output index")
    if len(set(e.out_indices)) != len(e.out_indices):
        raise SubscriptError(f"output indices {e.out_indices} repeat an index")
    all_in = {i for idx in e.in_indices for i in idx}
    missing = [i for i in e.out_indices if i not in all_in]
    if missing:
        raise SubscriptError(
            f"output index {missing[0]!r} does not appear in any operand"
        )
    if e.reduction not in REDUCTION_KINDS:
        raise SpecificationError(
            f"unknown reduction {e.reduction!r}; choose one of {', '.join(REDUCTION_KINDS)}"
        )
    every = dict.fromkeys(i for idx in e.in_indices for i in idx)
    red = [i for i in every if i not in e.out_indices]
    if e.reduction in INDEX_REDUCTIONS and len(red) != 1:
        raise SpecificationError(
            f"{e.reduction} needs exactly one reduction index, got {len(red)} ({', '.join(red)})"
        )
    if not e.arguments:
        raise SpecificationError("a batched einsum needs at least one row of arguments")
    for r, row in enumerate(e.arguments):
        if len(row) != len(e.in_indices):
            raise SpecificationError(
                f"row {r} has {len(row)} operands but the subscripts have {len(e.in_indices)}"
            )
        for c, entry in enumerate(row):
            if not isinstance(entry, tuple) or not entry:
                raise SpecificationError(
                    f"row {r}, operand {c}: expected a non-empty tuple of factors"
                )
            for f in entry:
                if not isinstance(f, (Array, Formula)):
                    raise SpecificationError(
                        f"row {r}, operand {c}: {f!r} is neither an array nor a formula"
                    )
    _check_names(e)
    lengths = _infer_lengths(e)
    object.__setattr__(e, "_lengths", lengths)
    if e.block_sparse is not None:
        bs = e.block_sparse
        if not isinstance(bs, BlockSparse):
            raise SpecificationError(
                f"block_sparse must be a feinsum.BlockSparse(out_index, reduction_index), "
                f"got {bs!r}"
            )
        if bs.out_index not in e.out_indices:
            raise SpecificationError(
                f"block_sparse.out_index {bs.out_index!r} is not an output index"
            )
        if bs.reduction_index not in red:
            raise SpecificationError(
                f"block_sparse.reduction_index {bs.reduction_index!r} is not a reduction index"
            )


def _check_names(e: BatchedEinsum) -> None:
    """Names must be unambiguous: one array per name, one formula per name, no clashes."""
    arrays: dict[str, Array] = {}
    formulas: dict[str, Formula] = {}
    for _, _, f in e.factors():
        if isinstance(f, Formula):
            if formulas.setdefault(f.name, f) != f:
                raise SpecificationError(f"two different formulas are both named {f.name!r}")
            members: tuple[Array, ...] = f.arrays
        else:
            members = (f,)
        for a in members:
            if arrays.setdefault(a.name, a) != a:
                raise SpecificationError(
                    f"two different arrays are both named {a.name!r}: {arrays[a.name]!r} and {a!r}"
                )
    clash = set(arrays) & set(formulas)
    if clash:
        raise SpecificationError(f"{sorted(clash)[0]!r} names both an array and a formula")
    syms = {n for a in arrays.values() for n in a.shape if isinstance(n, str)}
    indices = set(e.indices)
    for name in sorted((set(arrays) | set(formulas) | syms) & indices):
        raise SpecificationError(f"{name!r} names both an index and an array/formula/length")
    for name in sorted(syms & (set(arrays) | set(formulas))):
        raise SpecificationError(f"{name!r} names both a length symbol and an array/formula")


def _infer_lengths(e: BatchedEinsum) -> dict[str, Length]:
    from feinsum.spec.formulas import formula_argument_lengths

    lengths: dict[str, Length] = {}
    where: dict[str, str] = {}

    def record(idx: str, n: Length, what: str) -> None:
        if idx in lengths and lengths[idx] != n:
            raise ShapeError(
                f"index {idx!r} has length {lengths[idx]!r} in {where[idx]} but {n!r} in {what}"
            )
        lengths.setdefault(idx, n)
        where.setdefault(idx, what)

    for r, c, f in e.factors():
        idx = e.in_indices[c]
        if isinstance(f, Array):
            if f.ndim != len(idx):
                raise ShapeError(
                    f"row {r}, operand {c}: array {f.name!r} has rank {f.ndim} but its subscripts "
                    f"{','.join(idx) or '(none)'} have {len(idx)} indices"
                )
            for i, n in zip(idx, f.shape, strict=True):
                record(i, n, f"array {f.name!r}")
        else:
            if len(f.arguments) != len(idx):
                raise ShapeError(
                    f"row {r}, operand {c}: formula {f.name!r} takes {len(f.arguments)} indices "
                    f"but its subscripts {','.join(idx) or '(none)'} have {len(idx)}"
                )
            for i, maybe in zip(idx, formula_argument_lengths(f), strict=True):
                if maybe is not None:
                    record(i, maybe, f"formula {f.name!r}")
    unknown = [i for i in e.indices if i not in lengths]
    if unknown:
        raise ShapeError(
            f"the length of index {unknown[0]!r} is not determined by any array: give the "
            "formula an array indexed by it"
        )
    return {i: lengths[i] for i in e.indices}


def _relength(e: BatchedEinsum, lengths: Mapping[str, Length]) -> BatchedEinsum:
    """Replace length symbols by values."""
    from feinsum.spec.formulas import map_formula_arrays

    def fix_array(a: Array) -> Array:
        shape = tuple(lengths.get(n, n) if isinstance(n, str) else n for n in a.shape)
        return Array(a.name, shape, a.dtype, a.order)

    def fix(f: Factor) -> Factor:
        return fix_array(f) if isinstance(f, Array) else map_formula_arrays(f, fix_array)

    args = tuple(tuple(tuple(fix(f) for f in entry) for entry in row) for row in e.arguments)
    return BatchedEinsum(e.in_indices, e.out_indices, args, e.reduction, e.block_sparse)


# }}}

# vim: foldmethod=marker
