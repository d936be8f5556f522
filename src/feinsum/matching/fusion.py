"""What of a kernel's elementwise work can be fused into its einsums: operand expressions
and epilogues (:mod:`feinsum.spec.fused`), found in the user's (prepared) kernel.

The preparation (:mod:`feinsum.matching.prepare`) and array compilers themselves split a
statement such as ``out = sin(div) + 0.25*sum(j, M[i, j]*(div[e, j] - lift[e, j]))`` into
an elementwise statement ``t[e, j] = div[e, j] - lift[e, j]``, the einsum ``red[e, i] =
sum(j, M[i, j]*t[e, j])`` and ``out[e, i] = sin(div[e, i]) + 0.25*red[e, i]``: two global
temporaries the program did not ask for. :func:`find_fusions` finds, per match,

* **operand expressions**: a global temporary the einsum reads, written by one elementwise
  statement over its whole range (``t = div - lift``) and read by nothing else;
* **epilogues**: a global temporary the einsum writes, read by one elementwise statement
  only at the entry it writes, over its whole range, into an array of the same shape and
  layout (``out = sin(div) + 0.25*red``) that only it writes;

with the checks that moving them into the einsum keeps every value (their inputs are
complete before the einsum runs, no cycle of dependencies appears). A statement that
reads the outputs of several einsums is the epilogue of the last of them. The result is a
:class:`Fusion` per match: the :class:`~feinsum.spec.fused.FusedEinsum` in the match's
canonical names, the statements it absorbs and the name maps back to the kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pymbolic.primitives as prim

from feinsum.matching.kernel import dependencies

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.matching.model import Match
    from feinsum.spec.fused import FusedEinsum


@dataclass(frozen=True)
class Fusion:
    """What can be fused into one match (see the module docstring).

    :attr spec: the fused einsum, in the match's canonical names (arrays only the
        expressions read are named ``b0, b1...``).
    :attr statements: the kernel's statements the fused einsum computes too.
    :attr names: canonical name -> kernel name for the names the fusion adds (``b0``...,
        and ``out{r}`` -> the epilogue's output).
    :attr dropped: the temporaries the fused einsum no longer writes or reads.
    :attr declarations: ``b0``... -> the kernel's declaration of that array.
    :attr notes: the candidates that were not fused, and why.
    """

    spec: FusedEinsum | None
    statements: tuple[str, ...] = ()
    names: Mapping[str, str] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()
    declarations: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: canonical operand array -> (the statement its expression comes from, the kernel's
    #: temporary it writes)
    operand_statements: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: canonical operand arrays whose expressions must be fused (folded factors:
    #: :mod:`feinsum.matching.folding`), whatever they cost
    required: frozenset[str] = frozenset()


def _equal(a: Any, b: Any) -> bool:
    """Whether two lengths (integers or expressions of length parameters) are equal: as
    functions of their parameters, compared at a few points."""
    from pymbolic import evaluate
    from pymbolic.mapper.dependency import DependencyMapper

    if a is None or b is None:
        return False
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    deps: Any = DependencyMapper(composite_leaves=False)
    names = sorted({v.name for x in (a, b) if not isinstance(x, int) for v in deps(x)})
    try:
        return all(evaluate(a, env) == evaluate(b, env) for env in (
            {n: 7 + 3 * k + p for k, n in enumerate(names)} for p in (0, 11, 1000)))
    except Exception:  # not arithmetic: unequal
        return False


class _Refused(Exception):
    """A candidate that cannot be fused; the message says why."""


# {{{ the kernel's reads and writes


class _Kernel:
    def __init__(self, knl: lp.LoopKernel, matches: Sequence[Match]) -> None:
        self.knl = knl
        self.by_id = {i.id: i for i in knl.instructions}
        self.writers: dict[str, list[str]] = {}
        self.readers: dict[str, list[str]] = {}
        for insn in knl.instructions:
            for v in insn.assignee_var_names():
                self.writers.setdefault(v, []).append(insn.id)
            for v in insn.read_dependency_names():
                self.readers.setdefault(v, []).append(insn.id)
        self.owner = {i: k for k, m in enumerate(matches) for i in m.all_insn_ids}
        #: the dtype of every einsum output (temporaries the kernel declares without one)
        self.computed = {o[0]: m.einsum.value_dtype(r) for m in matches
                         for r, o in enumerate(m.outputs)}
        self._deps: dict[str, set[str]] = {}

    def deps(self, insn_id: str) -> set[str]:
        if insn_id not in self._deps:
            self._deps[insn_id] = dependencies(self.by_id, insn_id)
        return self._deps[insn_id]

    def global_temporary(self, name: str) -> bool:
        from loopy.kernel.data import AddressSpace

        tv = self.knl.temporary_variables.get(name)
        return tv is not None and tv.address_space == AddressSpace.GLOBAL

    def declaration(self, name: str) -> Any:
        return self.knl.arg_dict.get(name) or self.knl.temporary_variables.get(name)

    def elementwise(self, insn_id: str, what: str) -> tuple[Any, list[str]]:
        """The statement *insn_id* if it is an unconditional elementwise assignment over
        the whole of the array it writes, with its loop indices in the array's axis order;
        else :class:`_Refused`."""
        from loopy.kernel.instruction import Assignment
        from loopy.symbolic import Reduction

        from feinsum.matching.split import loop_extent
        from feinsum.spec.formulas import walk

        insn = self.by_id[insn_id]
        if not isinstance(insn, Assignment) or insn.predicates:
            raise _Refused(f"{what} {insn_id!r} is not an unconditional assignment")
        if any(isinstance(e, Reduction) for e in walk(insn.expression)):
            raise _Refused(f"{what} {insn_id!r} has a reduction")
        a = insn.assignee
        if not (isinstance(a, prim.Subscript) and isinstance(a.aggregate, prim.Variable)):
            raise _Refused(f"{what} {insn_id!r} does not write an array entry")
        idx = a.index_tuple
        loops = [i.name for i in idx if isinstance(i, prim.Variable)]
        if len(loops) != len(idx) or len(set(loops)) != len(loops) or (
                set(loops) != set(insn.within_inames)):
            raise _Refused(f"{what} {insn_id!r} writes {a}: not one loop index per axis")
        shape = getattr(self.declaration(a.aggregate.name), "shape", None)
        if not isinstance(shape, tuple) or len(shape) != len(loops) or not all(
                _equal(loop_extent(self.knl, i), n) for i, n in zip(loops, shape, strict=True)):
            raise _Refused(f"{what} {insn_id!r} does not write the whole of "
                           f"{a.aggregate.name!r}")
        return insn, loops

    def reads_complete(self, insn: Any, what: str) -> None:
        """Every array *insn* reads is written only by statements *insn* depends on, and
        only global memory and arguments are read."""
        from loopy.kernel.data import AddressSpace

        deps = self.deps(insn.id)
        for name in sorted(insn.read_dependency_names()):
            tv = self.knl.temporary_variables.get(name)
            if tv is not None and tv.address_space != AddressSpace.GLOBAL:
                raise _Refused(f"{what} {insn.id!r} reads {name!r}, which is not in global "
                               "memory")
            if name in self.knl.substitutions:
                raise _Refused(f"{what} {insn.id!r} uses the substitution rule {name!r}")
            late = [w for w in self.writers.get(name, []) if w not in deps]
            if late:
                raise _Refused(f"{what} {insn.id!r} reads {name!r}, which statement "
                               f"{late[0]!r} writes without {insn.id!r} waiting for it")


# }}}


# {{{ candidates


def _operand(kk: _Kernel, m: Match, k: int, name: str, taken: set[str]) -> str:
    """The statement whose expression array *name* of match *k* can be fused as (its id;
    not one of *taken*, the epilogues); :class:`_Refused` if none."""
    if name in m.squeezed:
        raise _Refused(f"operand {name!r} is read without its length-1 axes")
    writers = kk.writers.get(name, [])
    if len(writers) != 1:
        raise _Refused(f"operand {name!r} has {len(writers)} writers")
    (w,) = writers
    if w in kk.owner:
        raise _Refused(f"operand {name!r} is an einsum's output")
    if w in taken:
        raise _Refused(f"statement {w!r} is fused into another einsum as its epilogue")
    others = [r for r in kk.readers.get(name, []) if kk.owner.get(r) != k]
    if others:
        raise _Refused(f"operand {name!r} is also read by statement {others[0]!r}")
    insn, _ = kk.elementwise(w, "statement")
    if name in insn.read_dependency_names():
        raise _Refused(f"statement {w!r} reads what it writes")
    kk.reads_complete(insn, "statement")
    return w


def _epilogue(kk: _Kernel, m: Match, k: int, row: int, taken: set[str]) -> str:
    """The statement that can be row *row*'s epilogue (its id); :class:`_Refused` if none."""
    if len(m.outputs[row]) != 1:
        raise _Refused(f"row {row} has an index output")
    out = m.outputs[row][0]
    readers = kk.readers.get(out, [])
    if len(readers) != 1:
        raise _Refused(f"output {out!r} has {len(readers)} readers")
    (p,) = readers
    if p in kk.owner:
        raise _Refused(f"output {out!r} is read by an einsum")
    if p in taken:
        raise _Refused(f"statement {p!r} is fused into a later einsum")
    if set(kk.writers.get(out, [])) - set(m.all_insn_ids):
        raise _Refused(f"output {out!r} is also written by other statements")
    insn, _ = kk.elementwise(p, "statement")
    target = insn.assignee.aggregate.name
    if target == out or target in insn.read_dependency_names():
        raise _Refused(f"statement {p!r} reads what it writes")
    if kk.writers.get(target, []) != [p]:
        raise _Refused(f"{target!r} has other writers than statement {p!r}")
    _same_layout(kk, out, target, m.einsum.value_dtype(row))
    for r in kk.readers.get(target, []):
        if p not in kk.deps(r):
            raise _Refused(f"statement {r!r} reads {target!r} without waiting for {p!r}")
    from pymbolic.mapper.dependency import DependencyMapper

    from feinsum.spec.formulas import walk

    for e in walk(insn.expression):
        if isinstance(e, prim.Subscript) and getattr(e.aggregate, "name", None) == out and (
                e.index_tuple != insn.assignee.index_tuple):
            raise _Refused(f"statement {p!r} reads {out!r} at another entry than it writes")
    plain = _without_entries(insn.expression, out)
    if prim.Variable(out) in DependencyMapper(composite_leaves=False)(plain):
        raise _Refused(f"statement {p!r} reads {out!r} as a whole")
    mine = set(m.all_insn_ids)
    other_rows = {o for r, outs in enumerate(m.outputs) if r != row for o in outs}
    if insn.read_dependency_names() & other_rows:
        raise _Refused(f"statement {p!r} reads another output of the same einsum")
    for d in kk.deps(p) - mine:
        if kk.deps(d) & mine:
            raise _Refused(f"statement {p!r} waits for statement {d!r}, which waits for the "
                           "einsum")
    kk.reads_complete(insn, "statement")
    return p


def _without_entries(expr: Any, name: str) -> Any:
    """*expr* with every entry of array *name* replaced by 0."""
    from loopy.symbolic import IdentityMapper

    class Drop(IdentityMapper):  # type: ignore[misc]
        def map_subscript(self, e: Any, *args: Any) -> Any:
            if getattr(e.aggregate, "name", None) == name:
                return 0
            return super().map_subscript(e, *args)

    return Drop()(expr)


def _same_layout(kk: _Kernel, out: str, target: str, dtype: np.dtype[Any]) -> None:
    from loopy.types import NumpyType

    a, b = kk.declaration(out), kk.declaration(target)
    strides = [tuple(getattr(t, "stride", None) for t in (d.dim_tags or ())) for d in (a, b)]
    if a.shape != b.shape or strides[0] != strides[1]:
        raise _Refused(f"{target!r} has another shape or layout than {out!r}")
    if getattr(b, "offset", 0) not in (0, None):
        raise _Refused(f"{target!r} has an offset")
    if isinstance(b.dtype, NumpyType) and b.dtype.numpy_dtype != dtype:
        raise _Refused(f"{target!r} is {b.dtype.numpy_dtype}, the einsum computes {dtype}")


# }}}


def find_fusions(knl: lp.LoopKernel, matches: Sequence[Match]) -> list[Fusion]:
    """Per match (in order), what can be fused into it (see the module docstring)."""
    kk = _Kernel(knl, matches)
    epilogues: dict[int, dict[int, str]] = {k: {} for k in range(len(matches))}
    notes: dict[int, list[str]] = {k: [] for k in range(len(matches))}
    taken: set[str] = set()
    # a statement reading several einsums' outputs is the epilogue of the last of them
    for k in sorted(range(len(matches)), key=lambda k: -_position(kk, matches[k])):
        m = matches[k]
        for row, outs in enumerate(m.outputs):
            if not kk.global_temporary(outs[0]):
                continue
            try:
                p = _epilogue(kk, m, k, row, taken)
            except _Refused as exc:
                notes[k].append(f"epilogue of {outs[0]!r} not fused: {exc}")
                continue
            if p in epilogues[k].values():
                notes[k].append(f"epilogue of {outs[0]!r} not fused: statement {p!r} is "
                                "another row's epilogue")
                continue
            epilogues[k][row] = p
            taken.add(p)
    result = []
    for k, m in enumerate(matches):
        operands: dict[str, str] = {}
        for a in m.einsum.arrays:
            if not kk.global_temporary(a.name):
                continue
            try:
                operands[a.name] = _operand(kk, m, k, a.name, taken)
            except _Refused as exc:
                if kk.writers.get(a.name):
                    notes[k].append(f"operand {a.name!r} not fused: {exc}")
        result.append(_fusion(kk, m, operands, epilogues[k], tuple(notes[k])))
    return result


def _position(kk: _Kernel, m: Match) -> int:
    order = {i.id: n for n, i in enumerate(kk.knl.instructions)}
    return max(order[i] for i in m.all_insn_ids)


# {{{ the fused einsum in canonical names


def _fusion(kk: _Kernel, m: Match, operands: Mapping[str, str], epilogues: Mapping[int, str],
            notes: tuple[str, ...]) -> Fusion:
    if not operands and not epilogues:
        return Fusion(None, notes=notes)
    from feinsum.spec.fused import VALUE, Epilogue, FusedEinsum, OperandExpression

    to_c = m.to_canonical
    namer = _Namer(kk, m)
    ops, eps, targets = [], [], {}
    try:
        for name, w in operands.items():
            insn, loops = kk.elementwise(w, "statement")
            column = next(c for _, c, f in m.einsum.factors()
                          if getattr(f, "name", None) == name)
            args = tuple(to_c[i] for i in m.einsum.in_indices[column])
            ops.append(OperandExpression(to_c[name], args, namer.expression(
                insn.expression, dict(zip(loops, args, strict=True)))))
        for row, p in epilogues.items():
            insn, loops = kk.elementwise(p, "statement")
            args = tuple(to_c[i] for i in m.einsum.out_indices)
            out = f"out{m.isomorphism.rows[row]}"
            eps.append(Epilogue(m.isomorphism.rows[row], args, namer.expression(
                insn.expression, dict(zip(loops, args, strict=True)),
                {m.outputs[row][0]: prim.Variable(VALUE)}), out))
            targets[out] = insn.assignee.aggregate.name
        spec = FusedEinsum(m.canonical, tuple(sorted(ops, key=lambda o: o.array)),
                           tuple(sorted(eps, key=lambda e: e.row)), tuple(namer.arrays))
    except Exception as exc:  # an expression or array feinsum cannot describe: fuse nothing
        return Fusion(None, notes=(*notes, f"nothing fused: {exc}"))
    names = {b: u for u, b in namer.extra.items()}
    names.update(targets)
    dropped = (*operands, *(m.outputs[r][0] for r in epilogues))
    return Fusion(spec, (*operands.values(), *epilogues.values()), names, dropped,
                  {b: kk.declaration(u) for u, b in namer.extra.items()}, notes,
                  {to_c[u]: (w, u) for u, w in operands.items()})


class ExtraArrays:
    """The arrays a fusion's expressions read besides the core's (``b0, b1...``, in the
    order they were first read): their kernel names, declarations and specs, as a fusion
    has them, extended as expressions added to it read more."""

    def __init__(self, fusion: Fusion, arrays: tuple[Any, ...]) -> None:
        self.names = dict(fusion.names)
        self.declarations = dict(fusion.declarations)
        self.arrays = list(arrays)
        self._by_user = {u: b for b, u in self.names.items() if b in self.declarations}

    def name(self, user: str, declaration: Any, spec: Callable[[str], Any]) -> str:
        """The canonical name of kernel array *user* (declared as *declaration*; its
        :class:`~feinsum.spec.model.Array` under a name: *spec*), a new one if it has none."""
        if user not in self._by_user:
            b = self._by_user[user] = f"b{len(self.arrays)}"
            self.names[b], self.declarations[b] = user, declaration
            self.arrays.append(spec(b))
        return self._by_user[user]


def without_operands(fusion: Fusion, reasons: Mapping[str, str]) -> tuple[Fusion, list[str]]:
    """*fusion* without the operand expressions of the canonical arrays *reasons* names
    (their statements and temporaries stay in the kernel), and a note for each, with its
    reason."""
    from feinsum.spec.fused import FusedEinsum

    spec = fusion.spec
    if spec is None:
        return fusion, []
    gone = [op for op in spec.operands if op.array in reasons]
    notes = [f"operand {fusion.operand_statements.get(op.array, ('', op.array))[1]!r} not "
             f"fused: {reasons[op.array]}" for op in gone]
    statements = {fusion.operand_statements[op.array][0] for op in gone
                  if op.array in fusion.operand_statements}
    temporaries = {fusion.operand_statements[op.array][1] for op in gone
                   if op.array in fusion.operand_statements}
    operands = tuple(op for op in spec.operands if op.array not in reasons)
    new_spec = (FusedEinsum(spec.einsum, operands, spec.epilogues, spec.arrays)
                if operands or spec.epilogues else None)
    return Fusion(new_spec, tuple(s for s in fusion.statements if s not in statements),
                  fusion.names, tuple(d for d in fusion.dropped if d not in temporaries),
                  fusion.declarations, fusion.notes,
                  {k: v for k, v in fusion.operand_statements.items() if k not in reasons},
                  fusion.required), notes


class _Namer:
    """The expressions of a match's fused statements in its canonical names: its own
    arrays (length-1 axes dropped, as the match reads them) and lengths by their canonical
    names, every other array ``b0, b1...`` in order of first appearance."""

    def __init__(self, kk: _Kernel, m: Match) -> None:
        self.kk, self.m = kk, m
        self.extra: dict[str, str] = {}
        self.arrays: list[Any] = []

    def name(self, user: str) -> str:
        to_c = self.m.to_canonical
        if user in to_c:
            return to_c[user]
        if user not in self.extra:
            self.extra[user] = f"b{len(self.extra)}"
            self.arrays.append(self._array(user, self.extra[user]))
        return self.extra[user]

    def _array(self, user: str, name: str) -> Any:
        from loopy.types import NumpyType

        from feinsum.spec.model import Array

        decl = self.kk.declaration(user)
        dt = getattr(decl, "dtype", None)
        dtype = dt.numpy_dtype if isinstance(dt, NumpyType) else self._dtype(user)
        shape = getattr(decl, "shape", None) or ()
        lengths = self.m.to_canonical
        dims = tuple(n if isinstance(n, int) else lengths.get(str(n), str(n)) for n in shape)
        strides = [getattr(t, "stride", None) for t in (getattr(decl, "dim_tags", None) or ())]
        order: Literal["C", "F"] = (
            "F" if len(strides) > 1 and strides[0] == 1 and strides[-1] != 1 else "C")
        return Array(name, dims, dtype, order)

    def _dtype(self, user: str) -> np.dtype[Any]:
        """The dtype of an array the kernel declares without one (an einsum's output)."""
        if user in self.kk.computed:
            return self.kk.computed[user]
        raise _Refused(f"the dtype of {user!r} is unknown")

    def expression(self, expr: Any, loops: Mapping[str, str],
                   replace: Mapping[str, Any] | None = None) -> Any:
        from loopy.symbolic import IdentityMapper

        namer, squeezed, values = self, self.m.squeezed, dict(replace or {})

        class Rename(IdentityMapper):  # type: ignore[misc]
            def map_variable(self, e: Any, *args: Any) -> Any:
                if e.name in loops:
                    return prim.Variable(loops[e.name])
                if e.name in values:
                    return values[e.name]
                if e.name in namer.kk.knl.all_inames():
                    raise _Refused(f"loop index {e.name!r}")
                return prim.Variable(namer.name(e.name))

            def map_subscript(self, e: Any, *args: Any) -> Any:
                name = e.aggregate.name
                if name in values:
                    return values[name]
                idx = tuple(self.rec(i) for i in e.index_tuple)
                if name in squeezed:
                    idx = tuple(i for n, i in enumerate(idx) if n not in squeezed[name])
                return prim.Subscript(prim.Variable(namer.name(name)), idx)

            def map_call(self, e: Any, *args: Any) -> Any:
                return prim.Call(e.function, tuple(self.rec(p) for p in e.parameters))

        return Rename()(expr)


# }}}

# vim: foldmethod=marker
