"""Flattened loops: how the default schedule (:mod:`feinsum.hook.schedule`) lays a unit of
elementwise statements over work-items on a GPU.

* **Full groups, coalesced.** The unit's loops, in the order of the output's strides (the
  contiguous one last), become one flat index ``f`` over all their entries (35 nodes x E
  elements: one index over 35E), split into work-groups of ``lanes`` work-items:
  consecutive work-items write consecutive entries (coalesced), every group is full but
  the last, and no work-item loops over the 35 nodes of an element (the lane stride 35 of
  splitting the element loop alone).
* **Blocks, to share a launch.** Given the block of elements each work-group of a
  neighbouring transformed einsum takes (:func:`feinsum.matching.merge.chunk_hint`), the
  element loop is first cut into the same blocks, one a work-group, and the rest of the
  block is flattened over the group's work-items (a loop of rounds when the block has more
  entries than the group has work-items), so that :mod:`feinsum.matching.merge` can put
  the unit in that einsum's launch.

:func:`flat_loops` only says what replaces the loops (new loops, their domain, the
expression of each old loop in them, the guards); :func:`~feinsum.hook.schedule.
apply_plans` rewrites the statements, with every other unit's, in one pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pymbolic.primitives as prim


@dataclass(frozen=True)
class Flat:
    """What replaces flattened loops: the new loops and their lengths (in nesting order),
    each old loop's expression in them, the guards the statements get (the last, partial
    group or block), and the new loops' hardware tags."""

    sizes: Mapping[str, int]
    subst: Mapping[str, Any]
    guards: tuple[Any, ...]
    tags: Mapping[str, str]

    def domain(self) -> Any:
        """The new loops' domain (an isl basic set)."""
        import islpy as isl

        bounds = " and ".join(f"0 <= {n} < {size}" for n, size in self.sizes.items())
        return isl.BasicSet(f"{{ [{', '.join(self.sizes)}] : {bounds} }}")


def flat_loops(loops: Sequence[str], lengths: Sequence[int], lanes: int,
               block: tuple[str, int] | None, fresh: Callable[[str], str]) -> Flat:
    """Loops *loops* (slowest first, of *lengths* entries) flattened over work-groups of
    *lanes* work-items (``g.0``, ``l.0``); with *block* ``(loop, size)``, loop *loop* is
    first cut into blocks of *size*, one a work-group, and the rest flattened inside the
    group (a sequential loop of rounds, then ``l.0``). *fresh* names the new loops."""
    stem = loops[-1]
    g, lane = fresh(f"{stem}_g"), fresh(f"{stem}_fl")
    guards: list[Any] = []
    extent = dict(zip(loops, lengths, strict=True))
    base: dict[str, Any] = {}
    if block is None:
        total = math.prod(lengths)
        f: Any = prim.Variable(g) * lanes + prim.Variable(lane)
        sizes = {g: -(-total // lanes), lane: lanes}
        if total % lanes:
            guards.append(prim.Comparison(f, "<", total))
        order = list(loops)
    else:
        name, size = block
        rest = [n for n in loops if n != name]
        inner = size * math.prod(extent[n] for n in rest)
        rounds = fresh(f"{stem}_fo")
        f = prim.Variable(rounds) * lanes + prim.Variable(lane)
        sizes = {g: -(-extent[name] // size), rounds: -(-inner // lanes), lane: lanes}
        if inner % lanes:
            guards.append(prim.Comparison(f, "<", inner))
        order, base = [name, *rest], {name: prim.Variable(g) * size}
        extent = {**extent, name: size}
    strides = [math.prod(extent[n] for n in order[k + 1:]) for k in range(len(order))]
    subst: dict[str, Any] = {}
    for k, n in enumerate(order):
        x = prim.FloorDiv(f, strides[k]) if strides[k] > 1 else f
        x = prim.Remainder(x, extent[n]) if k else x
        subst[n] = base[n] + x if n in base else x
    length = dict(zip(loops, lengths, strict=True))
    if block is not None and length[block[0]] % block[1]:
        guards.append(prim.Comparison(subst[block[0]], "<", length[block[0]]))
    return Flat(sizes, subst, tuple(guards), {g: "g.0", lane: "l.0"})
