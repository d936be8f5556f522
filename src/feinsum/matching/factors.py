"""Turning the right-hand side of a statement into factors: array accesses, scalars,
constants, substitution rules (seen through or formula operands) and inline formulas."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pymbolic.primitives as prim

from feinsum.matching.kernel import (
    _index_problem,
    _is_number,
    _Kernel,
    _reduction_kind,
    _Reject,
    _walk_all,
)

if TYPE_CHECKING:
    from feinsum.spec.model import Array, Formula


@dataclass
class _Factor:
    kind: str  # "array", "scalar", "formula", "const"
    obj: Any  # Array | Formula
    indices: tuple[str, ...]
    rule: str | None = None


def _plain_indices(sub: Any, kk: _Kernel, where: str, allowed: set[str] | None = None
                   ) -> tuple[str, ...]:
    """The inames of array access *sub*; rejects anything but distinct plain inames."""
    idx = sub.index_tuple
    result: list[str] = []
    for i in idx:
        if not isinstance(i, prim.Variable) or i.name not in kk.inames or (
            allowed is not None and i.name not in allowed
        ):
            if isinstance(i, prim.Variable) and i.name in kk.inames:
                raise _Reject(f"{where} {sub} uses loop index {i.name!r} outside its loop")
            raise _Reject(
                f"{where} {sub}: {_index_problem(i, kk)}; feinsum only holds plain loop "
                "indices (no shifts, strides, constants, expressions or indirection)"
            )
        result.append(i.name)
    dup = sorted({i for i in result if result.count(i) > 1})
    if dup:
        raise _Reject(
            f"{where} {sub} repeats index {dup[0]!r} (a diagonal); diagonals and traces are not "
            "supported"
        )
    return tuple(result)


def _expand_rules(expr: Any, kk: _Kernel, depth: int = 0) -> Any:
    """Inline every substitution-rule invocation in *expr* (recursively)."""
    from loopy.symbolic import IdentityMapper, SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    if depth > 20:
        raise _Reject("substitution rules nest too deeply (recursive rules?)")

    class Expander(IdentityMapper):  # type: ignore[misc]
        def map_call(self, e: Any, *args: Any) -> Any:
            if isinstance(e.function, prim.Variable) and e.function.name in kk.rules:
                rule = kk.rules[e.function.name]
                params = tuple(self.rec(p) for p in e.parameters)
                if len(params) != len(rule.arguments):
                    raise _Reject(f"{e} passes {len(params)} arguments to rule "
                                  f"{rule.name!r} of {len(rule.arguments)}")
                body = SubstitutionMapper(make_subst_func(
                    dict(zip(rule.arguments, params, strict=True))))(rule.expression)
                return _expand_rules(body, kk, depth + 1)
            return super().map_call(e, *args)

        def map_variable(self, e: Any, *args: Any) -> Any:
            if e.name in kk.rules and not kk.rules[e.name].arguments:
                return _expand_rules(kk.rules[e.name].expression, kk, depth + 1)
            return e

    return Expander()(expr)


def _uses_rules(expr: Any, kk: _Kernel) -> bool:
    for e in _walk_all(expr):
        if isinstance(e, prim.Call) and isinstance(e.function, prim.Variable) and (
            e.function.name in kk.rules
        ):
            return True
        if isinstance(e, prim.Variable) and e.name in kk.rules:
            return True
    return False


def _plain_product(expr: Any, kk: _Kernel, args: Sequence[str]) -> bool:
    """Whether a rule body is a product of plain array accesses over the rule's arguments,
    scalars and numbers (such a rule is seen through)."""
    from loopy.symbolic import Reduction

    def ok(e: Any) -> bool:
        if _is_number(e):
            return True
        if isinstance(e, prim.Product):
            return all(ok(c) for c in e.children)
        if isinstance(e, prim.Power):
            return isinstance(e.exponent, int) and e.exponent >= 1 and ok(e.base)
        if isinstance(e, prim.Variable):
            return kk.variable_kind(e.name) == "value"
        if isinstance(e, prim.Subscript):
            return (
                isinstance(e.aggregate, prim.Variable)
                and kk.variable_kind(e.aggregate.name) in ("array", "temporary")
                and all(isinstance(i, prim.Variable) and i.name in args for i in e.index_tuple)
            )
        if isinstance(e, Reduction):
            return False
        return False

    return ok(expr)


class _RowBuilder:
    """Turns the right-hand side of one statement into factors."""

    def __init__(self, kk: _Kernel, where: str, group_state: _GroupState) -> None:
        self.kk = kk
        self.where = where
        self.state = group_state
        self.factors: list[_Factor] = []
        self.const: Any = 1
        self.red_inames: list[str] = []
        self.out_sub: tuple[str, ...] = ()

    # {{{ factors

    def add_product(self, expr: Any, spec_inames: set[str], outer_sum: bool) -> None:
        """Add the factors of *expr*; *spec_inames* are the loop indices the statement's
        einsum is over (output + reduction); sums nested as factors are pulled out when
        the outer reduction is a sum."""
        from loopy.symbolic import Reduction

        kk = self.kk
        if _is_number(expr):
            self.const = self.const * expr
            return
        if isinstance(expr, prim.Product):
            for c in expr.children:
                self.add_product(c, spec_inames, outer_sum)
            return
        if isinstance(expr, prim.Power) and isinstance(expr.exponent, (int, np.integer)) and (
            expr.exponent >= 1
        ) and not _is_number(expr.base):
            for _ in range(int(expr.exponent)):
                self.add_product(expr.base, spec_inames, outer_sum)
            return
        if outer_sum and isinstance(expr, Reduction) and _reduction_kind(expr) == "sum":
            for iname in expr.inames:
                if iname in spec_inames or iname in self.red_inames:
                    raise _Reject(f"reduction index {iname!r} is reduced twice")
                kk.length(iname)
                self.red_inames.append(iname)
            self.add_product(expr.expr, spec_inames | set(expr.inames), outer_sum)
            return
        if isinstance(expr, prim.Subscript) and isinstance(expr.aggregate, prim.Variable):
            name = expr.aggregate.name
            kind = kk.variable_kind(name)
            if kind in ("array", "temporary"):
                expr = kk.squeeze(expr)
                indices = _plain_indices(expr, kk, "access", spec_inames)
                arr = kk.array(name)
                self._check_access_lengths(arr, indices, expr)
                self.factors.append(_Factor("array", arr, indices))
                return
            if kind == "value":
                raise _Reject(f"{expr} subscripts the scalar parameter {name!r}")
            raise _Reject(f"{expr} subscripts {name!r}, which is not an array of the kernel")
        if isinstance(expr, prim.Variable):
            kind = kk.variable_kind(expr.name)
            if kind == "value":
                if any(expr.name == n for a in kk.args.values()
                       for n in _shape_names(getattr(a, "shape", None))) or any(
                    expr.name == v for v in kk._domain_cache.values()
                ):
                    raise _Reject(
                        f"it multiplies by {expr.name!r}, which is also a length; "
                        "a length cannot be a factor"
                    )
                self.factors.append(_Factor("scalar", kk.scalar(expr.name), ()))
                return
            if kind == "rule":
                return self.add_rule(prim.Call(expr, ()), spec_inames, outer_sum)
            if kind == "temporary":
                tv = kk.temps[expr.name]
                if tv.shape:
                    raise _Reject(f"array {expr.name!r} is read without subscripts")
                raise _Reject(
                    f"it reads the scalar temporary {expr.name!r}, computed in the kernel; "
                    "pass it as a kernel argument (a ValueArg) instead"
                )
            if kind == "array":
                arr = kk.array(expr.name)
                if arr.ndim:
                    raise _Reject(f"array {expr.name!r} is read without subscripts")
                if kk.scalar_arrays:
                    self.factors.append(_Factor("scalar", arr, ()))
                    return
                raise _Reject(
                    f"it reads the 0-d array argument {expr.name!r}; pass scalar parameters "
                    "as ValueArgs"
                )
            if kind == "unknown":
                raise _Reject(f"it reads {expr.name!r}, which the kernel does not declare")
            # an iname used as a value: a formula of that index
        if isinstance(expr, prim.Call) and isinstance(expr.function, prim.Variable) and (
            expr.function.name in kk.rules
        ):
            return self.add_rule(expr, spec_inames, outer_sum)
        self.add_formula(expr, spec_inames)

    def _check_access_lengths(self, arr: Array, indices: Sequence[str], expr: Any) -> None:
        for k, (i, n) in enumerate(zip(indices, arr.shape, strict=True)):
            length = self.kk.length(i)
            if length != n:
                raise _Reject(
                    f"in {expr}, axis {k} of {arr.name!r} has length {n} but loop {i!r} runs "
                    f"over {length} values (a partial read); feinsum needs equal lengths"
                )

    def add_rule(self, call: Any, spec_inames: set[str], outer_sum: bool) -> None:
        kk = self.kk
        rule = kk.rules[call.function.name]
        if len(call.parameters) != len(rule.arguments):
            raise _Reject(f"{call} passes {len(call.parameters)} arguments to rule "
                          f"{rule.name!r} of {len(rule.arguments)}")
        body = _expand_rules(rule.expression, kk)
        if _plain_product(body, kk, rule.arguments):
            from loopy.symbolic import SubstitutionMapper
            from pymbolic.mapper.substitutor import make_subst_func

            inlined = SubstitutionMapper(make_subst_func(
                dict(zip(rule.arguments, call.parameters, strict=True))))(body)
            self.add_product(inlined, spec_inames, outer_sum)
            return
        indices = _plain_indices(prim.Subscript(call.function, tuple(call.parameters)), kk,
                                 "invocation", spec_inames)
        binding = dict(zip(rule.arguments, indices, strict=True))
        f = self.state.formula(rule.name, tuple(rule.arguments), body, binding, self, rule.name)
        self.factors.append(_Factor("formula", f, indices, rule.name))

    def add_formula(self, expr: Any, spec_inames: set[str]) -> None:
        """An inline non-product factor: a formula over the loop indices it uses (in the
        statement's order of indices: output indices first, then reduction indices)."""
        from loopy.symbolic import Reduction

        kk = self.kk
        expr = _expand_rules(expr, kk) if _uses_rules(expr, kk) else expr
        bound: set[str] = set()
        for e in _walk_all(expr):
            if isinstance(e, Reduction):
                bound.update(e.inames)
        used: list[str] = []
        for e in _walk_all(expr):
            if isinstance(e, prim.Variable) and e.name in kk.inames and e.name not in bound and (
                e.name not in used
            ):
                if e.name not in spec_inames:
                    raise _Reject(f"{expr} uses loop index {e.name!r} outside its loop")
                used.append(e.name)
        rank = {i: k for k, i in enumerate((*self.out_sub, *self.red_inames))}
        used.sort(key=lambda i: rank.get(i, len(rank)))
        binding = {i: i for i in used}
        f = self.state.formula(None, tuple(used), expr, binding, self, None)
        self.factors.append(_Factor("formula", f, tuple(used)))

    # }}}


def _squeeze_accesses(expr: Any, kk: _Kernel) -> Any:
    """*expr* as a formula reads it: every access to an array with length-1 axes squeezed
    (kk.squeeze), and functions loopy has resolved (type-inferred kernels call
    ``ResolvedFunction("sin")``) called by name again."""
    from loopy.symbolic import IdentityMapper

    class Squeeze(IdentityMapper):  # type: ignore[misc]
        def map_subscript(self, e: Any, *args: Any) -> Any:
            e = super().map_subscript(e, *args)
            if isinstance(e.aggregate, prim.Variable) and kk.variable_kind(
                e.aggregate.name
            ) in ("array", "temporary"):
                return kk.squeeze(e)
            return e

        def map_resolved_function(self, e: Any, *args: Any) -> Any:
            return prim.Variable(str(e.name))

    return Squeeze()(expr)


def _shape_names(shape: Any) -> list[str]:
    if not shape:
        return []
    return [n.name for n in shape if isinstance(n, prim.Variable)]


class _GroupState:
    """Formula objects shared by every row of one analysis (names stay unique)."""

    def __init__(self, kk: _Kernel) -> None:
        self.kk = kk
        self.by_key: dict[Any, Formula] = {}
        self.taken: set[str] = set()
        self.sources: dict[str, str | None] = {}

    def formula(self, name: str | None, args: tuple[str, ...], body: Any,
                binding: Mapping[str, str], rb: _RowBuilder, rule: str | None) -> Formula:
        from loopy.symbolic import Reduction

        from feinsum.errors import SpecificationError
        from feinsum.spec.model import Formula

        kk = self.kk
        body = _squeeze_accesses(body, kk)
        arrays: dict[str, Array] = {}
        features: list[str] = []
        for e in _walk_all(body):
            if isinstance(e, Reduction):
                for iname in e.inames:
                    if iname not in kk.inames:
                        raise _Reject(f"feature index {iname!r} of {body} is not a loop index")
                    if iname in binding.values() or iname in args:
                        raise _Reject(f"in {body}, feature index {iname!r} is also a loop "
                                      "index of the einsum")
                    features.append(iname)
        # an array's name inside its own access is not a read of a scalar
        subscripted = {e.aggregate.name for e in _walk_all(body)
                       if isinstance(e, prim.Subscript) and isinstance(e.aggregate, prim.Variable)}
        for e in _walk_all(body):
            if isinstance(e, prim.Subscript) and isinstance(e.aggregate, prim.Variable):
                aname = e.aggregate.name
                kind = kk.variable_kind(aname)
                if kind not in ("array", "temporary"):
                    raise _Reject(f"{e} in {body} subscripts {aname!r}, which is not an array")
                arr = kk.array(aname)
                for k, i in enumerate(e.index_tuple):
                    if not isinstance(i, prim.Variable) or (
                        i.name not in args and i.name not in features
                    ):
                        raise _Reject(
                            f"{e} in {body}: {_index_problem(i, kk)}; feinsum only holds plain "
                            "loop indices (no shifts, strides, constants, expressions or "
                            "indirection)"
                        )
                    loop = binding.get(i.name, i.name)
                    length = kk.length(loop)
                    if k < arr.ndim and arr.shape[k] != length:
                        raise _Reject(
                            f"in {e}, axis {k} of {aname!r} has length {arr.shape[k]} but loop "
                            f"{loop!r} runs over {length} values (a partial read)"
                        )
                arrays.setdefault(aname, arr)
            elif isinstance(e, prim.Variable) and e.name not in subscripted:
                kind = kk.variable_kind(e.name)
                if kind == "value" and e.name not in args:
                    arrays.setdefault(e.name, kk.scalar(e.name))
                elif kind == "temporary" and e.name not in args:
                    raise _Reject(f"{body} reads the temporary {e.name!r} computed in the "
                                  "kernel")
        key = (name, args, body, tuple(arrays.values()))
        if key in self.by_key:
            return self.by_key[key]
        if name is None:
            fname = kk.fresh_name("expr", self.taken)
        else:
            fname = name
            self.taken.add(name)
        try:
            f = Formula(fname, args, body, tuple(arrays.values()))
        except SpecificationError as exc:
            raise _Reject(str(exc)) from exc
        self.by_key[key] = f
        self.sources[fname] = rule
        return f

    def constant(self, value: Any) -> Formula:
        from feinsum.spec.model import Formula

        if isinstance(value, (int, np.integer, np.floating)):
            # a Python float, weak as numpy's (a compiler's numpy.float32(0.4) keeps its
            # value, 0.4000000059604645, and a float32 einsum float32; the spec's text
            # parses back)
            value = float(value)
        key = ("const", value)
        if key in self.by_key:
            return self.by_key[key]
        f = Formula(self.kk.fresh_name("const", self.taken), (), value, ())
        self.by_key[key] = f
        self.sources[f.name] = None
        return f


# vim: foldmethod=marker
