"""Which loops the code generator guards inside: their bounds are not one affine
expression each.

loopy generates a sequential loop over the bounds of its index given the enclosing loops
(the outer indices, the local and group ids and the lengths are known there); where the
lowest upper bound (or the highest lower bound) is a minimum of several pieces, as
``min(127, n1 - 1 - 128*jt)`` of the last tile of a tiled loop, it takes the piece that
bounds them all and checks the rest in the loop body (``if (jt*128 + jj < n1)``): an
index computation, a comparison and a branch in every iteration.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any


def guarded(knl: Any, loops: Sequence[str], known: Collection[str]) -> bool:
    """Whether the body of the innermost loop of *loops* (the enclosing sequential loops,
    outermost first) checks its domain; *known*: the local and group ids."""
    import islpy as isl

    iname = loops[-1]
    dom = knl.get_inames_domain(frozenset(loops))
    usable = (set(loops) | set(known)) - {iname}
    names = dom.get_var_names(isl.dim_type.set)
    for n in reversed(names):  # indices of inner loops are not known here
        if n != iname and n not in usable:
            idx = dom.get_var_names(isl.dim_type.set).index(n)
            dom = dom.project_out(isl.dim_type.set, idx, 1)
    for n in list(dom.get_var_names(isl.dim_type.set)):
        if n != iname:
            idx = dom.get_var_names(isl.dim_type.set).index(n)
            dom = dom.move_dims(isl.dim_type.param, dom.dim(isl.dim_type.param),
                                isl.dim_type.set, idx, 1)
    assumptions = knl.assumptions
    dom, assumptions = isl.align_two(dom, assumptions)
    dom = dom & assumptions
    for bound in (dom.dim_max(0), dom.dim_min(0)):
        if bound.gist(dom.params()).coalesce().n_piece() > 1:
            return True
    return False
