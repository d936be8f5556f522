"""Loopy reduction operations with feinsum's semantics.

loopy's own ``min``/``max`` map to OpenCL's ``fmin``/``fmax``, which *ignore* NaN,
and its ``argmin``/``argmax`` keep the *last* of tied indices in a sequential loop
(the first in a local-parallel one). feinsum's semantics are numpy's: NaN
propagates, and ties go to the smallest index. loopy has no ``logsumexp``. So the
reference kernel uses these operations, parsed by loopy once this module is
imported (``feinsum.lowering.kernel`` imports it):

==================  ====================  =============================================
name in kernels     results               combine ``(a, b)``
==================  ====================  =============================================
``feinsum_min``     value                 ``a`` if ``a < b`` or ``a`` is NaN, else ``b``
``feinsum_max``     value                 ``a`` if ``a > b`` or ``a`` is NaN, else ``b``
``feinsum_argmin``  value, int32 index    the smaller value; NaN beats every number;
                                          ties (and NaNs) go to the smaller index
``feinsum_argmax``  value, int32 index    the same with the larger value
``logsumexp``       value (floating)      ``max(a, b) + log1p(exp(-|a - b|))``;
                                          ``-inf`` with ``-inf`` gives ``-inf``
==================  ====================  =============================================

Every combine is associative and commutative (up to rounding for logsumexp), so a
reduction gives the same answer sequentially, split, or local-parallel. Each is
emitted as an inline OpenCL function in the kernel's preamble.

``logsumexp`` keeps one accumulator, the log of the running sum, so that it is a
*scalar* reduction: ``out[i] = logsumexp(j, expr)`` is a single statement, like
``sum``. Its result type is floating point (an integer argument gives float64, as
``numpy.result_type(int, float32)`` does). The (max, scaled sum) pair a fast
implementation keeps is a recipe's business.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pymbolic.primitives as prim
from constantdict import constantdict
from loopy.diagnostic import LoopyError
from loopy.kernel.function_interface import ScalarCallable
from loopy.library.reduction import (
    ReductionOperation,
    ScalarReductionOperation,
    get_ge_neutral,
    get_le_neutral,
    register_reduction_parser,
)
from loopy.symbolic import ResolvedFunction
from loopy.types import LoopyType, NumpyType

# {{{ combine functions: one inline OpenCL function per (operation, dtypes)

_SCALAR_COMBINE = {
    "feinsum_min": "return (a < b{or_nan_a}) ? a : b;",
    "feinsum_max": "return (a > b{or_nan_a}) ? a : b;",
    "logsumexp": (
        "if ({nan_a} || {nan_b}) return a + b;\n"  # always floating: see result_dtypes
        "    {t} m = (a > b) ? a : b;\n"
        "    if (m == -INFINITY || m == INFINITY) return m;\n"
        "    return m + log1p(exp((a > b) ? b - a : a - b));"
    ),
}

_ARG_COMBINE = """\
inline {t} {fname}({t} v1, {it} i1, {t} v2, {it} i2, {it} *i_out)
{{
    int n1 = {nan_v1}, n2 = {nan_v2};
    int take2 = i1 < 0 || (i2 >= 0 && (n1
        ? (n2 && i2 < i1)
        : (n2 || v2 {cmp} v1 || (v2 == v1 && i2 < i1))));
    *i_out = take2 ? i2 : i1;
    return take2 ? v2 : v1;
}}
"""


#: Part of every persistent hash below: loopy caches generated code on disk, and a
#: changed combine function (or a moved module: the entries pickle its classes) must not be
#: served from an old cache entry.
_SOURCE_DIGEST = hashlib.sha256(repr((__name__, _SCALAR_COMBINE, _ARG_COMBINE)).encode()
                               ).hexdigest()[:16]


def _nan_tests(dtype: np.dtype[Any], *names: str) -> dict[str, str]:
    """``{"nan_a": "(a != a)", "or_nan_a": " || (a != a)"}`` for floating types;
    integers are never NaN (``"0"`` and ``""``: no always-false tests to warn about)."""
    floating = dtype.kind == "f"
    tests = {f"nan_{n}": f"({n} != {n})" if floating else "0" for n in names}
    tests.update({f"or_nan_{n}": f" || ({n} != {n})" if floating else "" for n in names})
    return tests


def _numpy_dtype(dtype: LoopyType | None) -> np.dtype[Any]:
    if not isinstance(dtype, NumpyType):
        raise LoopyError(f"feinsum reductions need known numpy types, got {dtype!r}")
    return dtype.numpy_dtype


def _check_real(op: str, dtype: np.dtype[Any]) -> None:
    if dtype.kind == "c":
        raise LoopyError(f"{op}: complex values ({dtype}) have no order")


class CombineCallable(ScalarCallable):
    """The combine function of one of this module's reductions, typed and emitted as a
    preamble. ``name`` is the reduction's name (``feinsum_argmin``...)."""

    def with_types(self, arg_id_to_dtype: Any, clbl_inf_ctx: Any) -> Any:
        value, other = arg_id_to_dtype.get(0), arg_id_to_dtype.get(1)
        if value is None or other is None:
            return self, clbl_inf_ctx
        if self.name in _SCALAR_COMBINE:
            value = NumpyType(np.result_type(_numpy_dtype(value), _numpy_dtype(other)))
            new = {0: value, 1: value, -1: value}
            suffix = value.numpy_dtype.name
        else:
            new = {0: value, 1: other, 2: value, 3: other, -1: value, -2: other}
            suffix = f"{_numpy_dtype(value).name}_{_numpy_dtype(other).name}"
        _check_real(self.name, _numpy_dtype(value))
        return (
            self.copy(arg_id_to_dtype=constantdict(new), name_in_target=f"{self.name}_{suffix}"),
            clbl_inf_ctx,
        )

    def update_persistent_hash(self, key_hash: Any, key_builder: Any) -> None:
        key_builder.update_for_dataclass(key_hash, self)
        key_builder.rec(key_hash, _SOURCE_DIGEST)

    def generate_preambles(self, target: Any) -> Any:
        if self.arg_id_to_dtype is None or self.name_in_target is None:
            raise LoopyError(f"{self.name}: preamble requested before type inference")
        value = self.arg_id_to_dtype[0]
        t = target.dtype_to_typename(value)
        fname = self.name_in_target
        if self.name in _SCALAR_COMBINE:
            body = _SCALAR_COMBINE[self.name].format(t=t, **_nan_tests(value.numpy_dtype, "a", "b"))
            yield fname, f"inline {t} {fname}({t} a, {t} b)\n{{\n    {body}\n}}\n"
        else:
            it = target.dtype_to_typename(self.arg_id_to_dtype[1])
            cmp = "<" if self.name == "feinsum_argmin" else ">"
            yield fname, _ARG_COMBINE.format(
                t=t, it=it, fname=fname, cmp=cmp, **_nan_tests(value.numpy_dtype, "v1", "v2")
            )


def _variable(func_id: Any) -> Any:
    """A callables-table id as what :class:`ResolvedFunction` takes."""
    return prim.Variable(func_id) if isinstance(func_id, str) else func_id


def _call_combine(
    name: str,
    dtypes: Sequence[LoopyType | None],
    operands: tuple[Any, ...],
    callables_table: Any,
) -> tuple[Any, Any]:
    from loopy.translation_unit import add_callable_to_table

    arg_dtypes = dict(enumerate(dtypes))
    clbl, callables_table = CombineCallable(name).with_types(arg_dtypes, callables_table)
    func_id, callables_table = add_callable_to_table(callables_table, name, clbl)
    return ResolvedFunction(_variable(func_id))(*operands), callables_table


# }}}


# {{{ math functions loopy's OpenCL target lacks

#: OpenCL C built-ins that :data:`feinsum.spec.formulas.FUNCTIONS` allows but loopy 2025.2
#: does not know ("Unknown function 'log1p'").
EXTRA_FUNCTIONS = ("log1p", "expm1")


class MathCallable(ScalarCallable):
    """A one-argument OpenCL math built-in on real floating values (an integer
    argument is taken as float64, as numpy does)."""

    def with_types(self, arg_id_to_dtype: Any, clbl_inf_ctx: Any) -> Any:
        if arg_id_to_dtype.get(0) is None:
            return self, clbl_inf_ctx
        if set(arg_id_to_dtype) - {-1, 0}:
            raise LoopyError(f"{self.name} takes one argument")
        dt = _numpy_dtype(arg_id_to_dtype[0])
        if dt.kind == "c":
            raise LoopyError(f"{self.name}: complex arguments ({dt}) are not supported")
        t = NumpyType(dt if dt.kind == "f" else np.dtype(np.float64))
        return (self.copy(arg_id_to_dtype=constantdict({0: t, -1: t}), name_in_target=self.name),
                clbl_inf_ctx)

    def update_persistent_hash(self, key_hash: Any, key_builder: Any) -> None:
        key_builder.update_for_dataclass(key_hash, self)
        key_builder.rec(key_hash, _SOURCE_DIGEST)


def register_extra_functions(t_unit: Any, names: Any) -> Any:
    """*t_unit* with :class:`MathCallable` registered for those of *names* in
    :data:`EXTRA_FUNCTIONS`."""
    from loopy.transform.callable import register_callable

    for name in EXTRA_FUNCTIONS:
        if name in names:
            t_unit = register_callable(t_unit, name, MathCallable(name))
    return t_unit


# }}}


# {{{ reduction operations


class _FeinsumScalarReduction(ScalarReductionOperation):
    name: ClassVar[str]

    def __str__(self) -> str:
        return self.name

    def update_persistent_hash(self, key_hash: Any, key_builder: Any) -> None:
        key_builder.rec(key_hash, (self.name, _SOURCE_DIGEST))

    def __call__(  # type: ignore[override]
        self, dtypes: Any, operand1: Any, operand2: Any, callables_table: Any, target: Any
    ) -> tuple[Any, Any]:
        (dtype,) = dtypes
        return _call_combine(self.name, (dtype, dtype), (operand1, operand2), callables_table)


class MinReduction(_FeinsumScalarReduction):
    """``feinsum_min``: a minimum through which NaN propagates."""

    name = "feinsum_min"

    def neutral_element(self, *dtypes: Any, callables_table: Any, target: Any) -> Any:
        (dtype,) = dtypes
        _check_real(self.name, _numpy_dtype(dtype))
        return get_le_neutral(dtype), callables_table


class MaxReduction(_FeinsumScalarReduction):
    """``feinsum_max``: a maximum through which NaN propagates."""

    name = "feinsum_max"

    def neutral_element(self, *dtypes: Any, callables_table: Any, target: Any) -> Any:
        (dtype,) = dtypes
        _check_real(self.name, _numpy_dtype(dtype))
        return get_ge_neutral(dtype), callables_table


class LogSumExpReduction(_FeinsumScalarReduction):
    """``logsumexp``: ``log(sum(exp(x)))`` in one pass, without overflow."""

    name = "logsumexp"

    def result_dtypes(self, *dtypes: LoopyType | None) -> tuple[LoopyType | None, ...]:
        (dtype,) = dtypes
        if dtype is None:
            return (None,)
        dt = _numpy_dtype(dtype)
        _check_real(self.name, dt)
        return (NumpyType(np.result_type(dt, np.float32)),)

    def neutral_element(self, *dtypes: Any, callables_table: Any, target: Any) -> Any:
        (result,) = self.result_dtypes(*dtypes)
        if result is None:
            raise LoopyError("logsumexp: the argument's type is unknown")
        return get_ge_neutral(result), callables_table


class _ArgReduction(ReductionOperation):
    """Value and index of the extremum; NaN wins; ties go to the smaller index."""

    name: ClassVar[str]
    neutral: ClassVar[Any]

    @property
    def arg_count(self) -> int:
        return 2

    def result_dtypes(self, *dtypes: LoopyType | None) -> tuple[LoopyType | None, ...]:
        value, index = dtypes
        return (value, index)

    def neutral_element(self, *dtypes: Any, callables_table: Any, target: Any) -> Any:
        from loopy.library.function import MakeTupleCallable
        from loopy.translation_unit import add_callable_to_table

        value, index = dtypes
        _check_real(self.name, _numpy_dtype(value))
        make_tuple, callables_table = MakeTupleCallable(name="make_tuple").with_types(
            {0: value, 1: index}, callables_table
        )
        func_id, callables_table = add_callable_to_table(callables_table, "make_tuple", make_tuple)
        neutral = type(self).neutral(value)
        return (ResolvedFunction(_variable(func_id))(neutral, index.numpy_dtype.type(-1)),
                callables_table)

    def __call__(  # type: ignore[override]
        self, dtypes: Any, operand1: Any, operand2: Any, callables_table: Any, target: Any
    ) -> tuple[Any, Any]:
        return _call_combine(self.name, dtypes, (*operand1, *operand2), callables_table)

    def __hash__(self) -> int:
        return hash(type(self))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __str__(self) -> str:
        return self.name

    def update_persistent_hash(self, key_hash: Any, key_builder: Any) -> None:
        key_builder.rec(key_hash, (self.name, _SOURCE_DIGEST))


class ArgMinReduction(_ArgReduction):
    """``feinsum_argmin``: ``value, index = feinsum_argmin(j, expr, j)``."""

    name = "feinsum_argmin"
    neutral = staticmethod(get_le_neutral)


class ArgMaxReduction(_ArgReduction):
    """``feinsum_argmax``: ``value, index = feinsum_argmax(j, expr, j)``."""

    name = "feinsum_argmax"
    neutral = staticmethod(get_ge_neutral)


# }}}

#: The reduction operation of each :data:`feinsum.spec.model.REDUCTION_KINDS` entry but ``sum``.
OPERATIONS: dict[str, type[ReductionOperation]] = {
    "min": MinReduction,
    "max": MaxReduction,
    "argmin": ArgMinReduction,
    "argmax": ArgMaxReduction,
    "logsumexp": LogSumExpReduction,
}
_BY_NAME = {cls.name: cls for cls in OPERATIONS.values()}  # type: ignore[attr-defined]


def parse_reduction(name: str) -> ReductionOperation | None:
    """loopy reduction parser for this module's operation names."""
    cls = _BY_NAME.get(name)
    return cls() if cls is not None else None


def register() -> None:
    """Teach loopy's parser the names above (done once, on import)."""
    from loopy.library import reduction

    if not any(getattr(p, "__qualname__", None) == parse_reduction.__qualname__
               and getattr(p, "__module__", None) == __name__
               for p in reduction._REDUCTION_OP_PARSERS):
        register_reduction_parser(parse_reduction)


register()

# vim: foldmethod=marker
