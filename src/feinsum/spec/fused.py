"""A batched einsum with the elementwise work around it fused in: operand expressions
evaluated in its loads, and epilogues applied in its stores.

An array compiler computes ``mass = einsum("ij,ej->ei", Minv, div - lift)`` and then
``out = sin(div) + 0.5*lift + 0.25*mass``. Split into statements, that is the *core*
einsum ``ij,ej->ei`` of ``Minv`` and a temporary ``t = div - lift``, written into a
temporary ``mass``, around which an elementwise statement computes ``t`` before and one
computes ``out`` after. A :class:`FusedEinsum` is the core with

* :class:`OperandExpression` s: array ``t`` of the core is not read from memory but
  computed where it is read, ``t[e, j] -> div[e, j] - lift[e, j]``;
* :class:`Epilogue` s: what row ``r`` stores is not its value but an expression of it,
  ``out[e, i] = sin(div[e, i]) + 0.5*lift[e, i] + 0.25*value``, written to the
  epilogue's output (same shape and layout as the row's).

Everything is named as in the core (canonical names once the core is canonical); the
arrays only the expressions read are listed in :attr:`FusedEinsum.arrays`.

**Keys.** A record of the timing database is a schedule (recipe and parameters) timed on
an einsum's loop nest. Fusing expressions in changes what a load computes and what a
store writes, not the loop nest, so the fused einsum is looked up by the key of its core
(:attr:`FusedEinsum.record_key`, :func:`~feinsum.spec.canonical.canonical_key` of the
core: the plain einsum's records). Where a recipe's kernel reads the operand through its
substitution rule and writes the output with assignments or ``vstoreN``, the fused kernel
runs exactly that schedule; where it does not, nothing is fused and the plain einsum runs
as recorded. :attr:`FusedEinsum.key` identifies the fused computation itself (the core's
canonical text and the expressions' text), for caches of fused kernels; no record is kept
under it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from feinsum.errors import SpecificationError
from feinsum.spec.model import Array, BatchedEinsum

#: The name an epilogue calls the value its row computed.
VALUE = "value"
#: Prefix of :attr:`FusedEinsum.key`.
FUSED_KEY_PREFIX = "fef1-"


@dataclass(frozen=True)
class OperandExpression:
    """Array *array* of the core, computed as *expression* of its indices *arguments* (one
    per axis, in axis order) where the einsum reads it."""

    array: str
    arguments: tuple[str, ...]
    expression: Any


@dataclass(frozen=True)
class Epilogue:
    """Row *row* stores *expression* (of its output indices *arguments*, in the output's
    axis order, and of :data:`VALUE`, the row's value) into *output*."""

    row: int
    arguments: tuple[str, ...]
    expression: Any
    output: str


@dataclass(frozen=True)
class FusedEinsum:
    """A core einsum with operand expressions and epilogues (see the module docstring)."""

    einsum: BatchedEinsum
    operands: tuple[OperandExpression, ...] = ()
    epilogues: tuple[Epilogue, ...] = ()
    #: the arrays the expressions read that are not arrays of the core
    arrays: tuple[Array, ...] = ()

    def __post_init__(self) -> None:
        core = {a.name: a for a in self.einsum.arrays}
        for op in self.operands:
            a = core.get(op.array)
            if a is None:
                raise SpecificationError(f"operand expression for {op.array!r}, which is not "
                                         "an array of the einsum")
            if len(op.arguments) != a.ndim:
                raise SpecificationError(
                    f"operand expression for {op.array!r}: {len(op.arguments)} indices for "
                    f"an array of rank {a.ndim}")
        rows = [ep.row for ep in self.epilogues]
        if len(set(rows)) != len(rows) or not all(0 <= r < self.einsum.nrows for r in rows):
            raise SpecificationError(f"epilogues for rows {rows}: one at most per row of "
                                     f"the {self.einsum.nrows} rows")
        for ep in self.epilogues:
            if len(ep.arguments) != len(self.einsum.out_indices):
                raise SpecificationError(
                    f"epilogue of row {ep.row}: {len(ep.arguments)} indices for an output "
                    f"of rank {len(self.einsum.out_indices)}")
        clash = {a.name for a in self.arrays} & set(core)
        if clash:
            raise SpecificationError(f"{sorted(clash)[0]!r} is both an array of the einsum "
                                     "and an array of its expressions")

    @property
    def record_key(self) -> str:
        """The key the timing database has the records of this einsum under: its core's."""
        from feinsum.spec.canonical import canonical_key

        return canonical_key(self.einsum)

    def text(self) -> str:
        """The core's canonical text, then one line per operand expression and epilogue."""
        from feinsum.spec.canonical import canonical_text
        from feinsum.spec.serialize import expression_text

        lines = [canonical_text(self.einsum)]
        for op in sorted(self.operands, key=lambda o: o.array):
            lines.append(f"operand {op.array}({', '.join(op.arguments)}) = "
                         f"{expression_text(op.expression, flat=True)}")
        for ep in sorted(self.epilogues, key=lambda e: e.row):
            lines.append(f"epilogue out{ep.row}({', '.join(ep.arguments)}) = "
                         f"{expression_text(ep.expression, flat=True)}")
        for a in self.arrays:
            lines.append(f"array {a.name}{list(a.shape)} {a.dtype.name} {a.order}")
        return "\n".join(lines)

    @property
    def key(self) -> str:
        """``fef1-`` and a hash of :meth:`text`: the fused computation (caches only)."""
        digest = hashlib.sha256(self.text().encode()).hexdigest()[:32]
        return FUSED_KEY_PREFIX + digest

    def describe(self, names: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """One line per fused expression, in the names *names* gives (default: as is)."""
        from feinsum.spec.serialize import expression_text

        rename = _renamer(names or {})
        out = []
        for op in self.operands:
            out.append(f"operand {rename(op.array)} = "
                       f"{expression_text(rename(op.expression))} in the loads")
        for ep in self.epilogues:
            out.append(f"{rename(ep.output)} = {expression_text(rename(ep.expression))} "
                       f"in the stores of row {ep.row}")
        return tuple(out)


def _renamer(names: Mapping[str, str]) -> Any:
    """A function renaming variables (a string or every variable of an expression)."""
    from pymbolic import var
    from pymbolic.mapper.substitutor import SubstitutionMapper, make_subst_func

    smap = SubstitutionMapper(make_subst_func({k: var(v) for k, v in names.items()}))

    def rename(x: Any) -> Any:
        return names.get(x, x) if isinstance(x, str) else smap(x)

    return rename
