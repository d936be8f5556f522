"""Statements -> rows: one statement (``out[i] = sum(j, ...)``, argmin/argmax pairs of
outputs, products without reduction) or an accumulation (``acc = 0`` /
``acc = acc + ...`` / ``out[i] = acc``) becomes one row of a batched einsum."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pymbolic.primitives as prim

from feinsum.matching.factors import _Factor, _GroupState, _RowBuilder
from feinsum.matching.kernel import (
    _expr_str,
    _index_problem,
    _insn_str,
    _is_number,
    _Kernel,
    _reduction_kind,
    _Reject,
    _walk_all,
)


@dataclass
class _Row:
    insn_ids: tuple[str, ...]
    position: int
    outputs: tuple[str, ...]
    out_sub: tuple[str, ...]
    reduction: str
    red_inames: tuple[str, ...]
    factors: list[_Factor]
    const: Any = None
    #: True when the row came from a reduction or a product of >= 2 non-scalar factors
    interesting: bool = True
    #: the variable an accumulation sums into (its dtype is the computation's)
    accumulator: str | None = None

    @property
    def inputs(self) -> set[str]:
        names = set()
        for f in self.factors:
            if f.kind in ("array", "scalar"):
                names.add(f.obj.name)
            elif f.kind == "formula":
                names.add(f.obj.name)
                names.update(a.name for a in f.obj.arrays)
        return names




def _is_zero(expr: Any) -> bool:
    return _is_number(expr) and expr == 0


def _out_indices(assignee: Any, kk: _Kernel) -> tuple[str, tuple[str, ...]]:
    if isinstance(assignee, prim.Variable):
        name = assignee.name
        decl = kk.args.get(name) or kk.temps.get(name)
        if decl is None:
            raise _Reject(f"it writes {name!r}, which the kernel does not declare")
        if getattr(decl, "shape", ()) not in ((), None):
            raise _Reject(f"it writes array {name!r} without subscripts")
        return name, ()
    if not (isinstance(assignee, prim.Subscript) and isinstance(assignee.aggregate, prim.Variable)):
        raise _Reject(f"the output {assignee} is not an array element")
    name = assignee.aggregate.name
    if kk.variable_kind(name) in ("array", "temporary"):
        assignee = kk.squeeze(assignee)
    idx = []
    for i in assignee.index_tuple:
        if not isinstance(i, prim.Variable) or i.name not in kk.inames:
            raise _Reject(
                f"output {assignee}: {_index_problem(i, kk)}; every output index must be a "
                "plain loop index"
            )
        idx.append(i.name)
    dup = sorted({i for i in idx if idx.count(i) > 1})
    if dup:
        raise _Reject(f"output {assignee} repeats index {dup[0]!r}")
    return name, tuple(idx)


def _check_output(kk: _Kernel, name: str, out_sub: tuple[str, ...], assignee: Any) -> None:
    decl = kk.args.get(name) or kk.temps.get(name)
    if decl is None:
        raise _Reject(f"it writes {name!r}, which the kernel does not declare")
    if name in kk.value_args:
        raise _Reject(f"it writes the scalar parameter {name!r}")
    shape = kk.squeezed_shape(name)
    if shape is None:
        return
    if len(shape) != len(out_sub):
        raise _Reject(f"output {assignee} uses {len(out_sub)} indices but {name!r} has rank "
                      f"{len(shape)}")
    for k, (i, n) in enumerate(zip(out_sub, shape, strict=True)):
        length = kk.length(i)
        if kk._shape_length(name, k, n) != length:
            raise _Reject(
                f"axis {k} of output {name!r} has length {n} but loop {i!r} runs over {length} "
                "values (a partial write); feinsum needs equal lengths"
            )


def _analyze_rhs(kk: _Kernel, state: _GroupState, where: str, rhs: Any,
                 out_sub: tuple[str, ...], loop_inames: Iterable[str], extra_red: Sequence[str],
                 outputs: Sequence[str]) -> tuple[str, list[str], _RowBuilder]:
    """Reduction kind, reduction inames and factors of a statement's right-hand side."""
    from loopy.symbolic import Reduction

    rb = _RowBuilder(kk, where, state)
    rb.out_sub = tuple(out_sub)
    spec_inames = set(out_sub) | set(extra_red)
    rb.red_inames.extend(extra_red)
    for i in itertools.chain(out_sub, extra_red):
        kk.length(i)
    kind = "sum"
    body = rhs
    if isinstance(rhs, Reduction):
        k = _reduction_kind(rhs)
        if k is None:
            from feinsum.spec.formulas import reduction_name

            raise _Reject(
                f"reduction {reduction_name(rhs)!r} is not one feinsum holds (sum, min, max, "
                "argmin, argmax, logsumexp)"
            )
        if extra_red and k != "sum":
            raise _Reject(f"a {k} reduction inside an accumulation loop")
        kind = k
        inames = list(rhs.inames)
        body = rhs.expr
        # nested reductions of the same kind: one reduction over several indices
        while isinstance(body, Reduction) and _reduction_kind(body) == kind and kind in (
            "sum", "min", "max", "logsumexp"
        ):
            inames.extend(body.inames)
            body = body.expr
        for i in inames:
            if i in spec_inames or i in rb.red_inames:
                raise _Reject(f"reduction index {i!r} is also an index of the output or reduced "
                              "twice")
            kk.length(i)
            rb.red_inames.append(i)
            spec_inames.add(i)
        if kind in ("argmin", "argmax"):
            if len(inames) != 1:
                raise _Reject(f"{kind} over {len(inames)} indices ({', '.join(inames)}); feinsum's "
                              f"{kind} has exactly one reduction index")
            if not (isinstance(body, tuple) and len(body) == 2):
                raise _Reject(f"{kind} needs (value, index) arguments")
            value, index = body
            if not (isinstance(index, prim.Variable) and index.name == inames[0]):
                raise _Reject(f"the index argument of {kind} is {index}, not the reduction index "
                              f"{inames[0]!r}")
            body = value
            if len(outputs) != 2:
                raise _Reject(f"{kind} must write a value and an index output")
        elif len(outputs) != 1:
            raise _Reject(f"a {kind} reduction with {len(outputs)} outputs")
        if isinstance(body, tuple):
            raise _Reject(f"a {kind} reduction over a tuple {_expr_str(body)}")
    else:
        if len(outputs) != 1:
            raise _Reject("a statement with several outputs that is not an argmin/argmax")
        if isinstance(rhs, prim.Sum) and any(
            isinstance(e, Reduction) for e in _walk_all(rhs)
        ):
            nred = sum(1 for c in rhs.children if any(isinstance(e, Reduction)
                                                     for e in _walk_all(c)))
            raise _Reject(
                f"the right-hand side is a sum of terms, {nred} of them reductions: that is "
                "several einsums, not one; write each as its own statement"
            )
    # every loop of the statement must index the output or be reduced
    loops = set(loop_inames)
    stray = sorted(loops - set(out_sub) - set(rb.red_inames))
    if stray:
        raise _Reject(
            f"it runs inside loop {stray[0]!r}, which does not index the output "
            f"{outputs[0]!r} (each iteration overwrites the same element)"
        )
    missing = sorted(set(out_sub) - loops)
    if missing:
        raise _Reject(f"output index {missing[0]!r} is not a loop the statement runs in")
    rb.add_product(body, spec_inames, kind == "sum")
    for i in rb.red_inames:
        if not any(i in f.indices for f in rb.factors):
            raise _Reject(f"reduction index {i!r} indexes no operand (its length would be a "
                          "factor); feinsum needs every reduction index to index an array or "
                          "formula argument")
    for i in out_sub:
        if not any(i in f.indices for f in rb.factors):
            raise _Reject(f"output index {i!r} indexes no operand (a broadcast); feinsum needs "
                          "every output index to index an array or formula argument")
    reads = {n for f in rb.factors for n in ((f.obj.name,) if f.kind != "formula" else
                                             tuple(a.name for a in f.obj.arrays))}
    own = sorted(reads & set(outputs))
    if own:
        raise _Reject(f"it reads its own output {own[0]!r}")
    return kind, rb.red_inames, rb


def _statement_row(kk: _Kernel, state: _GroupState, insn: Any) -> _Row:
    from loopy.kernel.instruction import Assignment, CallInstruction
    from loopy.symbolic import Reduction

    if not isinstance(insn, (Assignment, CallInstruction)):
        raise _Reject(f"a {type(insn).__name__} is not an assignment")
    if insn.predicates:
        raise _Reject(f"it is conditional (if {' and '.join(str(p) for p in insn.predicates)})")
    rhs = insn.expression
    if isinstance(insn, CallInstruction) and not isinstance(rhs, Reduction):
        raise _Reject("it is a function call")
    outs: list[tuple[str, tuple[str, ...], Any]] = []
    for a in insn.assignees:
        name, sub = _out_indices(a, kk)
        outs.append((name, sub, a))
    subs = {s for _, s, _ in outs}
    if len(subs) != 1:
        raise _Reject("its outputs are written with different indices")
    out_sub = outs[0][1]
    outputs = tuple(n for n, _, _ in outs)
    for name, _, a in outs:
        _check_output(kk, name, out_sub, a)
    kind, red, rb = _analyze_rhs(kk, state, "", rhs, out_sub, insn.within_inames, (), outputs)
    return _make_row(kk, state, (insn.id,), kk.position[insn.id], outputs, out_sub, kind, red, rb,
                     isinstance(rhs, Reduction))


def _make_row(kk: _Kernel, state: _GroupState, ids: tuple[str, ...], position: int,
              outputs: tuple[str, ...], out_sub: tuple[str, ...], kind: str,
              red: Sequence[str], rb: _RowBuilder, is_reduction: bool) -> _Row:
    factors = list(rb.factors)
    const = rb.const
    if _is_number(const) and const != 1:
        if isinstance(const, complex) or np.iscomplexobj(const):
            raise _Reject(f"complex constant factor {const}")
        factors.append(_Factor("const", state.constant(const), ()))
    elif not _is_number(const):  # pragma: no cover - const is always a number
        raise _Reject(f"constant factor {const}")
    nontrivial = sum(1 for f in factors if f.indices)
    return _Row(ids, position, outputs, out_sub, kind, tuple(red), factors, const,
                interesting=bool(red) or nontrivial >= 2 or is_reduction)


def _accumulations(kk: _Kernel, state: _GroupState, selected: Callable[[Any], bool],
                   errors: dict[str, str]) -> tuple[list[_Row], set[str]]:
    """``acc = 0; acc = acc + body (inside more loops); out[...] = acc`` (or the same with
    ``out[...]`` as the accumulator): one row each."""
    from loopy.kernel.instruction import Assignment

    rows: list[_Row] = []
    used: set[str] = set()
    for upd in kk.insns:
        if not isinstance(upd, Assignment) or upd.id in used:
            continue
        rhs = upd.expression
        if not isinstance(rhs, prim.Sum) or len(rhs.children) < 2:
            continue
        lhs = upd.assignee
        rest = [c for c in rhs.children if c != lhs]
        if len(rest) != len(rhs.children) - 1:
            continue
        if not isinstance(lhs, (prim.Variable, prim.Subscript)):
            continue
        var = upd.assignee_name
        inits = [i for i in kk.writers(var) if i != upd.id]
        init_insns = [kk.by_id[i] for i in inits if isinstance(kk.by_id[i], Assignment)
                      and kk.by_id[i].assignee == lhs]
        if len(init_insns) > 1:
            zeros = [i for i in init_insns if _is_zero(i.expression)]
            init_insns = zeros[:1]
        if len(init_insns) != 1:
            continue
        init = init_insns[0]
        ids = [init.id, upd.id]
        where = f"statements {init.id!r}, {upd.id!r}"
        try:
            others = sorted(set(inits) - {init.id})
            if others:
                raise _Reject(f"the accumulator {var!r} is also written by {others[0]!r}")
            if not _is_zero(init.expression):
                raise _Reject(
                    f"the accumulator {lhs} starts at {init.expression}, not 0 (the statement "
                    f"{init.id!r}); only sums from 0 are einsums"
                )
            if init.predicates or upd.predicates:
                raise _Reject("the accumulation is conditional")
            if not kk.depends(upd.id, init.id):
                raise _Reject(f"{upd.id!r} does not depend on the initialisation {init.id!r}; "
                              "their order is not determined")
            W = set(init.within_inames)
            if not set(upd.within_inames) >= W:
                raise _Reject(f"the accumulation {upd.id!r} does not run inside every loop of "
                              f"its initialisation {init.id!r}")
            extra = [i for i in sorted(set(upd.within_inames) - W)]
            body = prim.Sum(tuple(rest)) if len(rest) > 1 else rest[0]
            if var in kk.temps and not kk.temps[var].shape and var not in kk.args:
                # a scalar temporary: find the statement that copies it out
                readers = [i for i in kk.readers(var) if i != upd.id]
                if len(readers) != 1:
                    raise _Reject(f"the accumulator {var!r} is read by {len(readers)} statements "
                                  "besides the accumulation")
                fin = kk.by_id[readers[0]]
                if not (isinstance(fin, Assignment) and fin.expression == prim.Variable(var)):
                    raise _Reject(f"the accumulator {var!r} is used in {fin.id!r} "
                                  f"({_insn_str(fin)}), not copied to an output")
                if not kk.depends(fin.id, upd.id):
                    raise _Reject(f"{fin.id!r} does not depend on the accumulation {upd.id!r}")
                fw = set(fin.within_inames)
                if fw - W:
                    raise _Reject(
                        f"the accumulator {var!r} is initialised by {init.id!r} outside loop "
                        f"{sorted(fw - W)[0]!r}, so it is not reset for each output element "
                        f"written by {fin.id!r}"
                    )
                if W - fw:
                    raise _Reject(f"{fin.id!r} does not run in the loops of {init.id!r}")
                ids.append(fin.id)
                out_assignee = fin.assignee
                where = f"statements {', '.join(repr(i) for i in ids)}"
            elif var in kk.temps and kk.temps[var].address_space != kk.global_space:
                raise _Reject(f"the accumulator {var!r} is an array temporary")
            else:
                out_assignee = lhs
            if not any(selected(kk.by_id[i]) for i in ids):
                continue
            name, out_sub = _out_indices(out_assignee, kk)
            _check_output(kk, name, out_sub, out_assignee)
            if set(out_sub) != W:
                stray = sorted(W - set(out_sub))
                if stray:
                    raise _Reject(
                        f"it runs inside loop {stray[0]!r}, which does not index the output "
                        f"{name!r} (each iteration overwrites the same element)"
                    )
                raise _Reject(f"output index {sorted(set(out_sub) - W)[0]!r} is not a loop of "
                              f"the initialisation {init.id!r}")
            kind, red, rb = _analyze_rhs(kk, state, where, body, out_sub,
                                         upd.within_inames, extra, (name,))
            if var != name and var in {f.obj.name for f in rb.factors if f.kind != "formula"}:
                raise _Reject(f"it reads its accumulator {var!r}")
            row = _make_row(kk, state, tuple(ids), kk.position[ids[-1]], (name,), out_sub,
                            kind, red, rb, True)
            row.accumulator = var
            rows.append(row)
            used.update(ids)
        except _Reject as exc:
            used.update(ids)
            text = f"{where} ({'; '.join(_insn_str(kk.by_id[i]) for i in ids)}): {exc}"
            for i in ids:
                errors[i] = text
    return rows, used


# vim: foldmethod=marker
