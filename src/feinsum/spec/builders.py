"""Builders of batched einsums from numpy-style subscripts or opt_einsum's interleaved form."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from feinsum.errors import SpecificationError, SubscriptError
from feinsum.spec.model import (
    Array,
    BatchedEinsum,
    BlockSparse,
    Factor,
    Formula,
    Operand,
    ReductionKind,
)

Indices = tuple[str, ...]


def parse_subscripts(subscripts: str, noperands: int) -> tuple[tuple[Indices, ...], Indices]:
    """Parse ``"ij,jk->ik"`` (or numpy's implicit-output ``"ij,jk"``) into index tuples."""
    if not isinstance(subscripts, str):
        raise SubscriptError(f"subscripts must be a string, got {type(subscripts).__name__}")
    s = subscripts.replace(" ", "")
    if "..." in s or "." in s:
        raise SubscriptError(
            f"{subscripts!r}: ellipsis ('...') broadcasting is not supported; name every index"
        )
    if s.count("->") > 1:
        raise SubscriptError(f"{subscripts!r}: more than one '->'")
    lhs, arrow, rhs = s.partition("->")
    if not arrow and ("-" in s or ">" in s):
        raise SubscriptError(f"{subscripts!r}: malformed output marker; write 'ij,jk->ik'")
    bad = sorted({ch for ch in lhs + rhs if not (ch.isalpha() and ch.isascii()) and ch != ","})
    if bad or "," in rhs:
        culprit = bad[0] if bad else ","
        raise SubscriptError(
            f"{subscripts!r}: unexpected character {culprit!r}; indices are single ASCII letters "
            "(use the interleaved form for multi-letter indices)"
        )
    ops = lhs.split(",")
    if len(ops) != noperands:
        raise SubscriptError(
            f"{subscripts!r} names {len(ops)} operand(s) but {noperands} were given"
        )
    in_indices = tuple(tuple(op) for op in ops)
    if arrow:
        out = tuple(rhs)
    else:
        counts: dict[str, int] = {}
        for op in in_indices:
            for i in op:
                counts[i] = counts.get(i, 0) + 1
        out = tuple(sorted(i for i, n in counts.items() if n == 1))
    return in_indices, out


def _as_operand(entry: object, where: str) -> Operand:
    if isinstance(entry, (Array, Formula)):
        return (entry,)
    if isinstance(entry, (tuple, list)) and entry and all(
        isinstance(f, (Array, Formula)) for f in entry
    ):
        return tuple(cast(Sequence[Factor], entry))
    raise SpecificationError(
        f"{where}: expected a feinsum.array, a feinsum.formula or a tuple of them, got {entry!r}"
    )


def _interleaved(
    args: Sequence[object],
) -> tuple[list[object], tuple[Indices, ...], Indices | None]:
    ops: list[object] = []
    idx: list[tuple[str, ...]] = []
    rest = list(args)
    while len(rest) >= 2:
        op, sub = rest[0], rest[1]
        if not isinstance(sub, (list, tuple)) or not all(isinstance(s, str) for s in sub):
            raise SubscriptError(
                f"interleaved form: operand {len(ops)} must be followed by a list of index names, "
                f"got {sub!r}"
            )
        ops.append(op)
        idx.append(tuple(sub))
        rest = rest[2:]
    out: tuple[str, ...] | None = None
    if rest:
        if not isinstance(rest[0], (list, tuple)) or not all(isinstance(s, str) for s in rest[0]):
            raise SubscriptError(
                f"interleaved form: the output must be a list of index names, got {rest[0]!r}"
            )
        out = tuple(rest[0])
    return ops, tuple(idx), out


def einsum(
    *args: Any, reduction: ReductionKind = "sum", block_sparse: BlockSparse | None = None
) -> BatchedEinsum:
    """A single einsum: ``einsum("ij,ej->ei", D, u)`` or the interleaved form
    ``einsum(D, ["i", "j"], u, ["e", "j"], ["e", "i"])`` for multi-letter indices."""
    if not args:
        raise SubscriptError("einsum() needs subscripts and operands")
    if isinstance(args[0], str):
        subscripts, operands = args[0], args[1:]
        in_indices, out = parse_subscripts(subscripts, len(operands))
    else:
        operands_l, in_indices, out_opt = _interleaved(args)
        operands = tuple(operands_l)
        if out_opt is None:
            counts: dict[str, int] = {}
            for op in in_indices:
                for i in op:
                    counts[i] = counts.get(i, 0) + 1
            out_opt = tuple(sorted(i for i, n in counts.items() if n == 1))
        out = out_opt
    row = tuple(_as_operand(op, f"operand {c}") for c, op in enumerate(operands))
    return BatchedEinsum(in_indices, out, (row,), reduction, block_sparse)


def batched_einsum(
    subscripts: str | Sequence[Sequence[str]],
    rows: Sequence[Sequence[object]],
    *,
    out_indices: Sequence[str] | None = None,
    reduction: ReductionKind = "sum",
    block_sparse: BlockSparse | None = None,
) -> BatchedEinsum:
    """A batch of einsums sharing one expression: one row of operands per output.

    ``batched_einsum("ifj,fe,fej->ei", [[L, J, u0], [L, J, u1]])``. An entry may be a
    tuple of arrays whose product is the operand (``(u, u)`` for ``u*u``). For
    multi-letter indices pass ``subscripts`` as a list of index lists and
    ``out_indices``.
    """
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence) or not rows:
        raise SpecificationError("rows must be a non-empty list of rows of operands")
    from feinsum.checks import MAX_ROWS, count

    count("rows", len(rows), maximum=MAX_ROWS)
    if not isinstance(rows[0], Sequence) or isinstance(rows[0], str):
        raise SpecificationError(f"row 0 must be a list of operands, got {rows[0]!r}")
    width = len(rows[0])
    if isinstance(subscripts, str):
        in_indices, out = parse_subscripts(subscripts, width)
    else:
        if not isinstance(subscripts, Sequence) or not all(
            isinstance(s, Sequence) and not isinstance(s, str) for s in subscripts
        ):
            raise SubscriptError(
                f"subscripts must be a string like 'ij,jk->ik' or a list of index lists, "
                f"got {subscripts!r}"
            )
        in_indices = tuple(tuple(s) for s in subscripts)
        if out_indices is None:
            raise SubscriptError("give out_indices with a list-of-lists subscripts")
        out = tuple(out_indices)
    matrix = []
    for r, row in enumerate(rows):
        if not isinstance(row, Sequence) or isinstance(row, str):
            raise SpecificationError(f"row {r} must be a list of operands, got {row!r}")
        matrix.append(tuple(_as_operand(op, f"row {r}, operand {c}") for c, op in enumerate(row)))
    return BatchedEinsum(in_indices, out, tuple(matrix), reduction, block_sparse)

