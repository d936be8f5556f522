"""How the default schedule lays out one unit of elementwise statements on the device
(the policy :mod:`feinsum.hook.schedule` applies; the loops and their checks are its).

* **GPUs: flattened, coalesced, full groups.** The unit's loops, in the order of the
  output's strides (the contiguous one last), become one flat index ``f`` over all their
  entries (35 nodes x E elements: one loop of 35E), split into work-groups of
  ``GPU_LANES`` work-items: consecutive work-items write consecutive entries (coalesced),
  every group is full but the last, and no work-item loops over the 35 nodes of an element
  (the lane stride 35 of splitting the element loop alone).
* **Blocks of elements, to share a launch.** Given the block of elements each work-group of
  a neighbouring transformed einsum takes (:func:`feinsum.matching.merge.chunk_hint`), the
  unit's element loop is cut into the same blocks, one a group (the rest flattened over the
  group's work-items on a GPU), so that :mod:`feinsum.matching.merge` can put it in that
  einsum's launch.
* **CPUs: contiguous innermost.** The loops inside a group's chunk run with the output's
  contiguous loop innermost, which the OpenCL compiler vectorises (loopy otherwise orders
  them by name: the element loop innermost, stride 35, in the measured DG step the
  elementwise kernel took 2.4x its einsums).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pymbolic.primitives as prim


def prioritized(knl: Any, loops: Sequence[str]) -> Any:
    """*knl* with *loops* nested in this order (outermost first) where they nest."""
    import loopy as lp

    loops = [n for n in loops if n in knl.all_inames()]
    return lp.prioritize_loops(knl, ",".join(loops)) if len(loops) > 1 else knl


def flattened(knl: Any, insn_ids: frozenset[str], loops: Sequence[str],
              extents: Sequence[int], lanes: int, block: tuple[str, int, int] | None = None
              ) -> Any | None:
    """The statements *insn_ids*, each in exactly the loops *loops* (slowest first, with
    their integer *extents*), run over one flat index split into work-groups of *lanes*
    work-items (``l.0``, groups ``g.0``); with *block* ``(loop, size, length)``, loop
    *loop* (of *length* entries) is first cut into blocks of *size*, one per group, and
    the rest flattened inside the group (``f_out`` sequential, ``l.0``). None where the
    statements run in other loops too."""
    import islpy as isl
    import loopy as lp
    from loopy.kernel.data import Iname

    from feinsum.matching.assemble import fresh_name
    from feinsum.matching.normalize import kernel_names

    insns = [knl.id_to_insn[i] for i in sorted(insn_ids)]
    if any(set(i.within_inames) != set(loops) or i.reduction_inames() for i in insns):
        return None
    taken = kernel_names(knl)
    stem = loops[-1]
    g, out, lane = (fresh_name(f"{stem}_{s}", taken) for s in ("g", "fo", "fl"))
    guards: list[Any] = []
    if block is None:
        total = math.prod(extents)
        f: Any = prim.Variable(g) * lanes + prim.Variable(lane)
        sizes = {g: -(-total // lanes), lane: lanes}
        if total % lanes:
            guards.append(prim.Comparison(f, "<", total))
        flat_loops, flat_extents = list(loops), list(extents)
        base: dict[str, Any] = {}
    else:
        name, size, length = block
        rest = [n for n in loops if n != name]
        rest_extents = [e for n, e in zip(loops, extents, strict=True) if n != name]
        inner = size * math.prod(rest_extents)
        f = prim.Variable(out) * lanes + prim.Variable(lane)
        sizes = {g: -(-length // size), out: -(-inner // lanes), lane: lanes}
        if inner % lanes:
            guards.append(prim.Comparison(f, "<", inner))
        flat_loops, flat_extents = [name, *rest], [size, *rest_extents]
        base = {name: prim.Variable(g) * size}
    strides = [math.prod(flat_extents[k + 1:]) for k in range(len(flat_extents))]
    subst: dict[str, Any] = {}
    for k, (n, e) in enumerate(zip(flat_loops, flat_extents, strict=True)):
        x = prim.FloorDiv(f, strides[k]) if strides[k] > 1 else f
        x = prim.Remainder(x, e) if k else x
        subst[n] = base[n] + x if n in base else x
    if block is not None and length % block[1]:
        guards.append(prim.Comparison(subst[block[0]], "<", length))
    from loopy.symbolic import SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    smap = SubstitutionMapper(make_subst_func(subst))
    new_loops = frozenset(sizes)
    insns_new = []
    for insn in knl.instructions:
        if insn.id in insn_ids:
            insn = insn.with_transformed_expressions(smap).copy(
                within_inames=new_loops,
                predicates=frozenset(insn.predicates) | frozenset(guards))
        insns_new.append(insn)
    bounds = " and ".join(f"0 <= {n} < {size}" for n, size in sizes.items())
    dom = isl.BasicSet(f"{{ [{', '.join(sizes)}] : {bounds} }}")
    inames = dict(knl.inames)
    inames.update({n: Iname(n, frozenset()) for n in sizes})
    knl = knl.copy(instructions=insns_new, domains=[*knl.domains, dom], inames=inames)
    knl = lp.tag_inames(knl, {g: "g.0", lane: "l.0"})
    unused = [n for n in loops if not any(n in i.within_inames or n in i.reduction_inames()
                                          for i in knl.instructions)]
    return lp.remove_unused_inames(knl, inames=unused) if unused else knl
