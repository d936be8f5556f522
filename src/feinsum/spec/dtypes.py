"""The dtypes of an einsum's rows: what each product is computed in, and which reductions
its values allow (``BatchedEinsum.value_dtype`` is the dtype each row's output holds)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from feinsum.errors import DTypeError
from feinsum.spec.model import Array

if TYPE_CHECKING:
    from feinsum.spec.model import BatchedEinsum, Formula


def compute_dtype(e: BatchedEinsum, row: int) -> np.dtype[Any]:
    """dtype the row's product is computed in: numpy's result type of its factors.

    Equal to ``e.value_dtype(row)`` except for logsumexp of integers (the product is
    integer, the logsumexp floating)."""
    from feinsum.spec.formulas import formula_result_dtype

    return np.result_type(
        *(f.dtype if isinstance(f, Array) else formula_result_dtype(f)
          for entry in e.arguments[row] for f in entry)
    )


def formula_dtype(e: BatchedEinsum, f: Formula) -> np.dtype[Any]:
    """dtype formula *f* computes in within *e*: its own
    (:func:`~feinsum.spec.formulas.formula_result_dtype`), except for a formula that reads
    no array (a constant: pytato's ``0.4`` in ``0.4 * (...)``), whose literals are weak as
    numpy's Python scalars are: it computes at the precision of the rows that read it,
    so that a float64 einsum multiplies by 0.4, not by float32's 0.4000000059604645."""
    from feinsum.spec.formulas import formula_result_dtype

    own = formula_result_dtype(f)
    if f.arrays:
        return own
    readers = [compute_dtype(e, r) for r, row in enumerate(e.arguments)
               if any(g == f for entry in row for g in entry)]
    return np.result_type(own, *readers)


def check_reduction_dtypes(e: BatchedEinsum) -> None:
    """Orderings (min, max, argmin, argmax) and logsumexp need real values."""
    if e.reduction == "sum":
        return
    for r in range(e.nrows):
        dt = compute_dtype(e, r)
        if dt.kind == "c":
            raise DTypeError(
                f"row {r}: {e.reduction} of complex values ({dt}) is not defined; reduce the "
                "real part, the imaginary part or the modulus (a formula with abs) instead"
            )
