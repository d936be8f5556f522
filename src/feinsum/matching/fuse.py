"""Fusing operand expressions and epilogues into a recipe's kernel.

A recipe transforms the plain (core) einsum; :func:`fuse_part` then puts a
:class:`~feinsum.matching.fusion.Fusion` into the kernel it made, whatever the recipe:

* every read of an operand array ``a1[x, y]`` in a statement becomes the operand's
  expression at those indices (``b0[x, y] - b1[x, y]``): substitution rules, staging
  statements and register loads alike, since replay has expanded the rules; a vector
  load of it (``vloadN`` in C code) loads each array the expression reads and computes
  the expression on the vectors, where those arrays are read at the operand's indices
  and laid out as the operand;
* every statement that stores row ``r``'s output applies the epilogue: an assignment
  ``out0[idx] = v`` becomes ``out0[idx] = epilogue(idx, v)``; a ``vstoreN`` of a vector
  temporary stores the epilogue of each of its lanes, computed into a vector of its own
  just before (the lanes run along the output's contiguous axis).

Where a recipe's kernel does what this cannot see through, nothing is fused and the
reason is returned: a vector load of the operand whose expression reads other arrays at
other indices or laid out otherwise (the load's offset is the operand's), or computes
what OpenCL C vectors cannot; a C statement writing the output other than ``vstoreN``; a
kernel that reads the output back (it accumulates there: the epilogue would apply more
than once). The
fused kernel must schedule as the recipe's did. Arrays the expressions read are declared
as the user declares them (in canonical names ``b0...``), in the kernel and in the part's
reference kernel, so that :func:`~feinsum.matching.assemble.assemble` sees them unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import pymbolic.primitives as prim

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.matching.assemble import Part
    from feinsum.matching.fusion import Fusion
    from feinsum.spec.fused import Epilogue

_VSTORE = re.compile(r"^vstore(\d+)\(")


def fuse_part(part: Part, fusion: Fusion) -> Part | str:
    """*part* with *fusion* in its kernel, or why the recipe's kernel does not allow it."""
    from feinsum.errors import FeinsumError

    spec = fusion.spec
    if spec is None:
        return "nothing to fuse"
    tk = part.kernel
    try:
        decls = {name: _argument(name, decl, part, fusion)
                 for name, decl in sorted(fusion.declarations.items())}
        tk = _operands(tk, {op.array: op for op in spec.operands}, decls,
                       part.match.canonical_lengths)
        tk, ref = _declare(tk, part, fusion, decls)
        for ep in spec.epilogues:
            tk = _epilogue(tk, ep)
    except _NotFused as exc:
        return str(exc)
    except FeinsumError as exc:
        return str(exc)
    from feinsum.matching.replay import pin_loop_nests

    t_unit = _program(tk, part.callables)
    tk, problem = pin_loop_nests(t_unit, tk)
    if problem is not None:
        return f"loopy cannot schedule the fused kernel: {problem}"
    return replace(part, kernel=tk, reference=ref, fusion=fusion)


class _NotFused(Exception):
    """The recipe's kernel does not allow the fusion; the message says why."""


def _program(tk: Any, callables: Mapping[str, Any]) -> Any:
    import loopy as lp

    t_unit = lp.make_program(tk)
    extra = {k: v for k, v in callables.items() if k not in t_unit.callables_table}
    if extra:
        table = dict(t_unit.callables_table)
        table.update(extra)
        t_unit = t_unit.copy(callables_table=type(t_unit.callables_table)(table))
    return t_unit


def _c_names(insn: Any) -> set[str]:
    return set(re.findall(r"\b[A-Za-z_]\w*\b", insn.code)) | set(insn.read_variables)


# {{{ operand expressions


def _operands(tk: lp.LoopKernel, ops: Mapping[str, Any], decls: Mapping[str, Any],
              lengths: Mapping[str, int]) -> lp.LoopKernel:
    """Every read of an operand array replaced by its expression (in a vector load, the
    expression on vectors: :func:`_vector_operand`). *decls*: the arrays the expressions
    read, as the kernel will declare them; *lengths*: the lengths the kernel fixes."""
    if not ops:
        return tk
    from loopy.kernel.instruction import CInstruction
    from loopy.symbolic import IdentityMapper, SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    class Inline(IdentityMapper):  # type: ignore[misc]
        def __init__(self, within: frozenset[str]) -> None:
            super().__init__()
            self.within = within
            self.domain: Any = None

        def loops(self) -> Any:  # the statement's loop domain, made at its first read
            if self.domain is None:
                self.domain = tk.get_inames_domain(self.within)
            return self.domain

        def map_subscript(self, e: Any, *args: Any) -> Any:
            name = str(getattr(e.aggregate, "name", ""))
            if name not in ops:
                return super().map_subscript(e, *args)
            op = ops[name]
            idx = tuple(self.rec(i) for i in e.index_tuple)
            if len(idx) != len(op.arguments):
                raise _NotFused(f"the recipe reads {name} as {e}")
            read = _within(tk, name, idx, self.loops())
            subst = make_subst_func(dict(zip(op.arguments, read, strict=True)))
            return SubstitutionMapper(subst)(op.expression)

        def map_variable(self, e: Any, *args: Any) -> Any:
            if e.name in ops:
                raise _NotFused(f"the recipe uses operand {e.name} as a whole")
            return e

    insns: list[Any] = []
    for insn in tk.instructions:
        if isinstance(insn, CInstruction):
            for name in sorted(_c_names(insn) & set(ops)):
                insn = _vector_operand(tk, insn, ops[name], decls, lengths)
            insns.append(insn)
            continue
        inline = Inline(insn.within_inames)
        insns.append(insn.with_transformed_expressions(inline))
    return tk.copy(instructions=insns)


def _within(tk: lp.LoopKernel, name: str, idx: tuple[Any, ...], domain: Any
            ) -> tuple[Any, ...]:
    """*idx*, a read of operand *name*, as the in-range indices of the entry it reads
    (:mod:`feinsum.matching.read_range`): a read past an axis' end means the entries
    that follow in the operand's C order, which its expression, read index by index,
    would not give."""
    from feinsum.matching.read_range import c_order_indices, c_strides, equal, in_range

    decl = tk.arg_dict.get(name) or tk.temporary_variables.get(name)
    shape = getattr(decl, "shape", None)
    if not isinstance(shape, tuple) or len(shape) != len(idx):
        raise _NotFused(f"the recipe reads {name}, whose shape is unknown, as {idx}")
    if in_range(domain, idx, shape):
        return idx
    strides = [getattr(t, "stride", None) for t in getattr(decl, "dim_tags", None) or ()]
    if len(strides) != len(shape) or not all(s is not None and equal(s, c) for s, c in zip(
            strides, c_strides(shape), strict=True)):
        raise _NotFused(f"the recipe may read {name} past the end of an axis, and {name} is "
                        "not laid out in C order")
    return c_order_indices(idx, shape)


def _vector_operand(tk: lp.LoopKernel, insn: Any, op: Any, decls: Mapping[str, Any],
                    lengths: Mapping[str, int]) -> Any:
    """The vector load *insn* (:func:`feinsum.toolbox.cvec.vload_clamped`) of operand
    ``op.array`` loading ``op.expression`` instead: ``vloadN`` of each array it reads and
    the expression on vectors in OpenCL C, lane by lane in the clamped tail. Only for
    arrays read at the operand's own indices and laid out as the operand (the load's
    offset is theirs too), and expressions OpenCL C vectors can compute."""
    import loopy as lp
    import numpy as np
    from loopy.types import NumpyType
    from pymbolic.mapper.substitutor import SubstitutionMapper, make_subst_func

    from feinsum.spec.formulas import walk
    from feinsum.toolbox.cvec import ACCESS

    name = op.array
    found = [(w, o) for kind, w, a, o in ACCESS.findall(insn.code)
             if kind == "vload" and a == name]
    scalar = re.compile(rf"\b{re.escape(name)}\[([^\[\]]*)\]")
    tail = scalar.findall(insn.code)
    arg = tk.arg_dict.get(name)
    if len(found) != 1 or len(tail) != 1 or not isinstance(arg, lp.ArrayArg):
        raise _NotFused("the recipe reads the operand in C code other than the vector "
                        "loads feinsum can rewrite")
    own = tuple(prim.Variable(a) for a in op.arguments)
    subs = {e: str(getattr(e.aggregate, "name", "")) for e in walk(op.expression)
            if isinstance(e, prim.Subscript)}
    smap = SubstitutionMapper(make_subst_func(dict(lengths)))

    def strides(a: Any) -> list[str]:
        return [str(smap(t.stride)) for t in a.dim_tags]

    layout = strides(arg)
    for e, array in subs.items():
        b = decls.get(array)
        if (tuple(e.index_tuple) != own or not isinstance(b, lp.ArrayArg)
                or b.dtype != arg.dtype or strides(b) != layout):
            raise _NotFused("the recipe reads the operand in C code (vector loads), and its "
                            "expression reads arrays that are not laid out as the operand "
                            "at its indices")
    npdt = arg.dtype.numpy_dtype if isinstance(arg.dtype, NumpyType) else None
    suffix = "f" if npdt == np.float32 else ""
    values = {a.name for a in tk.args if isinstance(a, lp.ValueArg)}
    (width, off), (index,) = found[0], tail
    try:
        vec = _c_text(op.expression, {e: (f"vload{width}(0, {a} + {off})", e)
                                      for e, a in subs.items()}, "", "", suffix, values)
        one = _c_text(op.expression, {e: (f"{a}[{index}]", e) for e, a in subs.items()},
                      "", "", suffix, values)
    except _Scalar:
        raise _NotFused("the recipe reads the operand in C code (vector loads), and OpenCL "
                        "C vectors cannot compute its expression") from None

    def load(m: re.Match[str]) -> str:
        return vec if (m.group(1), m.group(3)) == ("vload", name) else m.group(0)

    code = scalar.sub(lambda _: one, ACCESS.sub(load, insn.code))
    reads = set(subs.values()) | _value_args(op.expression, tk)
    return insn.copy(code=code, read_variables=frozenset(insn.read_variables - {name}) | reads)


# }}}


# {{{ epilogues


def _epilogue(tk: lp.LoopKernel, ep: Epilogue) -> lp.LoopKernel:
    """Every store of ``out{row}`` applies *ep*."""
    from loopy.kernel.instruction import Assignment, CInstruction

    out = ep.output
    insns: list[Any] = []
    extra: dict[str, Any] = {}
    stored = False
    for insn in tk.instructions:
        if isinstance(insn, CInstruction):
            names = _c_names(insn)
            writes = {getattr(a, "aggregate", a).name for a in insn.assignees}
            if out in writes and _VSTORE.match(insn.code):
                new, more = _vstore(tk, insn, ep, extra)
                insns += [*more, new]
                stored = True
                continue
            if out in names:
                raise _NotFused(f"the recipe {'writes' if out in writes else 'reads'} {out} "
                                "in C code other than vstoreN")
            insns.append(insn)
            continue
        if out in insn.read_dependency_names():
            raise _NotFused(f"the recipe reads {out} back (it accumulates there)")
        if out in insn.assignee_var_names():
            if not isinstance(insn, Assignment) or len(insn.assignees) != 1:
                raise _NotFused(f"the recipe writes {out} with {type(insn).__name__}")
            insn = insn.copy(expression=_apply(ep, _indices(insn.assignee), insn.expression))
            stored = True
        insns.append(insn)
    if not stored:
        raise _NotFused(f"the recipe's kernel writes {out} nowhere feinsum can see")
    return _with_lanes(tk.copy(instructions=insns), extra)


def _indices(assignee: Any) -> tuple[Any, ...]:
    return assignee.index_tuple if isinstance(assignee, prim.Subscript) else ()


def _apply(ep: Epilogue, idx: tuple[Any, ...], value: Any) -> Any:
    from loopy.symbolic import SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    from feinsum.spec.fused import VALUE

    subst = dict(zip(ep.arguments, idx, strict=True))
    subst[VALUE] = value
    return SubstitutionMapper(make_subst_func(subst))(ep.expression)


def _vstore(tk: lp.LoopKernel, insn: Any, ep: Epilogue, lanes: dict[str, Any]
            ) -> tuple[Any, list[Any]]:
    """The ``vstoreN`` *insn* storing the epilogue of its vector, and the statements that
    compute that vector just before: the arrays the epilogue reads loaded into private
    vectors (lanes along the output's contiguous axis) and the epilogue computed on whole
    vectors in OpenCL C (vector math builtins); lane by lane where the epilogue has
    something OpenCL C vectors cannot do."""
    import loopy as lp

    from feinsum.matching.assemble import fresh_name
    from feinsum.matching.normalize import kernel_names

    vec = int(_VSTORE.match(insn.code).group(1))  # type: ignore[union-attr]
    (temp,) = [v for v in insn.read_variables if v in tk.temporary_variables]
    (assignee,) = insn.assignees
    arg = tk.arg_dict[ep.output]
    axis = [k for k, t in enumerate(arg.dim_tags or ()) if getattr(t, "stride", None) == 1]
    if len(axis) != 1:
        raise _NotFused(f"{ep.output} has no contiguous axis for its vector stores")
    taken = kernel_names(tk) | set(lanes) | set(tk.id_to_insn) | {
        k[5:] for k in lanes if k.startswith("temp:")}

    def fresh(stem: str) -> str:
        return fresh_name(stem, taken)

    lane = fresh(f"{insn.id}_lane")
    epi = fresh(f"{temp}_epilogue")
    lanes[lane] = vec
    idx = list(_indices(assignee))
    idx[axis[0]] = idx[axis[0]] + prim.Variable(lane)
    tv = tk.temporary_variables[temp]
    lanes[f"temp:{epi}"] = tv.copy(name=epi, dtype=arg.dtype)
    try:
        compute = _vector_epilogue(tk, insn, ep, tuple(idx), lane, temp, epi, vec, arg.dtype,
                                   fresh, lanes)
    except _Scalar:  # lane by lane
        value = prim.Subscript(prim.Variable(temp), (prim.Variable(lane),))
        compute = [lp.Assignment(
            prim.Subscript(prim.Variable(epi), (prim.Variable(lane),)),
            _apply(ep, tuple(idx), value), id=fresh(f"{insn.id}_epilogue"),
            depends_on=insn.depends_on, within_inames=insn.within_inames | {lane},
            predicates=insn.predicates)]
    code = re.sub(rf"\b{re.escape(temp)}\b", epi, insn.code)
    store = insn.copy(code=code, read_variables=frozenset(insn.read_variables - {temp}) | {epi},
                      depends_on=insn.depends_on | {compute[-1].id})
    return store, compute


class _Scalar(Exception):
    """The epilogue has something OpenCL C vector code cannot do."""


#: the calls the vector epilogue writes as OpenCL builtins (which take vectors)
_VECTOR_CALLS = {"sin": "sin", "cos": "cos", "tan": "tan", "exp": "exp", "log": "log",
                 "sqrt": "sqrt", "tanh": "tanh", "sinh": "sinh", "cosh": "cosh",
                 "log1p": "log1p", "expm1": "expm1", "erf": "erf", "floor": "floor",
                 "ceil": "ceil", "abs": "fabs", "fabs": "fabs", "fmin": "fmin", "fmax": "fmax"}


def _vector_epilogue(tk: Any, insn: Any, ep: Epilogue, idx: tuple[Any, ...], lane: str,
                     temp: str, epi: str, vec: int, dtype: Any, fresh: Any,
                     lanes: dict[str, Any]) -> list[Any]:
    """Loads of the arrays the epilogue reads into private vectors (or scalars, where they
    do not depend on the lane), then ``epi = <the epilogue on vectors>`` in OpenCL C."""
    import loopy as lp
    import numpy as np
    from loopy.types import NumpyType
    from pymbolic.mapper.dependency import DependencyMapper

    from feinsum.spec.formulas import walk

    npdt = dtype.numpy_dtype if isinstance(dtype, NumpyType) else None
    if npdt is None or npdt.kind != "f":
        raise _Scalar
    suffix = "f" if npdt == np.float32 else ""
    expr = _apply(ep, idx, prim.Variable(temp))
    deps: Any = DependencyMapper(composite_leaves=False)
    loads: list[Any] = []
    names: dict[Any, str] = {}
    for e in walk(expr):
        if not isinstance(e, prim.Subscript) or e in names:
            continue
        name = getattr(e.aggregate, "name", None)
        if name not in tk.arg_dict:
            raise _Scalar
        by_lane = prim.Variable(lane) in deps(e)
        t = fresh(f"{epi}_{name}")
        names[e] = t
        lanes[f"temp:{t}"] = lp.TemporaryVariable(
            t, dtype, shape=(vec,) if by_lane else (),
            dim_tags=cast(Any, "vec") if by_lane else None,
            address_space=lp.AddressSpace.PRIVATE)
        target = (prim.Subscript(prim.Variable(t), (prim.Variable(lane),)) if by_lane
                  else prim.Variable(t))
        loads.append(lp.Assignment(
            target, e, id=fresh(f"{insn.id}_load"), depends_on=insn.depends_on,
            within_inames=insn.within_inames | ({lane} if by_lane else set()),
            predicates=insn.predicates))
    text = _c_text(expr, {**{e: (t, e) for e, t in names.items()}}, temp, lane, suffix,
                   {a.name for a in tk.args if isinstance(a, lp.ValueArg)})
    reads = {temp, *names.values()}
    compute = lp.CInstruction(
        (), f"{epi} = {text};", read_variables=frozenset(reads | _value_args(expr, tk)),
        assignees=(prim.Variable(epi),), id=fresh(f"{insn.id}_epilogue"),
        depends_on=frozenset(insn.depends_on) | {x.id for x in loads},
        within_inames=insn.within_inames, predicates=insn.predicates)
    return [*loads, compute]


def _value_args(expr: Any, tk: Any) -> set[str]:
    import loopy as lp
    from pymbolic.mapper.dependency import DependencyMapper

    values = {a.name for a in tk.args if isinstance(a, lp.ValueArg)}
    found = DependencyMapper(composite_leaves=False)(expr)
    return {v.name for v in found if isinstance(v, prim.Variable) and v.name in values}


def _c_text(expr: Any, loaded: Mapping[Any, tuple[str, Any]], temp: str, lane: str,
            suffix: str, values: set[str]) -> str:
    """*expr* as OpenCL C on the vectors and scalars it was loaded into."""
    import numpy as np

    def text(e: Any) -> str:
        if isinstance(e, prim.Subscript):
            if e not in loaded:
                raise _Scalar
            t, _ = loaded[e]
            return t
        if isinstance(e, prim.Variable):
            if e.name == temp or e.name in values:
                return e.name
            raise _Scalar
        if isinstance(e, (bool, np.bool_)):
            raise _Scalar
        if isinstance(e, (int, np.integer)):
            return f"({int(e)})"
        if isinstance(e, (float, np.floating)):
            v = repr(float(e))
            if "inf" in v or "nan" in v:
                raise _Scalar
            return f"({v if any(c in v for c in '.e') else v + '.0'}{suffix})"
        if isinstance(e, prim.Sum):
            return "(" + " + ".join(text(c) for c in e.children) + ")"
        if isinstance(e, prim.Product):
            return "(" + " * ".join(text(c) for c in e.children) + ")"
        if isinstance(e, prim.Quotient):
            return f"({text(e.numerator)} / {text(e.denominator)})"
        if isinstance(e, prim.Power) and isinstance(e.exponent, int) and 1 <= e.exponent <= 4:
            return "(" + " * ".join([text(e.base)] * e.exponent) + ")"
        if isinstance(e, prim.Call) and isinstance(e.function, prim.Variable) and (
                e.function.name in _VECTOR_CALLS):
            args = ", ".join(text(p) for p in e.parameters)
            return f"{_VECTOR_CALLS[e.function.name]}({args})"
        raise _Scalar

    return text(expr)


def _with_lanes(tk: lp.LoopKernel, extra: Mapping[str, Any]) -> lp.LoopKernel:
    """*tk* with the lane loops and vector temporaries :func:`_vstore` made."""
    if not extra:
        return tk
    import islpy as isl
    import loopy as lp

    temps = dict(tk.temporary_variables)
    domains = list(tk.domains)
    lanes = []
    for name, what in extra.items():
        if name.startswith("temp:"):
            temps[name[5:]] = what
            continue
        domains.append(isl.BasicSet(f"{{ [{name}] : 0 <= {name} < {what} }}"))
        lanes.append(name)
    from loopy.kernel.data import Iname

    inames = dict(tk.inames)
    inames.update({n: Iname(n, frozenset()) for n in lanes})
    tk = tk.copy(temporary_variables=temps, domains=domains, inames=inames)
    return lp.tag_inames(tk, {n: "unr" for n in lanes})


# }}}


# {{{ declarations


def _declare(tk: lp.LoopKernel, part: Part, fusion: Fusion, declared: Mapping[str, Any]
             ) -> tuple[Any, Any]:
    """The kernel and the reference without the operand arrays, with the arrays the
    expressions read declared as the user declares them (*declared*: by
    :func:`_argument`)."""
    spec = fusion.spec
    gone = {op.array for op in spec.operands} if spec is not None else set()
    decls = list(declared.values())
    have = {a.name for a in tk.args}
    args = [a for a in tk.args if a.name not in gone] + [d for d in decls if d.name not in have]
    ref = part.reference
    ref_have = {a.name for a in ref.args}
    ref = ref.copy(args=[*ref.args, *(d for d in decls if d.name not in ref_have)])
    return tk.copy(args=args), ref


def _argument(name: str, decl: Any, part: Part, fusion: Fusion) -> Any:
    """The user's declaration *decl* as a global argument *name* of the canonical kernel
    (its length parameters in canonical names, fixed where the kernel fixes them)."""
    import loopy as lp
    from loopy.kernel.data import AddressSpace
    from loopy.types import NumpyType
    from pymbolic import var
    from pymbolic.mapper.substitutor import SubstitutionMapper, make_subst_func

    m = part.match
    subst: dict[str, Any] = {k: var(v) for k, v in m.to_canonical.items()}
    subst.update(m.canonical_lengths)
    for k, v in list(subst.items()):
        if isinstance(v, prim.Variable) and v.name in m.canonical_lengths:
            subst[k] = m.canonical_lengths[v.name]
    smap = SubstitutionMapper(make_subst_func(subst))
    dtype = decl.dtype if isinstance(decl.dtype, NumpyType) else _spec_dtype(name, fusion)
    if isinstance(decl, lp.ValueArg):
        return lp.ValueArg(name, dtype=dtype, is_input=True, is_output=False)
    if getattr(decl, "address_space", AddressSpace.GLOBAL) != AddressSpace.GLOBAL:
        raise _NotFused(f"{name} is not in global memory")
    shape = tuple(n if isinstance(n, int) else smap(n) for n in decl.shape)
    from loopy.kernel.array import FixedStrideArrayDimTag

    tags = [FixedStrideArrayDimTag(t.stride if isinstance(t.stride, int) else smap(t.stride))
            for t in decl.dim_tags]
    return lp.GlobalArg(name, dtype=dtype, shape=shape, dim_tags=tags, is_input=True,
                        is_output=False)


def _spec_dtype(name: str, fusion: Fusion) -> Any:
    for a in getattr(fusion.spec, "arrays", ()):
        if a.name == name:
            return a.dtype
    raise _NotFused(f"the dtype of {name} is unknown")


# }}}

# vim: foldmethod=marker
