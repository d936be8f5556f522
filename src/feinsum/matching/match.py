"""Finding batched einsums and kernel reductions in loopy kernels.

The analysis reads a loopy kernel statement by statement and builds, for every
statement that is an einsum or a kernel reduction, one *row*: its output(s), the
loop indices of the output, the reduction and the list of *factors* whose product
is reduced. Rows that share their loop nest, their structure and at least one input
are then grouped into one :class:`~feinsum.BatchedEinsum` (one row per output, in
kernel statement order). Everything is named as in the kernel:

* indices are the kernel's inames,
* arrays are the kernel's arrays (arguments or global temporaries),
* length symbols are the kernel's length parameters (``0 <= i < n`` gives ``"n"``);
  fixed bounds give integers (long ones included: :func:`feinsum.canonicalize`
  abstracts lengths ``>= LONG_THRESHOLD`` itself),
* formulas are named as the substitution rules they come from.

How factors are represented (see ``docs/compiler-guide.rst``):

* every array access ``A[i, j]`` is a column of its own (``x[j]**2`` is two columns
  ``x[j]``, exactly like ``x[j]*x[j]``);
* a substitution rule whose body is only a product of plain array accesses and
  scalars (``Aij(a, b) := A[a, b]``) is seen through, so that the kernel gets the
  same key as the one that reads ``A`` directly; any other rule is a formula operand
  named as the rule;
* any other factor (``exp(-x[i]*y[j])``, ``b[j] + c[j]``) is a formula operand named
  ``expr0``, ``expr1``... over the loop indices it uses;
* a scalar parameter (a ``ValueArg`` such as ``alpha``) is a 0-d array in a column
  of its own with no indices; the product of all numeric constants of a statement
  (``2.0``, the ``-1`` of ``-x``) is a formula with no arguments, named ``const0``...,
  in a column of its own (a constant 1 is dropped).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from feinsum.errors import EinsumMatchError, FeinsumError
from feinsum.matching.factors import _Factor, _GroupState
from feinsum.matching.kernel import _insn_str, _Kernel, _Reject
from feinsum.matching.model import Match
from feinsum.matching.statements import _accumulations, _Row, _statement_row

if TYPE_CHECKING:
    import loopy as lp

__all__ = ["Match", "Survey", "find_einsums", "match_einsum", "survey_einsums"]


# {{{ grouping rows into batched einsums


def _structure(row: _Row) -> Any:
    cols = sorted(f.indices for f in row.factors)
    return (row.reduction, row.out_sub, frozenset(row.red_inames), tuple(cols))


def _group_rows(rows: list[_Row]) -> list[list[_Row]]:
    """Rows with the same structure that share an input and do not depend on one another
    form one batched einsum."""
    groups: list[list[_Row]] = []
    by_struct: dict[Any, list[_Row]] = {}
    for row in sorted(rows, key=lambda r: r.position):
        by_struct.setdefault(_structure(row), []).append(row)
    for members in by_struct.values():
        # connected components over shared inputs
        parent = list(range(len(members)))

        def find(x: int, parent: list[int] = parent) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for a, b in itertools.combinations(range(len(members)), 2):
            if members[a].inputs & members[b].inputs:
                parent[find(a)] = find(b)
        comps: dict[int, list[_Row]] = {}
        for k, row in enumerate(members):
            comps.setdefault(find(k), []).append(row)
        for comp in comps.values():
            # a row that reads another's output, or writes the same output, starts a new group
            current: list[_Row] = []
            for row in comp:
                outs = {o for r in current for o in r.outputs}
                ins = {i for r in current for i in r.inputs}
                if current and (
                    row.inputs & outs or set(row.outputs) & (outs | ins)
                ):
                    groups.append(current)
                    current = []
                current.append(row)
            groups.append(current)
    groups.sort(key=lambda g: g[0].position)
    return groups


def _columns(rows: list[_Row]) -> tuple[tuple[tuple[str, ...], ...], list[list[_Factor]]]:
    """Column index tuples (in the first row's factor order) and, per row, the factor of
    each column; equal arrays land in the same column where the index tuples allow."""
    first = rows[0].factors
    in_indices = tuple(f.indices for f in first)
    table: list[list[_Factor]] = [list(first)]
    for row in rows[1:]:
        slots: list[_Factor | None] = [None] * len(first)
        remaining = list(row.factors)
        # same object as a previous row in that column first
        for c, idx in enumerate(in_indices):
            for f in remaining:
                if f.indices == idx and any(t[c].obj == f.obj for t in table):
                    slots[c] = f
                    remaining.remove(f)
                    break
        for c, idx in enumerate(in_indices):
            if slots[c] is None:
                for f in remaining:
                    if f.indices == idx:
                        slots[c] = f
                        remaining.remove(f)
                        break
        placed = [s for s in slots if s is not None]
        if remaining or len(placed) != len(slots):
            raise EinsumMatchError(
                f"statements {rows[0].insn_ids[0]!r} and {row.insn_ids[0]!r} were grouped as "
                "rows of one batched einsum but their operands do not pair up: a bug in "
                "feinsum's matcher; please report it with the kernel")
        table.append(placed)
    return in_indices, table


def _build_match(kk: _Kernel, state: _GroupState, rows: list[_Row]) -> Match:
    from feinsum.errors import SpecificationError
    from feinsum.spec.model import BatchedEinsum

    in_indices, table = _columns(rows)
    arguments = tuple(tuple((f.obj,) for f in fs) for fs in table)
    try:
        e = BatchedEinsum(in_indices, rows[0].out_sub, arguments, rows[0].reduction)  # type: ignore[arg-type]
    except SpecificationError as exc:
        raise _Reject(str(exc)) from exc
    # the outputs' dtypes must be the einsum's (the spec computes in the operands' type)
    for r, row in enumerate(rows):
        want = e.value_dtype(r)
        dt = kk.dtype_of(row.outputs[0])
        if dt is not None and dt != want:
            raise _Reject(
                f"output {row.outputs[0]!r} has dtype {dt} but its operands give {want}; feinsum "
                "computes in the operands' result type (cast an input or the output)"
            )
        if row.accumulator is not None and row.accumulator != row.outputs[0]:
            at = kk.dtype_of(row.accumulator)
            if at is not None and at != want:
                raise _Reject(
                    f"the accumulator {row.accumulator!r} has dtype {at} but the operands give "
                    f"{want}; feinsum computes in the operands' result type"
                )
        if len(row.outputs) > 1:
            it = kk.dtype_of(row.outputs[1])
            if it is not None and it != np.dtype(np.int32):
                raise _Reject(f"index output {row.outputs[1]!r} has dtype {it}; feinsum's "
                              f"{row.reduction} index is int32")
    sources = {f.name: state.sources.get(f.name) for f in e.formulas}
    names = [a.name for a in e.arrays] + [o for r in rows for o in r.outputs]
    squeezed = {n: kk.unit_axes(n) for n in names if kk.unit_axes(n)}
    return Match(
        einsum=e,
        kernel_name=kk.name,
        insn_ids=tuple(r.insn_ids for r in rows),
        outputs=tuple(r.outputs for r in rows),
        formula_sources=sources,
        arg_names=tuple(a.name for a in kk.knl.args),
        squeezed=squeezed,
        _positions=tuple(r.position for r in rows),
    )


# }}}


# {{{ public entry points


def _get_kernel(t_unit: Any, kernel_name: str | None) -> Any:
    import loopy as lp

    if isinstance(t_unit, lp.LoopKernel):
        if kernel_name is not None and kernel_name != t_unit.name:
            raise EinsumMatchError(f"the kernel is {t_unit.name!r}, not {kernel_name!r}")
        return t_unit
    if not isinstance(t_unit, lp.TranslationUnit):
        raise EinsumMatchError(f"expected a loopy TranslationUnit, got {type(t_unit).__name__}")
    if kernel_name is None:
        eps = sorted(t_unit.entrypoints)
        if len(eps) != 1:
            raise EinsumMatchError(
                f"the translation unit has {len(eps)} entry points ({', '.join(eps)}); pass "
                "kernel_name="
            )
        kernel_name = eps[0]
    try:
        knl = t_unit[kernel_name]
    except KeyError:
        knl = None
    if not isinstance(knl, lp.LoopKernel):
        names = sorted(str(k) for k, v in t_unit.callables_table.items()
                       if hasattr(v, "subkernel"))
        raise EinsumMatchError(f"no kernel named {kernel_name!r} (kernels: {', '.join(names)})")
    return knl


def _analyze(knl: Any, dtypes: Mapping[str, Any] | None, selected: Callable[[Any], bool],
             scalar_arrays: bool = False
             ) -> tuple[_Kernel, _GroupState, list[_Row], dict[str, str]]:
    kk = _Kernel(knl, dtypes, scalar_arrays=scalar_arrays)
    state = _GroupState(kk)
    errors: dict[str, str] = {}
    rows, used = _accumulations(kk, state, selected, errors)
    for insn in kk.insns:
        if insn.id in used or not selected(insn):
            continue
        try:
            rows.append(_statement_row(kk, state, insn))
        except _Reject as exc:
            errors[insn.id] = f"statement {insn.id!r} ({_insn_str(insn)}): {exc}"
    return kk, state, rows, errors


def _missing_dtype_error(kk: _Kernel, names: Iterable[str]) -> EinsumMatchError:
    names = sorted(names)
    example = ", ".join(f"{n!r}: np.float64" for n in names[:3])
    return EinsumMatchError(
        f"kernel {kk.name!r}: the dtype of {', '.join(repr(n) for n in names)} is unknown "
        f"(lp.make_einsum leaves dtypes out); pass dtypes={{{example}}} or add them with "
        "lp.add_dtypes"
    )


def _matches(knl: Any, dtypes: Mapping[str, Any] | None, selected: Callable[[Any], bool],
             infer: Callable[[], Any] | None, scalar_arrays: bool = False
             ) -> tuple[list[Match], dict[str, str], set[str]]:
    kk, state, rows, errors = _analyze(knl, dtypes, selected, scalar_arrays)
    if kk.missing_dtypes and infer is not None:
        inferred = infer()
        if inferred is not None:
            kk2, state2, rows2, errors2 = _analyze(inferred, dtypes, selected, scalar_arrays)
            if len(kk2.missing_dtypes) < len(kk.missing_dtypes):
                kk, state, rows, errors = kk2, state2, rows2, errors2
    matches: list[Match] = []
    missing: set[str] = set()
    for group in _group_rows(rows):
        group_missing = {n for r in group for n in r.inputs if n in kk.missing_dtypes}
        if group_missing:
            missing |= group_missing
            for r in group:
                for i in r.insn_ids:
                    errors[i] = str(_missing_dtype_error(kk, group_missing))
            continue
        try:
            matches.append(_build_match(kk, state, group))
        except _Reject as exc:
            ids = [i for r in group for i in r.insn_ids]
            for i in ids:
                errors[i] = (f"statements {', '.join(map(repr, ids))} "
                             f"({'; '.join(_insn_str(kk.by_id[i]) for i in ids)}): {exc}")
    return matches, errors, missing


def _inferrer(t_unit: Any, knl: Any) -> Callable[[], Any] | None:
    import loopy as lp

    if not isinstance(t_unit, lp.TranslationUnit):
        return None

    def infer() -> Any:
        try:
            return lp.infer_unknown_types(t_unit, expect_completion=False)[knl.name]
        except Exception:  # inference is best effort
            return None

    return infer


def find_einsums(t_unit: lp.TranslationUnit, *, kernel_name: str | None = None,
                 dtypes: Mapping[str, Any] | None = None) -> list[Match]:
    """Every group of statements of the kernel that forms a (batched) einsum or kernel
    reduction, in kernel statement order.

    A statement is reported if it is a reduction (``sum``/``min``/``max``/``argmin``/
    ``argmax``/``logsumexp``, or an accumulation statement pair) or a product of at least
    two operands; statements feinsum cannot hold are skipped (use
    :func:`match_einsum` to learn why). Statements that share their loop nest, their
    structure and an input become one batched einsum (rows in statement order).
    """
    return survey_einsums(t_unit, kernel_name=kernel_name, dtypes=dtypes).matches


@dataclass(frozen=True)
class Survey:
    """A kernel's einsums (:attr:`matches`, as :func:`find_einsums` returns them) and, for
    every statement with a reduction that is in none of them, why not (:attr:`rejected`:
    statement id -> reason, as :func:`match_einsum` gives it)."""

    matches: list[Match]
    rejected: dict[str, str]


def survey_einsums(t_unit: lp.TranslationUnit, *, kernel_name: str | None = None,
                   dtypes: Mapping[str, Any] | None = None,
                   scalar_arrays: bool = False) -> Survey:
    """:func:`find_einsums` with the reasons for the reductions it leaves out.
    *scalar_arrays*: a 0-d array argument read as a factor is a scalar of the einsum, as a
    ``ValueArg`` is (for the hook, which applies it in the stores only:
    :mod:`feinsum.matching.constants`); else the statement is not an einsum."""
    from loopy.symbolic import Reduction

    from feinsum.matching.kernel import _walk_all

    knl = _get_kernel(t_unit, kernel_name)
    with _internal_errors(knl):
        matches, errors, _ = _matches(knl, dtypes, lambda insn: True, _inferrer(t_unit, knl),
                                      scalar_arrays)
        found = [m for m in matches if _interesting(m)]
        claimed = {i for m in found for i in m.all_insn_ids}
        rejected = {}
        for insn in knl.instructions:
            if insn.id in claimed or insn.id not in errors:
                continue
            expr = getattr(insn, "expression", None)
            if expr is not None and any(isinstance(e, Reduction) for e in _walk_all(expr)):
                rejected[insn.id] = errors[insn.id]
    return Survey(found, rejected)


@contextlib.contextmanager
def _internal_errors(knl: Any) -> Iterator[None]:
    """Anything but a FeinsumError escaping the analysis is a bug of the matcher's: say so,
    as an EinsumMatchError, with the kernel named."""
    try:
        yield
    except FeinsumError:
        raise
    except Exception as exc:
        raise EinsumMatchError(
            f"kernel {getattr(knl, 'name', '?')!r}: feinsum's matcher failed "
            f"({type(exc).__name__}: {exc}); this is a bug: please report it with the "
            "kernel") from exc


def _interesting(m: Match) -> bool:
    e = m.einsum
    if e.reduction_indices or e.reduction != "sum":
        return True
    return sum(1 for idx in e.in_indices if idx) >= 2


def match_einsum(t_unit: lp.TranslationUnit, *, within: Any = None,
                 kernel_name: str | None = None,
                 dtypes: Mapping[str, Any] | None = None) -> Match:
    """The batched einsum computed by the statements *within* selects (a loopy match
    expression such as ``"id:insn*"``; ``None``: the kernel's only einsum).

    Raises :class:`~feinsum.EinsumMatchError` naming the statement, its expression and the
    reason when a selected statement is not an einsum feinsum can hold, when the selected
    statements form several einsums, or when the dtype of an input is unknown (pass
    ``dtypes={"A": np.float64, ...}``).
    """
    import loopy as lp

    knl = _get_kernel(t_unit, kernel_name)
    if within is None:
        def selected(insn: Any) -> bool:
            return True
    else:
        m = lp.match.parse_match(within)

        def selected(insn: Any) -> bool:
            return bool(m(knl, insn))

        if not any(selected(insn) for insn in knl.instructions):
            raise EinsumMatchError(
                f"kernel {knl.name!r}: no statement matches {within!r} (statements: "
                f"{', '.join(i.id for i in knl.instructions)})"
            )
    with _internal_errors(knl):
        matches, errors, missing = _matches(knl, dtypes, selected, _inferrer(t_unit, knl))
    if missing:
        raise _missing_dtype_error(_Kernel(knl, dtypes), missing)
    if within is not None:
        chosen = {insn.id for insn in knl.instructions if selected(insn)}
        errors = {i: msg for i, msg in errors.items() if i in chosen}
    if within is not None and errors:
        first = next(iter(dict.fromkeys(errors.values())))
        raise EinsumMatchError(f"kernel {knl.name!r}: {first}")
    if within is None:
        if not matches:
            if errors:
                first = next(iter(dict.fromkeys(errors.values())))
                raise EinsumMatchError(f"kernel {knl.name!r}: {first}")
            raise EinsumMatchError(f"kernel {knl.name!r} has no statements")
        interesting = [m for m in matches if _interesting(m)]
        if len(matches) > 1 and len(interesting) == 1:
            matches = interesting
    if len(matches) != 1:
        desc = "; ".join(f"[{', '.join(m.all_insn_ids)}] {m.einsum}" for m in matches)
        raise EinsumMatchError(
            f"kernel {knl.name!r}: the statements form {len(matches)} einsums ({desc}); select "
            "one with within= (e.g. within='id:...')"
        )
    return matches[0]


# }}}

# vim: foldmethod=marker
