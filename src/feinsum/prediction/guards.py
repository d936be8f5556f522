"""Which unrolled loops check their domain in every copy of their body.

loopy generates a rolled loop over the exact bounds of its index given the enclosing loops
(a minimum of several pieces becomes a ``?:`` in the loop's bound), so its body needs no
check. An unrolled loop has as many copies as its longest trip; where its bounds given the
enclosing loops, the local and group ids and the lengths are not constant (the last tile
of a tile whose length the lengths do not divide), every copy is guarded by an ``if``: a
comparison and a branch (but in the bulk of a slabbed index: loopy generates its first and
last tiles apart, the others unguarded). So is every statement with a predicate
(``if=``), which the model counts from the predicate's expression.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any


def guarded(knl: Any, loops: Sequence[str], known: Collection[str]) -> bool:
    """Whether the copies of the innermost loop of *loops* (the enclosing loops, outermost
    first), an unrolled one, check their domain; *known*: the local and group ids."""
    import islpy as isl

    iname = loops[-1]
    dom = knl.get_inames_domain(frozenset(loops))
    usable = (set(loops) | set(known)) - {iname}
    for n in sorted(usable & set(knl.iname_slab_increments)):
        if any(knl.iname_slab_increments[n]):  # only the bulk slab counts: no checks there
            dom = dom & _bulk(knl, n, dom)
    for n in reversed(dom.get_var_names(isl.dim_type.set)):  # inner loops: unknown here
        if n != iname and n not in usable:
            idx = dom.get_var_names(isl.dim_type.set).index(n)
            dom = dom.project_out(isl.dim_type.set, idx, 1)
    for n in list(dom.get_var_names(isl.dim_type.set)):
        if n != iname:
            idx = dom.get_var_names(isl.dim_type.set).index(n)
            dom = dom.move_dims(isl.dim_type.param, dom.dim(isl.dim_type.param),
                                isl.dim_type.set, idx, 1)
    dom, assumptions = isl.align_two(dom, knl.assumptions)
    dom = dom & assumptions
    for bound in (dom.dim_max(0), dom.dim_min(0)):
        pieces = bound.gist(dom.params()).coalesce().get_pieces()
        if len(pieces) != 1 or not pieces[0][1].is_cst():
            return True
    return False


def _bulk(knl: Any, iname: str, dom: Any) -> Any:
    """The bulk slab of *iname* (loopy generates its own code for the first and last
    values of a slabbed index) in the space of *dom*."""
    import islpy as isl
    from loopy.codegen.loop import get_slab_decomposition

    slab = dict(get_slab_decomposition(knl, iname)).get("bulk")
    if slab is None:
        return isl.Set.universe(dom.space)
    return isl.align_spaces(isl.Set.from_basic_set(slab), dom, obj_bigger_ok=True)
