"""What the matcher reads from one loopy kernel: loop domains (lengths), arrays (shapes,
dtypes, layouts), reads and writes, and how to describe an index that is not plain."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pymbolic.primitives as prim

if TYPE_CHECKING:
    from feinsum.spec.model import Array, Length

_NUMBER = (int, float, complex, np.number)


class _Reject(Exception):
    """Internal: why one statement is not an einsum (the message's reason part)."""


def _reduction_kind(red: Any) -> str | None:
    from feinsum.spec.formulas import reduction_name

    name = reduction_name(red)
    if name.startswith("feinsum_"):
        name = name[len("feinsum_"):]
    if name in ("sum", "min", "max", "argmin", "argmax", "logsumexp"):
        return name
    return None


def _expr_str(expr: Any) -> str:
    if isinstance(expr, tuple):
        return "(" + ", ".join(_expr_str(e) for e in expr) + ")"
    return str(expr)


def _insn_str(insn: Any) -> str:
    if not hasattr(insn, "expression"):  # barriers, no-ops, C instructions
        return str(insn)
    lhs = ", ".join(str(a) for a in insn.assignees)
    return f"{lhs} = {insn.expression}"


class _Kernel:
    """What the analysis needs from one loopy kernel, with caches."""

    def __init__(self, knl: Any, dtypes: Mapping[str, Any] | None, *,
                 scalar_arrays: bool = False) -> None:
        from loopy.kernel.data import AddressSpace, ValueArg

        self.knl = knl
        #: a 0-d array argument read as a factor is a scalar (survey_einsums' flag)
        self.scalar_arrays = scalar_arrays
        self.name = knl.name
        self.args = {a.name: a for a in knl.args}
        self.temps = dict(knl.temporary_variables)
        self.value_args = {a.name for a in knl.args if isinstance(a, ValueArg)}
        self.inames = set(knl.all_inames())
        self.rules = dict(knl.substitutions)
        self.dtypes = {k: np.dtype(v) for k, v in (dtypes or {}).items()}
        self.global_space = AddressSpace.GLOBAL
        self.insns = list(knl.instructions)
        self.position = {insn.id: k for k, insn in enumerate(self.insns)}
        self.by_id = {insn.id: insn for insn in self.insns}
        self._domain_cache: dict[str, Length] = {}
        self._array_cache: dict[str, Array] = {}
        self.missing_dtypes: set[str] = set()
        self._writers: dict[str, list[str]] | None = None
        self._readers: dict[str, list[str]] | None = None
        self.used_names = (
            set(self.args) | set(self.temps) | self.inames | set(self.rules)
        )
        self._expr_counter = itertools.count()

    # {{{ reads / writes

    def _rw(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        if self._writers is not None and self._readers is not None:
            return self._writers, self._readers
        writers: dict[str, list[str]] = {}
        readers: dict[str, list[str]] = {}
        for insn in self.insns:
            for v in insn.assignee_var_names():
                writers.setdefault(v, []).append(insn.id)
            for v in insn.read_dependency_names():
                readers.setdefault(v, []).append(insn.id)
        self._writers, self._readers = writers, readers
        return writers, readers

    def writers(self, var: str) -> list[str]:
        return self._rw()[0].get(var, [])

    def readers(self, var: str) -> list[str]:
        return self._rw()[1].get(var, [])

    def depends(self, later: str, earlier: str) -> bool:
        """Whether statement *later* depends (transitively) on *earlier*."""
        return earlier in dependencies(self.by_id, later)

    # }}}

    # {{{ loop domains

    def length(self, iname: str) -> Length:
        """The number of values *iname* runs over: an int or a length parameter's name.
        Raises :class:`_Reject` unless the loop is ``0 <= iname < L``, independent of
        every other loop."""
        if iname in self._domain_cache:
            return self._domain_cache[iname]
        import islpy as isl

        dom = self.knl.get_inames_domain(frozenset([iname]))
        if dom.dim(isl.dim_type.div):
            dom = dom.remove_redundancies()
        if dom.dim(isl.dim_type.div) and dom.project_out_except(
            [iname], [isl.dim_type.set]
        ).remove_redundancies().dim(isl.dim_type.div):
            raise _Reject(
                f"the loop domain of {iname!r} is not an interval (strided or modular "
                f"constraints: {dom}); only rectangular domains 0 <= {iname} < L are supported"
            )
        var_dict = dom.get_var_dict()
        lower: list[Any] = []
        upper: list[Any] = []
        for c in dom.get_constraints():
            coeffs = {k: int(v.to_python()) for k, v in c.get_coefficients_by_name().items()
                      if not v.is_zero()}
            if iname not in coeffs:
                continue
            others = [k for k in coeffs if k != 1 and k != iname
                      and var_dict.get(k, (None,))[0] == isl.dim_type.set]
            if others:
                raise _Reject(
                    f"the bounds of loops {iname!r} and {sorted(others)[0]!r} depend on each "
                    f"other (non-rectangular domain {dom}); only rectangular domains are "
                    "supported"
                )
            if c.is_equality():
                raise _Reject(f"loop {iname!r} is fixed by the equality {c} (domain {dom})")
            (lower if coeffs[iname] > 0 else upper).append((coeffs, c))
        if len(lower) != 1 or len(upper) != 1:
            which = "lower" if len(lower) != 1 else "upper"
            n = len(lower) if which == "lower" else len(upper)
            raise _Reject(
                f"loop {iname!r} has {n} {which} bounds in domain {dom}; feinsum needs exactly "
                f"0 <= {iname} < L"
            )
        (lc, _), (uc, ucon) = lower[0], upper[0]
        params_l = {k: v for k, v in lc.items() if k not in (1, iname)}
        if lc[iname] != 1 or params_l or lc.get(1, 0) != 0:
            lo = _bound_text(lc, iname, lower=True)
            raise _Reject(
                f"loop {iname!r} starts at {lo}, not 0 (domain {dom}); feinsum only holds loops "
                f"0 <= {iname} < L"
            )
        params_u = {k: v for k, v in uc.items() if k not in (1, iname)}
        const = uc.get(1, 0)
        length: Length
        if uc[iname] != -1:
            raise _Reject(f"loop {iname!r} has a strided upper bound {ucon} (domain {dom})")
        if not params_u:
            length = const + 1
        elif len(params_u) == 1 and next(iter(params_u.values())) == 1 and const == -1:
            (length,) = params_u
            if length not in self.value_args:
                raise _Reject(
                    f"the length {length!r} of loop {iname!r} is not a kernel argument "
                    "(data-dependent loop bounds are not supported)"
                )
        else:
            raise _Reject(
                f"loop {iname!r} runs over {_bound_text(uc, iname, lower=False)} values (domain "
                f"{dom}); a length must be an integer or a single length parameter"
            )
        if isinstance(length, int) and length < 1:
            raise _Reject(f"loop {iname!r} is empty (domain {dom})")
        self._domain_cache[iname] = length
        return length

    # }}}

    # {{{ arrays

    def variable_kind(self, name: str) -> str:
        if name in self.args:
            return "value" if name in self.value_args else "array"
        if name in self.temps:
            return "temporary"
        if name in self.inames:
            return "iname"
        if name in self.rules:
            return "rule"
        return "unknown"

    def dtype_of(self, name: str) -> np.dtype[Any] | None:
        decl = self.args.get(name) or self.temps.get(name)
        dt = getattr(decl, "dtype", None)
        from loopy.types import NumpyType

        if isinstance(dt, NumpyType):
            if name in self.dtypes and self.dtypes[name] != dt.numpy_dtype:
                raise _Reject(
                    f"dtypes= gives {name!r} dtype {self.dtypes[name]} but the kernel declares "
                    f"{dt.numpy_dtype}"
                )
            return dt.numpy_dtype
        return self.dtypes.get(name)

    def array(self, name: str) -> Array:
        """The spec Array of kernel array *name* (argument or global temporary)."""
        if name in self._array_cache:
            return self._array_cache[name]
        from feinsum.errors import SpecificationError
        from feinsum.spec.model import Array

        if name in self.temps:
            tv = self.temps[name]
            if tv.address_space != self.global_space:
                raise _Reject(
                    f"it reads {name!r}, a temporary computed in the kernel that is not in "
                    "global memory; only kernel arguments and global temporaries can be "
                    "einsum inputs"
                )
        decl = self.args.get(name) or self.temps[name]
        shape = getattr(decl, "shape", None)
        if shape is None or not isinstance(shape, tuple):
            raise _Reject(f"array {name!r} has no known shape")
        unit = self.unit_axes(name)
        lengths: list[Length] = []
        for k, n in enumerate(shape):
            if k not in unit:
                lengths.append(self._shape_length(name, k, n))
        order = self._order(decl, name)
        dt = self.dtype_of(name)
        if dt is None:
            self.missing_dtypes.add(name)
            dt = np.dtype(np.float64)
        try:
            a = Array(name, tuple(lengths), dt, order)  # type: ignore[arg-type]
        except SpecificationError as exc:
            raise _Reject(f"array {name!r}: {exc}") from exc
        self._array_cache[name] = a
        return a

    def unit_axes(self, name: str) -> tuple[int, ...]:
        """The axes of length 1 of array *name*: the matcher sees the array without them
        (an ``(E, 1)`` array as ``(E,)``), indexed by the constant 0 there."""
        decl = self.args.get(name) or self.temps.get(name)
        shape = getattr(decl, "shape", None)
        if not isinstance(shape, tuple):
            return ()
        unit = tuple(k for k, n in enumerate(shape)
                     if isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n == 1)
        if unit and len(unit) == len(shape):
            raise _Reject(f"array {name!r} of shape {shape} holds a single value; feinsum "
                          "reads it as a scalar parameter (a ValueArg) and writes it as a 0-d "
                          "array (shape ())")
        return unit

    def squeeze(self, sub: prim.Subscript) -> prim.Subscript:
        """Access *sub* without the indices of its array's length-1 axes, which must be the
        constant 0."""
        name = sub.aggregate.name  # type: ignore[union-attr]
        unit = self.unit_axes(name)
        if not unit:
            return sub
        idx = sub.index_tuple
        if len(idx) != len(self.shape_of(name)):
            raise _Reject(f"{sub} uses {len(idx)} indices but {name!r} has rank "
                          f"{len(self.shape_of(name))}")
        for k in unit:
            if not (_is_number(idx[k]) and idx[k] == 0):
                raise _Reject(
                    f"{sub}: axis {k} of {name!r} has length 1 and is indexed by {idx[k]}, not "
                    "0 (loops that run once: feinsum.matching.prepare_kernel removes them)")
        return prim.Subscript(sub.aggregate,
                              tuple(i for k, i in enumerate(idx) if k not in unit))

    def shape_of(self, name: str) -> tuple[Any, ...]:
        decl = self.args.get(name) or self.temps.get(name)
        shape = getattr(decl, "shape", None)
        return shape if isinstance(shape, tuple) else ()

    def squeezed_shape(self, name: str) -> tuple[Any, ...] | None:
        """The declared shape of *name* without its length-1 axes (None if unknown)."""
        decl = self.args.get(name) or self.temps.get(name)
        shape = getattr(decl, "shape", None)
        if not isinstance(shape, tuple):
            return None
        unit = self.unit_axes(name)
        return tuple(n for k, n in enumerate(shape) if k not in unit)

    def scalar(self, name: str) -> Array:
        """A ValueArg as a 0-d array."""
        if name in self._array_cache:
            return self._array_cache[name]
        from feinsum.errors import SpecificationError
        from feinsum.spec.model import Array

        dt = self.dtype_of(name)
        if dt is None:
            self.missing_dtypes.add(name)
            dt = np.dtype(np.float64)
        try:
            a = Array(name, (), dt)
        except SpecificationError as exc:
            raise _Reject(f"scalar {name!r}: {exc}") from exc
        self._array_cache[name] = a
        return a

    def _shape_length(self, name: str, axis: int, n: Any) -> Length:
        if isinstance(n, (int, np.integer)):
            return int(n)
        if isinstance(n, prim.Variable):
            return n.name
        raise _Reject(
            f"axis {axis} of array {name!r} has length {n}, which is neither an integer nor a "
            "length parameter"
        )

    def _order(self, decl: Any, name: str) -> str:
        import loopy as lp

        shape = getattr(decl, "shape", ())
        unit = self.unit_axes(name)
        if len(shape) - len(unit) <= 1 or decl.dim_tags is None:
            return "C"
        for order in ("C", "F"):
            ref = lp.GlobalArg(name, shape=shape, order=order)
            if ref.dim_tags == decl.dim_tags:
                return order
        # a length-1 axis has no stride that matters: compare the others
        strides = [getattr(t, "stride", None) for k, t in enumerate(decl.dim_tags or ())
                   if k not in unit]
        kept = tuple(n for k, n in enumerate(shape) if k not in unit)
        for order in ("C", "F"):
            ref = lp.GlobalArg(name, shape=kept, order=order)
            if [getattr(t, "stride", None) for t in ref.dim_tags or ()] == strides:
                return order
        raise _Reject(
            f"array {name!r} has strides {tuple(str(t) for t in decl.dim_tags)}, neither C nor F "
            "order"
        )

    # }}}

    def fresh_name(self, stem: str, taken: set[str]) -> str:
        for k in itertools.count():
            name = f"{stem}{k}"
            if name not in self.used_names and name not in taken:
                taken.add(name)
                return name
        raise AssertionError  # pragma: no cover


def dependencies(by_id: Mapping[str, Any], insn_id: str) -> set[str]:
    """Every statement statement *insn_id* depends on, directly or not."""
    seen: set[str] = set()
    stack = [insn_id]
    while stack:
        for dep in by_id[stack.pop()].depends_on:
            if dep not in seen and dep in by_id:
                seen.add(dep)
                stack.append(dep)
    return seen


def _bound_text(coeffs: Mapping[Any, int], iname: str, lower: bool) -> str:
    """``c + p`` for a bound constraint ``±iname + c + p >= 0``."""
    terms = []
    for k, v in coeffs.items():
        if k in (1, iname):
            continue
        v = -v if lower else v
        terms.append(k if v == 1 else f"{v}*{k}")
    const = coeffs.get(1, 0)
    const = -const if lower else const + 1
    if const or not terms:
        terms.append(str(const))
    return " + ".join(terms).replace("+ -", "- ")


# }}}



def _is_number(x: Any) -> bool:
    return isinstance(x, _NUMBER) and not isinstance(x, bool)


def _index_problem(idx: Any, kk: _Kernel) -> str:
    """Why *idx* (an index expression) is not a plain loop index."""
    from pymbolic.mapper.dependency import DependencyMapper

    if _is_number(idx):
        return f"constant index {idx}"
    if isinstance(idx, prim.Variable):
        kind = kk.variable_kind(idx.name)
        if kind == "value":
            return f"{idx.name!r} is a kernel parameter, not a loop index"
        return f"{idx.name!r} is not a loop index"
    has_subscript = any(isinstance(d, prim.Subscript) for d in _walk_all(idx))
    if has_subscript:
        return f"indirect indexing ({idx})"
    deps = {v.name for v in DependencyMapper(composite_leaves=False)(idx)
            if isinstance(v, prim.Variable)}
    loops = [d for d in deps if d in kk.inames]
    if isinstance(idx, prim.Sum) and len(loops) == 1 and any(_is_number(c) for c in idx.children):
        return f"shifted index {idx}"
    if isinstance(idx, prim.Product) and len(loops) == 1 and all(
        _is_number(c) or isinstance(c, prim.Variable) for c in idx.children
    ):
        return f"strided index {idx}"
    if isinstance(idx, prim.Sum) and len(loops) >= 2 and all(
        isinstance(c, prim.Variable) or _is_number(c) for c in idx.children
    ):
        return f"index {idx} combines several loops"
    return f"non-affine index {idx}"


def _walk_all(expr: Any) -> Iterable[Any]:
    from feinsum.spec.formulas import walk

    if isinstance(expr, tuple):
        for e in expr:
            yield from _walk_all(e)
        return
    yield from walk(expr)


# vim: foldmethod=marker
