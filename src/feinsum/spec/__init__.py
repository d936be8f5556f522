"""What an einsum is: the model (:mod:`.model`), its builders, formula operands, the JSON
form, the canonical form and keys, and its cost (dtypes, lengths, flops, bytes)."""

from feinsum.spec.builders import batched_einsum, einsum, parse_subscripts
from feinsum.spec.model import (
    INDEX_REDUCTIONS,
    LONG_THRESHOLD,
    REDUCTION_KINDS,
    SUPPORTED_DTYPES,
    Array,
    BatchedEinsum,
    BlockSparse,
    Factor,
    Formula,
    Length,
    Operand,
    ReductionKind,
    array,
    as_dtype,
    formula,
    is_long,
)

__all__ = [
    "INDEX_REDUCTIONS",
    "LONG_THRESHOLD",
    "REDUCTION_KINDS",
    "SUPPORTED_DTYPES",
    "Array",
    "BatchedEinsum",
    "BlockSparse",
    "Factor",
    "Formula",
    "Length",
    "Operand",
    "ReductionKind",
    "array",
    "as_dtype",
    "batched_einsum",
    "einsum",
    "formula",
    "is_long",
    "parse_subscripts",
]
