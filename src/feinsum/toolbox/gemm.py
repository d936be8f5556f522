"""GPU GEMM kernels for two-operand contractions (the ``gemm_gpu`` recipe's steps).

A contraction is seen as ``out[rest, Y, X] = sum_K A[Y, K] * B[K, X]`` (:func:`roles`):
``X`` is the output's contiguous index fused with the output indices of operand ``B`` that
are contiguous with it in ``B`` and in the output (``ijkl,mi->mjkl``: ``X = jkl``); ``Y``
likewise from operand ``A``; ``K`` the longest reduction index fused with the reduction
indices contiguous with it in both operands (``ijk,jkl->il``: ``K = jk``). What is left are
batch output indices (``rest``: ``g.2`` and loops) and other reduction indices (loops
around the ``K`` tiles).

:func:`gemm_kernel` writes the kernel from the spec (no reference kernel transformed):

* a ``ly x lx`` work-group owns a ``BM x BN`` block of ``(Y, X)`` (``BM = ly*py``,
  ``BN = lx*px``); each work-item a ``py x px`` register tile made of runs of ``vw``
  adjacent entries, ``ly*vw`` (``lx*vw``) apart, so that its reads of a local tile row are
  ``vw`` adjacent values (one vector load) and a subgroup's reads hit distinct banks;
* ``K`` advances ``kt`` at a time: the ``kt x BM`` tile of ``A`` and the ``kt x BN`` tile of
  ``B`` are copied to local memory by all work-items, reading along each operand's
  contiguous axis (coalesced); entries outside the operands are read as zero. The
  register-tile update is therefore the same for every tile, edge tiles included: **no
  bounds guard in the unrolled FMA body** (only the copies and the final stores compare
  indices with the lengths), correct for any lengths;
* ``double_buffer``: two local tiles; the next tile is read into registers before the
  current one is used and stored to the other tile after it: one barrier per ``K`` tile;
* ``split`` > 1 (split-K): ``g.2`` runs ``split`` slices of the ``K`` tiles (slice ``s``
  takes tiles ``s, s + split, ...``) into a global temporary ``split x Y x X``; a second
  kernel after a global barrier sums the slices into the output.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import loopy as lp
import pymbolic.primitives as prim

from feinsum.spec.model import Array, BatchedEinsum
from feinsum.toolbox.core import dtype_size, kernel_of, main_reduction
from feinsum.toolbox.dense import rewritten_kernel, subscript

#: Shared-memory banks the local tiles' padding spreads the transposing copies over.
BANKS = 32


# {{{ roles: the contraction as a GEMM over fused indices


@dataclass(frozen=True)
class Roles:
    """A two-operand contraction as ``out[rest, Y, X] = sum_K A[Y, K] * B[K, X]``.

    :attr:`x`, :attr:`y`, :attr:`k` are the fused index groups (outermost first; every
    member but the first has a fixed length), :attr:`a`/:attr:`b` the operand columns,
    :attr:`rest` the other output indices, :attr:`red` the other reduction indices."""

    a: int
    b: int
    x: tuple[str, ...]
    y: tuple[str, ...]
    k: tuple[str, ...]
    rest: tuple[str, ...]
    red: tuple[str, ...]


def memory_orders(e: BatchedEinsum, c: int) -> list[list[str]]:
    """The indices of operand *c* in memory order (innermost last), one list per factor."""
    idx = list(e.in_indices[c])
    return [idx if f.order == "C" else idx[::-1] for f in e.arguments[0][c]
            if isinstance(f, Array)]


def _fixed(e: BatchedEinsum, i: str) -> bool:
    return isinstance(e.lengths[i], int)


def _grow(e: BatchedEinsum, seed: str, orders: Sequence[Sequence[str]], allowed: set[str]
          ) -> tuple[str, ...]:
    """The run of *allowed* indices around *seed* adjacent (in the same order) in every
    one of *orders*: fusable into one index when every member but the first is fixed."""
    group = [seed]

    def neighbour(i: str, step: int) -> str | None:
        found = set()
        for o in orders:
            k = list(o).index(i) + step
            found.add(o[k] if 0 <= k < len(o) else None)
        n = found.pop() if len(found) == 1 else None
        return n if n in allowed and n not in group else None

    while True:
        before = neighbour(group[0], -1)
        if before is not None and all(_fixed(e, i) for i in group):
            group.insert(0, before)
            continue
        after = neighbour(group[-1], 1)
        if after is not None and _fixed(e, after):
            group.append(after)
            continue
        return tuple(group)


def roles(e: BatchedEinsum) -> Roles | str:
    """The GEMM view of *e*, or why it has none."""
    if e.block_sparse is not None or e.reduction != "sum" or e.noperands != 2:
        return "needs a dense two-operand sum"
    if e.nrows != 1:
        return "several rows (a batched einsum): use contraction"
    if not all(isinstance(f, Array) for _, _, f in e.factors()):
        return "formula operands: use generic"
    if e.value_dtype(0).kind == "c":
        return "complex values: use contraction"
    if not e.reduction_indices or not e.out_indices:
        return "needs a reduction index and an output index"
    out = list(e.out_indices)
    x = out[-1]
    b = 0 if x in e.in_indices[0] else 1
    a = 1 - b
    if x in e.in_indices[a]:
        return f"{x} indexes both operands (a batch index): not a GEMM tile"
    only_a = [i for i in out if i in e.in_indices[a] and i not in e.in_indices[b]]
    if not only_a:
        return "operand A has no free output index"
    only_b = {i for i in out if i in e.in_indices[b] and i not in e.in_indices[a]}
    xs = _grow(e, x, [*memory_orders(e, b), out], only_b)
    ys = _grow(e, only_a[-1], [*memory_orders(e, a), out], set(only_a))
    k = str(main_reduction(e))
    ks = _grow(e, k, [*memory_orders(e, a), *memory_orders(e, b)], set(e.reduction_indices))
    return Roles(a, b, xs, ys, ks, tuple(i for i in out if i not in (*xs, *ys)),
                 tuple(i for i in e.reduction_indices if i not in ks))


def group_length(e: BatchedEinsum, group: Sequence[str]) -> Any:
    """The fused length of *group* (an int, or ``c*n`` for a symbolic first member)."""
    fixed = math.prod(int(e.lengths[i]) for i in group[1:])
    first = e.lengths[group[0]]
    return fixed * first if isinstance(first, int) else (
        prim.Variable(first) if fixed == 1 else fixed * prim.Variable(first))


def components(e: BatchedEinsum, group: Sequence[str], flat: Any) -> dict[str, Any]:
    """Each member of *group* as an expression of the fused index *flat*."""
    out: dict[str, Any] = {}
    inner = 1
    for n, i in enumerate(reversed(group)):
        v = flat if inner == 1 else prim.FloorDiv(flat, inner)
        out[i] = v if n == len(group) - 1 else prim.Remainder(v, int(e.lengths[i]))
        inner *= int(e.lengths[i]) if n < len(group) - 1 else 1
    return out


# }}}


# {{{ the kernel


@dataclass(frozen=True)
class Tiling:
    """A GEMM tiling (see the module docstring)."""

    lx: int
    ly: int
    px: int
    py: int
    kt: int
    vw: int = 1
    split: int = 1
    double_buffer: bool = False

    @property
    def bm(self) -> int:
        return self.ly * self.py

    @property
    def bn(self) -> int:
        return self.lx * self.px

    @property
    def threads(self) -> int:
        return self.lx * self.ly

    def pad(self, transposed: bool) -> int:
        """Extra entries per local tile row: a copy that transposes (the operand's
        contiguous axis is ``K``) writes ``kt`` rows at once; padding rows by ``BANKS/kt``
        (at least ``vw``, keeping rows aligned to vectors) puts them in distinct banks."""
        return max(self.vw, BANKS // self.kt) if transposed else 0

    def local_entries(self, transposed_a: bool, transposed_b: bool) -> int:
        """Entries of the local tiles (both buffers)."""
        rows = self.kt * (2 if self.double_buffer else 1)
        return rows * (self.bm + self.pad(transposed_a) + self.bn + self.pad(transposed_b))


def transposes(e: BatchedEinsum, r: Roles, column: int) -> bool:
    """Whether operand *column*'s contiguous axis is in ``K`` (its local copy transposes)."""
    orders = memory_orders(e, column)
    return bool(orders) and orders[0][-1] in r.k


def _local_offset(block: int, lanes: int, vw: int, lid: Any, p: Any) -> Any:
    """Row offset of entry *p* of work-item *lid*'s register tile in a local tile row."""
    del block
    return (p // vw) * (lanes * vw) + lid * vw + p % vw


def gemm_kernel(t_unit: lp.TranslationUnit, e: BatchedEinsum, r: Roles, t: Tiling
                ) -> lp.TranslationUnit:
    """The GEMM kernel of *e* (roles *r*, tiling *t*); see the module docstring."""
    knl = kernel_of(t_unit)
    dt = e.value_dtype(0)
    V = prim.Variable
    gx, gy, lx, ly, q, ku = (V(n) for n in ("gx", "gy", "lx", "ly", "q", "ku"))
    px, py = V("px"), V("py")
    nbuf = 2 if t.double_buffer else 1
    ta, tb_ = transposes(e, r, r.a), transposes(e, r, r.b)
    rowa, rowb = t.bm + t.pad(ta), t.bn + t.pad(tb_)
    lens = {g: group_length(e, grp) for g, grp in (("X", r.x), ("Y", r.y), ("K", r.k))}
    split = t.split
    s = V("gs") if split > 1 else 0
    ktile = q * split + s  # the K tile this iteration works on
    tid = ly * t.lx + lx

    def length(i: str) -> Any:
        n = e.lengths[i]
        return V(n) if isinstance(n, str) else n

    g_inames = {"gx", "gy", "lx", "ly", *r.rest, *(["gs"] if split > 1 else [])}
    red_inames = set(r.red)
    temps: list[Any] = []
    insns: list[Any] = []

    def copy(col: int, name: str, rows: int, block: int, transposed: bool, g: Any,
             group: tuple[str, ...], fetch: str, tile: Any, buf: Any, reg: str | None,
             within: set[str], insn_id: str, deps: frozenset[str]) -> list[Any]:
        """The copy of operand *col*'s tile (``kt x block``, K tile *tile*) into local
        tile *name* (buffer *buf*), through registers *reg* when double buffering."""
        def entry(f: Any) -> tuple[Any, Any, frozenset[Any]]:
            """Where the copy's iteration *f* reads (the guarded value) and writes."""
            flat = f * t.threads + tid
            kk, mm = ((flat % t.kt, flat // t.kt) if transposed
                      else (flat // block, flat % block))
            gm, gk = g * block + mm, tile * t.kt + kk
            idx = {**components(e, group, gm), **components(e, r.k, gk),
                   **{i: V(i) for i in (*r.rest, *r.red)}}
            op = V(f"op{col}_r0")(*(idx[i] for i in e.in_indices[col]))
            inside = prim.LogicalAnd((
                prim.Comparison(gm, "<", lens["Y" if col == r.a else "X"]),
                prim.Comparison(gk, "<", lens["K"])))
            preds = frozenset() if (t.kt * block) % t.threads == 0 else frozenset(
                {prim.Comparison(flat, "<", t.kt * block)})
            return prim.If(inside, op, dt.type(0)), subscript(name, buf, kk, mm), preds

        value, dest, preds = entry(V(fetch))
        if reg is None:
            return [lp.Assignment(dest, value, id=insn_id, within_inames=frozenset(
                {*within, fetch}), predicates=preds, depends_on=deps)]
        _, dest, preds2 = entry(V(f"{fetch}s"))
        return [lp.Assignment(subscript(reg, V(fetch)), value, id=f"{insn_id}_ld",
                              within_inames=frozenset({*within, fetch}), predicates=preds,
                              depends_on=deps),
                lp.Assignment(dest, subscript(reg, V(f"{fetch}s")), id=insn_id,
                              predicates=preds2,
                              within_inames=frozenset({*within, f"{fetch}s"}),
                              depends_on=frozenset({f"{insn_id}_ld"}))]

    # accumulators, register fragments, local tiles
    temps += [lp.TemporaryVariable("acc", dt, shape=(t.py, t.px),
                                   address_space=lp.AddressSpace.PRIVATE),
              lp.TemporaryVariable("fa", dt, shape=(t.py,),
                                   address_space=lp.AddressSpace.PRIVATE),
              lp.TemporaryVariable("fb", dt, shape=(t.px,),
                                   address_space=lp.AddressSpace.PRIVATE),
              lp.TemporaryVariable("tile_a", dt, shape=(nbuf, t.kt, rowa),
                                   address_space=lp.AddressSpace.LOCAL),
              lp.TemporaryVariable("tile_b", dt, shape=(nbuf, t.kt, rowb),
                                   address_space=lp.AddressSpace.LOCAL)]
    na, nb = -(-t.kt * t.bm // t.threads), -(-t.kt * t.bn // t.threads)
    loops = g_inames | red_inames
    insns.append(lp.Assignment(subscript("acc", V("ipy"), V("ipx")), dt.type(0), id="init",
                               within_inames=frozenset({*g_inames, "ipx", "ipy"})))
    if t.double_buffer:
        temps += [lp.TemporaryVariable("ra", dt, shape=(na,),
                                       address_space=lp.AddressSpace.PRIVATE),
                  lp.TemporaryVariable("rb", dt, shape=(nb,),
                                       address_space=lp.AddressSpace.PRIVATE)]
        first = frozenset()
        insns += copy(r.a, "tile_a", t.kt, t.bm, ta, gy, r.y, "ia0", s, 0, None,
                      loops, "pro_a", first)
        insns += copy(r.b, "tile_b", t.kt, t.bn, tb_, gx, r.x, "ib0", s, 0, None,
                      loops, "pro_b", first)
        cur, nxt = q % 2, (q + 1) % 2
        body = loops | {"q"}
        insns += copy(r.a, "tile_a", t.kt, t.bm, ta, gy, r.y, "ia", ktile + split, nxt, "ra",
                      body, "cp_a", frozenset({"pro_a", "pro_b"}))
        insns += copy(r.b, "tile_b", t.kt, t.bn, tb_, gx, r.x, "ib", ktile + split, nxt, "rb",
                      body, "cp_b", frozenset({"pro_a", "pro_b"}))
        fetched = frozenset({"pro_a", "pro_b"})
    else:
        cur = 0
        body = loops | {"q"}
        insns += copy(r.a, "tile_a", t.kt, t.bm, ta, gy, r.y, "ia", ktile, 0, None, body,
                      "cp_a", frozenset())
        insns += copy(r.b, "tile_b", t.kt, t.bn, tb_, gx, r.x, "ib", ktile, 0, None, body,
                      "cp_b", frozenset())
        fetched = frozenset({"cp_a", "cp_b"})
    apy, bpx = V("apy"), V("bpx")
    oa = _local_offset(t.bm, t.ly, t.vw, ly, apy)
    ob = _local_offset(t.bn, t.lx, t.vw, lx, bpx)
    insns += [
        lp.Assignment(subscript("fa", apy), subscript("tile_a", cur, ku, oa), id="frag_a",
                      within_inames=frozenset({*body, "ku", "apy"}), depends_on=fetched),
        lp.Assignment(subscript("fb", bpx), subscript("tile_b", cur, ku, ob), id="frag_b",
                      within_inames=frozenset({*body, "ku", "bpx"}), depends_on=fetched),
    ]
    pair = (subscript("fa", py), subscript("fb", px))
    if r.a == 1:
        pair = pair[::-1]  # the reference kernel's order: operand 0 times operand 1
    cell = subscript("acc", py, px)
    insns.append(lp.Assignment(cell, cell + prim.Product(pair), id="fma",
                               within_inames=frozenset({*body, "ku", "py", "px"}),
                               depends_on=frozenset({"init", "frag_a", "frag_b"})))
    if t.double_buffer:
        # the next tile's loads come first, its stores to the other buffer after this
        # tile's reads; the barrier that ends the tile orders both for the next one
        def ordered(i: Any) -> Any:
            if i.id in ("cp_a", "cp_b"):
                return i.copy(depends_on=i.depends_on | {"fma"}, no_sync_with=frozenset(
                    {(f"frag_{i.id[-1]}", "any")}))
            if i.id in ("frag_a", "frag_b"):
                return i.copy(depends_on=i.depends_on | {"cp_a_ld", "cp_b_ld"},
                              no_sync_with=frozenset({(f"cp_{i.id[-1]}", "any")}))
            return i

        insns = [ordered(i) for i in insns]
        insns.append(lp.BarrierInstruction(
            "tile_end", synchronization_kind="local", mem_kind="local",
            within_inames=frozenset(body), depends_on=frozenset({"cp_a", "cp_b", "fma"})))
    # the stores: the output, or the split-K slices then a second pass
    spy, spx = V("spy"), V("spx")
    gm = gy * t.bm + _local_offset(t.bm, t.ly, t.vw, ly, spy)
    gn = gx * t.bn + _local_offset(t.bn, t.lx, t.vw, lx, spx)
    cell = subscript("acc", spy, spx)
    inside = frozenset({prim.Comparison(gm, "<", lens["Y"]),
                        prim.Comparison(gn, "<", lens["X"])})
    out_idx = {**components(e, r.y, gm), **components(e, r.x, gn),
               **{i: V(i) for i in r.rest}}
    if split == 1:
        insns.append(lp.Assignment(subscript("out0", *(out_idx[i] for i in e.out_indices)),
                                   cell, id="store", predicates=inside,
                                   within_inames=frozenset({*g_inames, "spx", "spy"}),
                                   depends_on=frozenset({"fma"})))
    else:
        temps.append(lp.TemporaryVariable("slices", dt, shape=(split, lens["Y"], lens["X"]),
                                          address_space=lp.AddressSpace.GLOBAL))
        insns.append(lp.Assignment(subscript("slices", s, gm, gn), cell, id="store",
                                   predicates=inside, depends_on=frozenset({"fma"}),
                                   within_inames=frozenset({*g_inames, "spx", "spy"})))
        insns.append(lp.BarrierInstruction("slices_done", synchronization_kind="global",
                                           depends_on=frozenset({"store"})))
        sm, sn = V("sm"), V("sn")
        idx2 = {**components(e, r.y, sm), **components(e, r.x, sn)}
        total = lp.Reduction("sum", ("ss",), subscript("slices", V("ss"), sm, sn))
        insns.append(lp.Assignment(subscript("out0", *(idx2[i] for i in e.out_indices)),
                                   total, id="sum_slices",
                                   within_inames=frozenset({"sm", "sn"}),
                                   depends_on=frozenset({"slices_done"})))
    return _finish(knl, e, r, t, insns, temps, lens, na, nb, split)


def _affine(expr: Any) -> str:
    from pymbolic.mapper.stringifier import StringifyMapper

    return StringifyMapper()(expr)


def _finish(knl: lp.LoopKernel, e: BatchedEinsum, r: Roles, t: Tiling, insns: list[Any],
            temps: list[Any], lens: dict[str, Any], na: int, nb: int, split: int
            ) -> lp.TranslationUnit:
    X, Y, K = (_affine(lens[g]) for g in ("X", "Y", "K"))
    syms = sorted({str(n) for n in e.lengths.values() if isinstance(n, str)})
    cons = [f"0 <= gx and {t.bn}*gx < {X}", f"0 <= gy and {t.bm}*gy < {Y}",
            f"0 <= lx < {t.lx}", f"0 <= ly < {t.ly}", f"0 <= px < {t.px}",
            f"0 <= py < {t.py}", f"0 <= ku < {t.kt}",
            *(f"0 <= {n} < {t.px}" for n in ("ipx", "spx", "bpx")),
            *(f"0 <= {n} < {t.py}" for n in ("ipy", "spy", "apy")),
            # every slice runs the same rounds (a tile past K reads zeros): a bound that
            # depended on the slice would also keep slices without tiles from storing
            f"0 <= q and {t.kt * split}*q < {K}",
            f"0 <= ia < {na}", f"0 <= ib < {nb}",
            *(f"0 <= {i} < {e.lengths[i]}" for i in (*r.rest, *r.red))]
    names = ["gx", "gy", "lx", "ly", "px", "py", "ku", "q", "ia", "ib", *r.rest, *r.red,
             "ipx", "spx", "bpx", "ipy", "spy", "apy"]
    if t.double_buffer:
        cons += [f"0 <= ia0 < {na}", f"0 <= ib0 < {nb}", f"0 <= ias < {na}",
                 f"0 <= ibs < {nb}"]
        names += ["ia0", "ib0", "ias", "ibs"]
    if split > 1:
        cons.append(f"0 <= gs < {split}")
        names.append("gs")
    domains = [f"[{', '.join(syms)}] -> {{[{', '.join(names)}]: {' and '.join(cons)}}}"]
    if split > 1:
        domains.append(f"[{', '.join(syms)}] -> {{[sm, sn, ss]: 0 <= sm < {Y} and "
                       f"0 <= sn < {X} and 0 <= ss < {split}}}")
    new = _make(knl, domains, insns, temps)
    tags = {"gx": "g.0", "gy": "g.1", "lx": "l.0", "ly": "l.1", "ku": "unr", "ia": "unr",
            "ib": "unr", **{n: "unr" for n in ("px", "py", "ipx", "spx", "bpx", "ipy", "spy",
                                                "apy")}}
    if t.double_buffer:
        tags.update({"ia0": "unr", "ib0": "unr", "ias": "unr", "ibs": "unr"})
    if split > 1:
        tags["gs"] = "g.2"
    elif r.rest:
        tags[r.rest[0]] = "g.2"
    new = lp.tag_inames(new, tags)
    if split > 1:
        new = lp.split_iname(new, "sn", 64, outer_tag="g.0", inner_tag="l.0")
        new = lp.tag_inames(new, {"sm": "g.1", "ss": "unr"})
    order = [*r.rest[1:], *r.red, "q", "ku"]
    new = lp.prioritize_loops(new, ",".join(order)) if len(order) > 1 else new
    new = lp.set_options(new, enforce_variable_access_ordered="no_check",
                         enforce_array_accesses_within_bounds="no_check")
    return lp.assume(new, " and ".join(f"{s} >= 1" for s in syms)) if syms else new


def _make(knl: lp.LoopKernel, domains: list[str], insns: Sequence[Any], temps: Sequence[Any]
          ) -> lp.TranslationUnit:
    return lp.make_kernel(
        domains, [*knl.substitutions.values(), *insns], [*knl.args, *temps], name=knl.name,
        target=knl.target, lang_version=(2018, 2), seq_dependencies=False,
        silenced_warnings=["v1_scheduler_fallback", "write_race*", "read_no_write*"])


# }}}


def value_registers(e: BatchedEinsum, t: Tiling) -> int:
    """32-bit registers a work-item's values take: accumulators, fragments and (double
    buffering) the next tiles' entries."""
    na, nb = -(-t.kt * t.bm // t.threads), -(-t.kt * t.bn // t.threads)
    n = t.px * t.py + t.px + t.py + ((na + nb) if t.double_buffer else 0)
    return n * dtype_size(e) // 4

# vim: foldmethod=marker
