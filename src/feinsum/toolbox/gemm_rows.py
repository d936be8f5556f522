"""The rows of a batched GEMM in sequence in one kernel (a step of :mod:`feinsum.toolbox.gemm`).

A batched einsum's rows are the same contraction of other arrays (four fields times one
operator: ``ij,ej->ei`` with rows ``(D, u0), (D, u1), ...``). :func:`rows_in_sequence`
repeats row 0's statements for every other row, each work-group computing its block of
row 0, then of row 1, and so on: one launch, each row with its own loops, the local
tiles, registers and accumulators reused row after row (each statement of a row waits
for the previous row's stores; its stores to the tiles also for that row's last reads
of them, so that loopy puts a barrier between the two). The masks of the copies (which
entries lie inside the operands) depend on the work-group only: every row reads row
0's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import loopy as lp
import pymbolic.primitives as prim
from loopy.symbolic import SubstitutionMapper
from pymbolic.mapper.substitutor import make_subst_func

#: Statements that store to a local tile (row 0's ids), and those that read them.
TILE_WRITERS = frozenset({"cp_a", "cp_b", "pro_a", "pro_b"})
TILE_READERS = ("frag_a", "frag_b")


def row_name(name: str, row: int) -> str:
    """Row *row*'s copy of row 0's iname or statement *name*."""
    return f"{name}_r{row}"


def rows_in_sequence(nrows: int, ncolumns: int, insns: Sequence[Any],
                     shared_inames: Collection[str], shared_ids: Collection[str],
                     last: str) -> tuple[list[Any], dict[str, str]]:
    """Row 0's statements *insns* (reading the rules ``op{c}_r0``, storing to ``out0``;
    *last*: the id of its stores) followed by a copy for each other row, with its own
    rules, output, loops and statement ids (the statements given as shared are not
    copied), and the iname each new iname copies."""
    out, inames = list(insns), dict[str, str]()
    looped = {i for insn in insns for i in insn.within_inames} - set(shared_inames)
    for row in range(1, nrows):
        names = {i: row_name(i, row) for i in looped}
        inames |= {v: k for k, v in names.items()}
        values: dict[str, Any] = {k: prim.Variable(v) for k, v in names.items()}
        values |= {f"op{c}_r0": prim.Variable(f"op{c}_r{row}") for c in range(ncolumns)}
        values["out0"] = prim.Variable(f"out{row}")
        mapper = SubstitutionMapper(make_subst_func(values))

        def ident(i: str, row: int = row) -> str:
            return i if i in shared_ids else row_name(i, row)

        stored = last if row == 1 else row_name(last, row - 1)
        read = {r if row == 1 else row_name(r, row - 1) for r in TILE_READERS}
        for insn in insns:
            if insn.id in shared_ids:
                continue
            deps = {ident(d) for d in insn.depends_on} | {stored} | (
                read if insn.id in TILE_WRITERS else set())
            change: dict[str, Any] = dict(
                id=ident(insn.id), depends_on=frozenset(deps),
                within_inames=frozenset(names.get(i, i) for i in insn.within_inames),
                no_sync_with=frozenset((ident(i), s) for i, s in insn.no_sync_with),
                predicates=frozenset(mapper(p) for p in insn.predicates))
            if isinstance(insn, lp.Assignment):
                change |= dict(assignee=mapper(insn.assignee),
                               expression=mapper(insn.expression))
            out.append(insn.copy(**change))
    return out, inames
