"""How much code a kernel's statements make once loopy unrolls their loops."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def unrolled_statements(knl: Any, insn_ids: Iterable[str] | None = None) -> int:
    """How many statements loopy emits for (the statements *insn_ids* of) *knl*: each
    statement once per iteration of its unrolled loops (``unr``, ``ilp``)."""
    from loopy.kernel.data import IlpBaseTag, UnrollTag

    lengths: dict[str, int] = {}

    def length(iname: str) -> int:
        if iname not in lengths:
            try:
                lengths[iname] = max(1, int(knl.get_constant_iname_length(iname)))
            except Exception:  # not a constant: loopy cannot unroll it either
                lengths[iname] = 1
        return lengths[iname]

    unrolled = {name for name, iname in knl.inames.items()
                if any(isinstance(t, (UnrollTag, IlpBaseTag)) for t in iname.tags)}
    insns = (knl.instructions if insn_ids is None
             else [knl.id_to_insn[i] for i in insn_ids])
    total = 0
    for insn in insns:
        n = 1
        for iname in (set(insn.within_inames) | set(insn.reduction_inames())) & unrolled:
            n *= length(iname)
        total += n
    return total
