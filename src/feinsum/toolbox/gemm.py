"""GPU GEMM kernels for two-operand contractions (the ``gemm_gpu`` recipe's steps).

A contraction is seen as ``out[rest, Y, X] = sum_K A[Y, K] * B[K, X]`` over fused index
groups (:mod:`feinsum.toolbox.gemm_view`); which operands are ``A`` and ``B``, and which
scale them: :mod:`feinsum.toolbox.gemm_operands`; the rows of a batched einsum:
:mod:`feinsum.toolbox.gemm_rows`; the stores: :mod:`feinsum.toolbox.gemm_stores`.

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

import itertools
from dataclasses import dataclass
from typing import Any

import loopy as lp
import numpy as np
import pymbolic.primitives as prim

from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox.core import dtype_size, kernel_of
from feinsum.toolbox.dense import subscript
from feinsum.toolbox.gemm_rows import row_name, rows_in_sequence
from feinsum.toolbox.gemm_stores import spread_iname, stores
from feinsum.toolbox.gemm_view import (
    Roles,
    Tiling,
    components,
    group_length,
    operand_entry,
    tiles_kept,
    transposes,
)

#: 32-bit registers a work-item keeps for addresses, indices and loop counters.
RESERVED_REGISTERS = 32
#: Unrolled FMA statements of one ``K`` tile (``px*py*kt``) at most: compile time.
MAX_UNROLLED = 1024


# {{{ the kernel


_V = prim.Variable


@dataclass(frozen=True)
class _Side:
    """One operand's tile: operand column, the fused index group it tiles besides ``K``,
    that group's block (``BM`` or ``BN``), work-group index, local tile name, its rows'
    padding, whether the copy transposes, the prefix of its inames and statements."""

    col: int
    group: tuple[str, ...]
    length: Any
    block: int
    g: Any
    tile: str
    transposed: bool
    tag: str
    #: whether the side keeps a tile for each value of :attr:`Roles.carried` (``B``)
    kept: bool = False

    def lead(self, iname: str) -> tuple[Any, ...]:
        """The leading index of the side's tiles, registers and fragments in a statement
        whose loop over the kept tiles is *iname* (none where it keeps one)."""
        return (_V(iname),) if self.kept else ()


def _entry(t: Tiling, sd: _Side, ktile: Any, buf: Any, f: Any, v: Any, lead: tuple[Any, ...] = ()
           ) -> tuple[Any, Any, Any, Any, frozenset[Any]]:
    """Entry *v* of the run a work-item copies in round *f* of a copy of *sd*'s tile:
    its row and ``K`` index in the operand, its place in the tile (buffer *buf*), its
    offset in the tile's ``K`` rows, and the predicate of the work-items that copy."""
    runs = sd.block // t.vw
    flat = f * t.threads + _V("ly") * t.lx + _V("lx")
    kk, m4 = (flat % t.kt, flat // t.kt) if sd.transposed else (flat // runs, flat % runs)
    dest = subscript(sd.tile, *lead, buf, kk, m4, *((v,) if t.vw > 1 else ()))
    preds = frozenset() if (t.kt * runs) % t.threads == 0 else frozenset(
        {prim.Comparison(flat, "<", t.kt * runs)})
    return sd.g * sd.block + m4 * t.vw + v, ktile * t.kt + kk, dest, kk, preds


def _edges(t: Tiling, sd: _Side, lens: dict[str, Any]) -> tuple[bool, bool]:
    """Whether *sd*'s copies may read past the operand: along its block (a length the
    block may not divide), along ``K`` (a length the tiles times the slices may not)."""
    return (not (isinstance(sd.length, int) and sd.length % sd.block == 0),
            not (isinstance(lens["K"], int) and lens["K"] % (t.kt * t.split) == 0))


def _masks(t: Tiling, sd: _Side, lens: dict[str, Any], within: frozenset[str]
           ) -> tuple[list[Any], list[Any]]:
    """Before the ``K`` loop, what of a work-item's copies lies inside the operand:
    ``ok{tag}[round, entry]`` (1: its row is) and ``kl{tag}[round]`` (``K`` less the
    run's offset in the tile rows), so that a copy only compares its tile's offset."""
    edge_m, edge_k = _edges(t, sd, lens)
    h = _V(f"h{sd.tag}")
    u: Any = _V(f"u{sd.tag}") if t.vw > 1 else 0
    gm, _, _, kk, preds = _entry(t, sd, 0, 0, h, u)
    rounds, loops = copy_rounds(t, sd.block), {h.name} | ({f"u{sd.tag}"} if t.vw > 1 else set())
    insns: list[Any] = []
    temps: list[Any] = []
    if edge_m:
        shape = (rounds, t.vw) if t.vw > 1 else (rounds,)
        temps.append(lp.TemporaryVariable(f"ok{sd.tag}", np.int32, shape=shape,
                                          address_space=lp.AddressSpace.PRIVATE))
        insns.append(lp.Assignment(
            subscript(f"ok{sd.tag}", h, *((u,) if t.vw > 1 else ())),
            prim.If(prim.Comparison(gm, "<", sd.length), 1, 0), id=f"ok_{sd.tag}",
            within_inames=within | loops, predicates=preds))
    if edge_k:
        temps.append(lp.TemporaryVariable(f"kl{sd.tag}", np.int32, shape=(rounds,),
                                          address_space=lp.AddressSpace.PRIVATE))
        insns.append(lp.Assignment(subscript(f"kl{sd.tag}", h), lens["K"] - kk,
                                   id=f"kl_{sd.tag}", within_inames=within | {h.name},
                                   predicates=preds))
    return insns, temps


def _copy(e: BatchedEinsum, r: Roles, t: Tiling, sd: _Side, lens: dict[str, Any],
          ktile: Any, buf: Any, within: frozenset[str], name: str, deps: frozenset[str],
          suffix: str = "", ahead: bool = False) -> list[Any]:
    """Copy *sd*'s tile of K tile *ktile* to buffer *buf* of its local tile: every
    work-item loads its entries (clamped into the operand, so unconditionally) into
    registers ``r{tag}`` (statement ``{name}_ld``), zeros those outside the operand
    (``{name}_zero``, by the masks of :func:`_masks`), then stores them to local memory
    (``{name}``). A work-item copies runs of ``vw`` entries (the local tile's vectors) in
    rounds ``i{tag}{suffix}`` (``s...`` for the stores), the entries of a run in
    ``v{tag}{suffix}`` (``w...``). *ahead*: the double buffer's copy of the next tile,
    which the last round makes past ``K`` (a tile never read): its ``K`` index is clamped
    into the operand even where ``K`` is a multiple of the tiles (an out-of-bounds read
    crashes a GPU: NVIDIA's OpenCL fails the launch with -9999)."""
    dt = e.value_dtype(0)
    edge_m, edge_k = _edges(t, sd, lens)

    def loop(name: str) -> tuple[Any, set[str]]:  # no loop over the entries of a scalar
        return (_V(name), {name}) if t.vw > 1 else (0, set())

    kept = f"c{sd.tag}{suffix}"  # the loop over the kept tiles
    lead, within = sd.lead(kept), within | ({kept} if sd.kept else set())

    def run(name: str, f: Any, v: Any, per_tile: bool = True) -> Any:
        return subscript(name, *(lead if per_tile else ()), f, *((v,) if t.vw > 1 else ()))

    f = _V(f"i{sd.tag}{suffix}")
    v, vl = loop(f"v{sd.tag}{suffix}")
    gm, gk, _, _, preds = _entry(t, sd, ktile, buf, f, v)
    idx = {**components(e, sd.group, prim.Min((gm, sd.length - 1)) if edge_m else gm),
           **components(e, r.k, prim.Min((gk, lens["K"] - 1)) if edge_k or ahead else gk),
           **{i: _V(i) for i in (*r.rest, *r.red)},
           **({r.carried[0]: _V(kept)} if sd.kept else {})}
    value = _summed(e, r, sd.col, idx)
    out = [lp.Assignment(run(f"r{sd.tag}", f, v), value,
                         id=f"{name}_ld", within_inames=within | {f.name} | vl,
                         predicates=preds, depends_on=deps)]
    inside = [*([prim.Comparison(run(f"ok{sd.tag}", f, v, False), "!=", 0)] if edge_m else []),
              *([prim.Comparison(ktile * t.kt, "<", subscript(f"kl{sd.tag}", f))]
                if edge_k else [])]
    if inside:  # zero what lies outside, in the registers (the stores stay whole vectors)
        reg = run(f"r{sd.tag}", f, v)
        masks = {f"ok_{sd.tag}"} if edge_m else set()
        out.append(lp.Assignment(
            reg, prim.If(prim.LogicalAnd(tuple(inside)) if len(inside) > 1 else inside[0],
                         reg, dt.type(0)),
            id=f"{name}_zero", within_inames=within | {f.name} | vl, predicates=preds,
            depends_on=frozenset({f"{name}_ld", *masks, *({f"kl_{sd.tag}"} if edge_k
                                                          else ())})))
    f = _V(f"s{sd.tag}{suffix}")
    v, vl = loop(f"w{sd.tag}{suffix}")
    kept = f"d{sd.tag}{suffix}"  # the stores' own loop over the kept tiles
    lead, within = sd.lead(kept), within - {f"c{sd.tag}{suffix}"} | (
        {kept} if sd.kept else set())
    _, _, dest, _, preds = _entry(t, sd, ktile, buf, f, v, lead)
    out.append(lp.Assignment(dest, run(f"r{sd.tag}", f, v), id=name,
                             within_inames=within | {f.name} | vl, predicates=preds,
                             depends_on=frozenset({out[-1].id})))
    return out


def _summed(e: BatchedEinsum, r: Roles, col: int, idx: dict[str, Any]) -> Any:
    """The entry of operand *col* at *idx* times its factors, summed over its side's
    :attr:`Roles.a_sums` (or ``b_sums``), unrolled."""
    a = col == r.a
    sums = r.a_sums if a else r.b_sums
    terms = []
    for values in itertools.product(*(range(int(e.lengths[i])) for i in sums)):
        at = {**idx, **dict(zip(sums, values, strict=True))}
        loads = [operand_entry(e, c, at) for c in (col, *(r.a_factors if a else r.b_factors))]
        terms.append(prim.Product(tuple(loads)) if len(loads) > 1 else loads[0])
    return prim.Sum(tuple(terms)) if len(terms) > 1 else terms[0]


def copy_rounds(t: Tiling, block: int) -> int:
    """Rounds of ``vw`` entries in which the work-items copy a ``kt x block`` tile."""
    return -(-t.kt * block // (t.vw * t.threads))


def gemm_kernel(t_unit: lp.TranslationUnit, e: BatchedEinsum, r: Roles, t: Tiling
                ) -> lp.TranslationUnit:
    """The GEMM kernel of *e* (roles *r*, tiling *t*); see the module docstring."""
    knl = kernel_of(t_unit)
    dt = e.value_dtype(0)
    lens = {g: group_length(e, grp) for g, grp in (("X", r.x), ("Y", r.y), ("K", r.k))}
    sides = (_Side(r.a, r.y, lens["Y"], t.bm, _V("gy"), "tile_a", transposes(e, r, r.a), "a"),
             _Side(r.b, r.x, lens["X"], t.bn, _V("gx"), "tile_b", transposes(e, r, r.b), "b",
                   bool(r.carried)))
    kept = (tiles_kept(e, r),) if r.carried else ()  # a register tile per carried value
    nbuf = 2 if t.double_buffer else 1
    s = _V("gs") if t.split > 1 else 0
    ktile = _V("q") * t.split + s  # the K tile of this round (slice s: s, s + split...)
    groups = frozenset({"gx", "gy", "lx", "ly", *r.rest, *(["gs"] if t.split > 1 else [])})
    outside = groups | set(r.red)  # the loops every copy sits in
    body = outside | {"q"}
    private, local = lp.AddressSpace.PRIVATE, lp.AddressSpace.LOCAL
    temps: list[Any] = [lp.TemporaryVariable("acc", dt, shape=(*kept, t.py, t.px),
                                             address_space=private)]
    vec = (t.vw,) if t.vw > 1 else ()  # the local tiles' and fragments' vectors
    tags = ["c"] * 3 + ["vec"] * len(vec)
    full: Any = ",".join(tags)  # loopy parses dim_tags given as text
    part: Any = ",".join(tags[2:])
    for sd, n in zip(sides, (t.py, t.px), strict=True):
        row = (sd.block + t.pad(sd.transposed)) // t.vw
        lead, lead_tag = (kept, "c,") if sd.kept else ((), "")
        temps += [lp.TemporaryVariable(f"f{sd.tag}", dt, shape=(*lead, n // t.vw, *vec),
                                       dim_tags=lead_tag + part,
                                       address_space=private),
                  lp.TemporaryVariable(sd.tile, dt, shape=(*lead, nbuf, t.kt, row, *vec),
                                       dim_tags=lead_tag + full, address_space=local),
                  lp.TemporaryVariable(f"r{sd.tag}", dt,
                                       shape=(*lead, copy_rounds(t, sd.block), *vec),
                                       dim_tags=lead_tag + part, address_space=private)]
    carried = {"irc"} if r.carried else set()
    insns: list[Any] = [lp.Assignment(
        subscript("acc", *sides[1].lead("irc"), _V("ipy"), _V("ipx")), dt.type(0),
        id="init", within_inames=groups | {"ipx", "ipy"} | carried)]
    for sd in sides:
        more, tmp = _masks(t, sd, lens, groups)
        insns += more
        temps += tmp
    cur: Any = 0
    if t.double_buffer:  # tile 0 before the rounds, round q copies tile q + 1
        for sd in sides:
            insns += _copy(e, r, t, sd, lens, s, 0, outside, f"pro_{sd.tag}", frozenset(),
                           suffix="0")
        prologue = frozenset({"pro_a_ld", "pro_b_ld", "pro_a", "pro_b"})
        cur = _V("q") % 2
        for sd in sides:
            insns += _copy(e, r, t, sd, lens, ktile + t.split, (_V("q") + 1) % 2, body,
                           f"cp_{sd.tag}", prologue, ahead=True)
        fetched = prologue | {"cp_a_ld", "cp_b_ld"}
    else:
        for sd in sides:
            insns += _copy(e, r, t, sd, lens, ktile, 0, body, f"cp_{sd.tag}", frozenset())
        fetched = frozenset({"cp_a", "cp_b"})
    # the register tile's update: fragments of both tiles, then px*py unguarded FMAs
    ku = _V("ku")
    for sd, lanes, lid, p in ((sides[0], t.ly, "ly", "fra"), (sides[1], t.lx, "lx", "frb")):
        run = _V(p) * lanes + _V(lid)  # run p of the work-item's vectors of the tile row
        lane = (_V(f"{p}v"),) if t.vw > 1 else ()
        lead = sd.lead("cf")
        insns.append(lp.Assignment(
            subscript(f"f{sd.tag}", *lead, _V(p), *lane),
            subscript(sd.tile, *lead, cur, ku, run, *lane), id=f"frag_{sd.tag}",
            within_inames=body | {"ku", p, *(f"{p}v" for _ in lane)}
            | ({"cf"} if sd.kept else set()),
            depends_on=fetched,
            no_sync_with=frozenset({(f"cp_{sd.tag}", "any")} if t.double_buffer else ())))

    def frag(name: str, p: Any, lead: tuple[Any, ...] = ()) -> Any:
        return subscript(name, *lead, *((p // t.vw, p % t.vw) if t.vw > 1 else (p,)))

    lead = sides[1].lead("cm")
    pair = (frag("fa", _V("py")), frag("fb", _V("px"), lead))
    cell = subscript("acc", *lead, _V("py"), _V("px"))
    insns.append(lp.Assignment(
        cell, cell + prim.Product(pair if r.a == 0 else pair[::-1]), id="fma",
        within_inames=body | {"ku", "py", "px"} | ({"cm"} if r.carried else set()),
        depends_on=frozenset({"init", "frag_a", "frag_b"})))
    if t.double_buffer:  # the next tile's stores after this tile's reads, then one barrier
        insns = [i.copy(depends_on=i.depends_on | {"fma"}, no_sync_with=frozenset(
                     {(f"frag_{i.id[-1]}", "any")})) if i.id in ("cp_a", "cp_b") else i
                 for i in insns]
        insns.append(lp.BarrierInstruction(
            "tile_end", synchronization_kind="local", mem_kind="local", within_inames=body,
            depends_on=frozenset({"cp_a", "cp_b", "fma"})))
    insns += stores(e, r, t, lens)
    if t.split > 1:
        temps.append(lp.TemporaryVariable("slices", dt, shape=(t.split, lens["Y"], lens["X"]),
                                          address_space=lp.AddressSpace.GLOBAL))
    copies: dict[str, str] = {}
    if e.nrows > 1:  # the other rows' GEMMs after row 0's, in the same work-groups
        insns, copies = rows_in_sequence(
            e.nrows, e.noperands, insns, groups | {"ha", "hb", "ua", "ub"},
            {f"{m}_{sd.tag}" for m in ("ok", "kl") for sd in sides}, "store")
    return _finish(knl, e, r, t, insns, temps, lens, copies)


def _affine(expr: Any) -> str:
    from pymbolic.mapper.stringifier import StringifyMapper

    return str(StringifyMapper()(expr))


def _finish(knl: lp.LoopKernel, e: BatchedEinsum, r: Roles, t: Tiling, insns: list[Any],
            temps: list[Any], lens: dict[str, Any], copies: dict[str, str]
            ) -> lp.TranslationUnit:
    """The kernel's domain, iname tags and options around *insns* (*copies*: the inames
    of the rows after the first, and the iname of row 0 each copies)."""
    X, Y, K = (_affine(lens[g]) for g in ("X", "Y", "K"))
    syms = sorted({str(n) for n in e.lengths.values() if isinstance(n, str)})
    na, nb = copy_rounds(t, t.bm), copy_rounds(t, t.bn)
    ranges = {"lx": t.lx, "ly": t.ly, "ku": t.kt,
              **{n: t.px for n in ("px", "ipx", "spx")},
              **{n: t.py for n in ("py", "ipy", "spy")},
              "fra": t.py // t.vw, "frb": t.px // t.vw,
              **({"frav": t.vw, "frbv": t.vw} if t.vw > 1 else {}),
              **{i: e.lengths[i] for i in (*r.rest, *r.red)}}
    ranges.update({"ha": na, "hb": nb, **({"ua": t.vw, "ub": t.vw} if t.vw > 1 else {})})
    kept = tiles_kept(e, r) if r.carried else 0  # the loops over the kept tiles
    for sfx in ("", "0") if t.double_buffer else ("",):
        ranges.update({f"{c}a{sfx}": na for c in "is"} | {f"{c}b{sfx}": nb for c in "is"}
                      | {f"{c}{o}{sfx}": t.vw for c in "vw" for o in "ab" if t.vw > 1}
                      | ({f"cb{sfx}": kept, f"db{sfx}": kept} if kept else {}))
    if kept:  # the init's, fragments' and FMAs' loops, and the stores' over the spread
        ranges.update(dict.fromkeys(("irc", "cf", "cm"), kept))
        ranges.update({spread_iname(i): int(e.lengths[i]) for i in r.spread})
    if t.split > 1:
        ranges["gs"] = t.split
    cons = [f"0 <= gx and {t.bn}*gx < {X}", f"0 <= gy and {t.bm}*gy < {Y}",
            # every slice runs the same rounds (a tile past K reads zeros): a bound that
            # depended on the slice would also keep slices without tiles from storing
            f"0 <= q and {t.kt * t.split}*q < {K}"]
    outer = ["lx", "ly", *r.rest, *r.red, *(["gs"] if t.split > 1 else [])]
    cons += [f"0 <= {n} < {ranges[n]}" for n in outer]
    names = ", ".join(["gx", "gy", "q", *outer])
    params = f"[{', '.join(syms)}] -> " if syms else ""
    # the short loops a domain each: isl's work grows fast with a domain's dimensions
    domains = [f"{params}{{[{names}]: {' and '.join(cons)}}}",
               *(f"{{[{n}]: 0 <= {n} < {v}}}" for n, v in ranges.items() if n not in outer)]
    for n, old in copies.items():  # the other rows' loops: each a domain of its own
        bound = f"{t.kt * t.split}*{n} < {K}" if old == "q" else f"{n} < {ranges[old]}"
        domains.append(f"{params}{{[{n}]: 0 <= {n} and {bound}}}")
    if t.split > 1:
        domains.append(f"[{', '.join(syms)}] -> {{[sm, sn, ss]: 0 <= sm < {Y} and "
                       f"0 <= sn < {X} and 0 <= ss < {t.split}}}")
    new = lp.make_kernel(
        domains, [*knl.substitutions.values(), *insns], [*knl.args, *temps],  # type: ignore[list-item]
        name=knl.name,
        target=knl.target, lang_version=(2018, 2), seq_dependencies=False,
        silenced_warnings=["v1_scheduler_fallback", "write_race*", "read_no_write*"])
    tags = {"gx": "g.0", "gy": "g.1", "lx": "l.0", "ly": "l.1",
            **{n: "unr" for n in ranges if n not in ("lx", "ly", *r.rest, *r.red, "gs")},
            "frav": "vec", "frbv": "vec",
            **{f"w{o}{sfx}": "vec" for o in "ab" for sfx in ("", "0")}}
    tags = {k: v for k, v in tags.items() if k in ranges or k in ("gx", "gy")}
    tags |= {n: tags[old] for n, old in copies.items() if old in tags}
    if t.split > 1:
        tags["gs"] = "g.2"
    elif r.rest:
        tags[r.rest[0]] = "g.2"
    new = lp.tag_inames(new, tags)
    if t.split > 1:
        new = lp.split_iname(new, "sn", 64, outer_tag="g.0", inner_tag="l.0")
        new = lp.tag_inames(new, {"sm": "g.1", "ss": "unr"})
    order = [*r.rest[1:], *r.red, "q", "ku"]
    new = lp.prioritize_loops(new, ",".join(order))
    for row in range(1, e.nrows):
        new = lp.prioritize_loops(new, ",".join(row_name(i, row) for i in order))
    new = lp.set_options(new, enforce_variable_access_ordered="no_check",
                         enforce_array_accesses_within_bounds="no_check")
    return lp.assume(new, " and ".join(f"{s} >= 1" for s in syms)) if syms else new


def local_entries(e: BatchedEinsum, r: Roles, t: Tiling) -> int:
    """Entries of *t*'s local tiles for *e* (both buffers, every kept ``B`` tile)."""
    return t.local_entries(transposes(e, r, r.a), transposes(e, r, r.b), tiles_kept(e, r))


def register_budget(device: Any) -> int:
    """32-bit registers a work-item's values may take on *device*."""
    from feinsum.devices.info import GENERIC_GPU

    regs = device.registers_per_work_item or GENERIC_GPU["registers_per_work_item"]
    return int(regs) - RESERVED_REGISTERS


def value_registers(e: BatchedEinsum, t: Tiling, r: Roles | None = None) -> int:
    """32-bit registers a work-item's values take: accumulators, fragments and the
    entries it copies (those of ``B`` once per kept tile of roles *r*)."""
    kept = tiles_kept(e, r) if r is not None else 1
    copied = (copy_rounds(t, t.bm) + kept * copy_rounds(t, t.bn)) * t.vw
    n = kept * (t.px * t.py + t.px) + t.py + copied
    return n * dtype_size(e) // 4

# vim: foldmethod=marker
