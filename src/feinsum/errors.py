"""The exception hierarchy: one class per failure kind, all under :class:`FeinsumError`."""

from __future__ import annotations


class FeinsumError(Exception):
    """Base class of every error feinsum raises on purpose."""


class SpecificationError(FeinsumError, ValueError):
    """A batched einsum specification is malformed (base of the spec errors)."""


class SubscriptError(SpecificationError):
    """Malformed einsum subscripts (``"ij,j->"``-style strings or interleaved lists)."""


class ShapeError(SpecificationError):
    """An array has the wrong rank, or one index is given two different lengths."""


class DTypeError(SpecificationError):
    """A dtype feinsum does not support."""


class FormulaError(SpecificationError):
    """A formula operand that cannot be parsed or refers to unknown names."""


class ArgumentError(FeinsumError, ValueError):
    """A count, size or time argument out of its range (workers, jobs, a budget, a time
    limit, a length...): :mod:`feinsum.checks` words it the same wherever it is given."""


class NotIsomorphicError(FeinsumError):
    """Two specifications are not equal up to renaming; the message says what differs."""


class EvaluationError(FeinsumError):
    """Arrays passed to :func:`feinsum.evaluate` or a compiled call do not fit the specification."""


class EinsumMatchError(FeinsumError):
    """A loopy kernel (or part of it) is not a batched einsum feinsum can hold."""


class DatabaseError(FeinsumError):
    """The timing database cannot be opened, read or written."""


class RecipeError(FeinsumError):
    """A recipe cannot be loaded, or does not apply (base of the recipe errors)."""


class InvalidConfigurationError(RecipeError):
    """A configuration violates a recipe constraint (the message names it)."""


class RecipeFailure(RecipeError):
    """A recipe raised while transforming a kernel; the original error is chained."""


class MissingDependencyError(FeinsumError, ImportError):
    """An optional package a feature needs is not installed; the message says which and
    how to install it."""


class DeviceError(FeinsumError):
    """No usable OpenCL device, or the requested one does not exist."""


class TuningError(FeinsumError):
    """The autotuner could not produce a record."""


class PredictionError(FeinsumError):
    """The performance model cannot predict a configuration (no model of the device, a
    length missing, a kernel it cannot read)."""


class MissingRecordError(DatabaseError):
    """The database holds no record for an einsum, and the caller asked for one
    (``transform_program(..., on_miss="error")``)."""


class CampaignError(FeinsumError):
    """A tuning campaign cannot start or finish (base of the campaign errors)."""


class PlanError(CampaignError):
    """A campaign PLAN has a bad line (the message names the line and the problem)."""


class SchedulerUnreachableError(CampaignError):
    """The dask scheduler of a campaign cannot be reached."""


class PerformanceWarning(UserWarning):
    """Something makes feinsum's programs slower than they need be (a warning, not an
    error: the results are right); the message names the fix."""


class RooflineWarning(UserWarning):
    """A roofline measurement that fails a sanity check (the float32 peak not above the
    float64 one where the device says it must be, a figure far below the device's previous
    measurement): the message says which, and whether it was recorded."""
