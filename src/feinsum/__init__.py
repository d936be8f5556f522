"""feinsum: a database of code transformations for batched einsums and kernel reductions."""

from feinsum.errors import (
    ArgumentError,
    CampaignError,
    DatabaseError,
    DeviceError,
    DTypeError,
    EinsumMatchError,
    EvaluationError,
    FeinsumError,
    FormulaError,
    InvalidConfigurationError,
    MissingRecordError,
    NotIsomorphicError,
    PlanError,
    PredictionError,
    RecipeError,
    RecipeFailure,
    SchedulerUnreachableError,
    ShapeError,
    SpecificationError,
    SubscriptError,
    TuningError,
)
from feinsum.spec import (
    LONG_THRESHOLD,
    Array,
    BatchedEinsum,
    BlockSparse,
    Formula,
    array,
    batched_einsum,
    einsum,
    formula,
    is_long,
)

__version__ = "0.1.0"

# Public names defined in modules that import loopy, pyopencl or SQLAlchemy are
# imported on first use, so that ``import feinsum`` and ``feinsum --help`` stay fast.
_LAZY: dict[str, str] = {
    "canonicalize": "feinsum.spec.canonical",
    "canonical_key": "feinsum.spec.canonical",
    "canonical_text": "feinsum.spec.canonical",
    "canonical_lengths": "feinsum.spec.canonical",
    "structure_key": "feinsum.spec.canonical",
    "isomorphism": "feinsum.spec.canonical",
    "Isomorphism": "feinsum.spec.canonical",
    "spec_to_json": "feinsum.spec.serialize",
    "spec_from_json": "feinsum.spec.serialize",
    "generate_loopy": "feinsum.lowering.kernel",
    "evaluate": "feinsum.lowering.reference",
    "cost": "feinsum.spec.costs",
    "Cost": "feinsum.spec.costs",
    "contraction_flops": "feinsum.spec.costs",
    "get_device": "feinsum.devices.opencl",
    "device_info": "feinsum.devices.opencl",
    "DeviceInfo": "feinsum.devices.opencl",
    "open_database": "feinsum.database",
    "query": "feinsum.database",
    "best": "feinsum.database",
    "recipes": "feinsum.recipes",
    "recipes_for": "feinsum.recipes",
    "get_recipe": "feinsum.recipes",
    "Recipe": "feinsum.recipes",
    "find_einsums": "feinsum.matching",
    "match_einsum": "feinsum.matching",
    "apply_transform": "feinsum.matching",
    "Match": "feinsum.matching",
    "measure": "feinsum.timing.single",
    "measure_roofline": "feinsum.timing.roofline",
    "predict": "feinsum.prediction",
    "predict_configuration": "feinsum.prediction",
    "Prediction": "feinsum.prediction",
    "autotune": "feinsum.tuning",
    "campaign": "feinsum.campaigns",
    "revalidate": "feinsum.tuning.codecheck",
    "current_recipes": "feinsum.tuning.codecheck",
    "kernel_reduction": "feinsum.reductions.builder",
    "compile": "feinsum.direct.executor",
    "transform_program": "feinsum.hook",
    "FeinsumTransformMixin": "feinsum.hook",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'feinsum' has no attribute {name!r}")
    import importlib

    mod = importlib.import_module(module)
    if name in ("generate_loopy", "evaluate"):  # block-sparse specs are lowered there
        importlib.import_module("feinsum.reductions")
    # feinsum.recipes is both a module and (being callable) the function recipes():
    # keep the module there, so `from feinsum import recipes as rc; rc.Recipe` works too
    value = mod if module == f"feinsum.{name}" else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "LONG_THRESHOLD",
    "ArgumentError",
    "Array",
    "BatchedEinsum",
    "BlockSparse",
    "CampaignError",
    "DTypeError",
    "DatabaseError",
    "DeviceError",
    "EinsumMatchError",
    "EvaluationError",
    "FeinsumError",
    "Formula",
    "FormulaError",
    "InvalidConfigurationError",
    "MissingRecordError",
    "NotIsomorphicError",
    "PlanError",
    "PredictionError",
    "RecipeError",
    "RecipeFailure",
    "SchedulerUnreachableError",
    "ShapeError",
    "SpecificationError",
    "SubscriptError",
    "TuningError",
    "__version__",
    "array",
    "batched_einsum",
    "einsum",
    "formula",
    "is_long",
]
