"""Global temporaries that live inside one launch moved to local (or private) memory.

When :mod:`feinsum.matching.merge` puts the units that write and read a global temporary
in one launch, each work-group only ever touches its own block of it: work-group ``g``
the entries ``B*g <= x < B*(g+1)`` along its first axis (the elements of a DG program),
all of them along the others. The temporary then need not be allocated in global memory
at every call, nor make the round trip through it: :func:`demote` makes it a temporary in
local memory of shape ``(B, ...)``, indexed by ``x - B*g`` (the C statements that address
it, such as ``vstoreN``, by a pointer moved back by as much), within the local memory the
launch has left (less the local temporaries it already uses); where the launch runs one
work-item per group (PoCL on a CPU), in that work-item's private memory.

In such a launch the recipes' local temporaries (a staged operator) go to private memory
too (:func:`privatize`): no work-group barriers are needed for them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pymbolic.primitives as prim


def _accessors(knl: Any, name: str) -> list[Any]:
    from loopy.kernel.instruction import CInstruction

    out = []
    for insn in knl.instructions:
        names = set(insn.assignee_var_names()) | set(insn.read_dependency_names())
        if isinstance(insn, CInstruction):
            names |= set(insn.read_variables) | set(
                re.findall(r"\b[A-Za-z_]\w*\b", insn.code))
        if name in names:
            out.append(insn)
    return out


def _itemsize(knl: Any, tv: Any) -> int:
    from loopy.types import NumpyType

    if isinstance(tv.dtype, NumpyType):
        return int(tv.dtype.numpy_dtype.itemsize)
    sizes = [a.dtype.numpy_dtype.itemsize for a in knl.args
             if isinstance(getattr(a, "dtype", None), NumpyType)]
    return int(max(sizes, default=np.dtype(np.complex128).itemsize))


def _space_bytes(knl: Any, insn_ids: set[str], space: Any) -> int:
    used = set()
    for i in insn_ids:
        insn = knl.id_to_insn[i]
        used |= set(insn.dependency_names()) | set(insn.assignee_var_names())
    total = 0
    for n in used:
        tv = knl.temporary_variables.get(n)
        if tv is not None and tv.address_space == space and isinstance(
                tv.shape, tuple) and all(isinstance(x, int) for x in tv.shape):
            total += math.prod(tv.shape) * _itemsize(knl, tv)
    return total


def demote(knl: Any, unit_ids: Sequence[frozenset[str]], first: Sequence[int],
           local: int, private: int = 0) -> tuple[Any, list[str]]:
    """*knl* with the global temporaries that one launch alone uses, blockwise, in local
    memory (see the module docstring), and one line per temporary moved: at most *local*
    bytes of local memory per work-group; where the launch has one work-item per group,
    in private memory instead (at most *private* bytes: PoCL keeps a group's private
    arrays on its thread's stack, measured 1.4x faster than its local memory)."""
    from loopy.kernel.data import AddressSpace

    from feinsum.matching.merge import ALL, _block, _group_inames, _has_local_axes

    if local <= 0 and private <= 0:
        return knl, []
    launch = {i: first[k] for k, u in enumerate(unit_ids) for i in u}
    done = []
    for name, tv in sorted(knl.temporary_variables.items()):
        if tv.address_space != AddressSpace.GLOBAL or not isinstance(tv.shape, tuple) or (
                not tv.shape or not all(isinstance(n, int) for n in tv.shape)):
            continue
        insns = _accessors(knl, name)
        where = {launch.get(i.id) for i in insns}
        if len(where) != 1 or None in where or not _c_order(tv):
            continue
        union = None
        groups_of: dict[str, str] = {}
        for insn in insns:
            groups = _group_inames(knl, insn)
            if sorted(groups) != [0]:
                union = ALL
                break
            groups_of[insn.id] = groups[0]
            for m in _maps(knl, insn, name, groups):
                if m is ALL:
                    union = ALL
                    break
                union = m if union is None else union.union(m)
            if union is ALL:
                break
        if union is None or union is ALL:
            continue
        block = _block(union, 0)
        if block is None:
            continue
        shape = (block, *tv.shape[1:])
        nbytes = math.prod(shape) * _itemsize(knl, tv)
        mine = {i for k, u in enumerate(unit_ids) if first[k] in where for i in u}
        space = (AddressSpace.LOCAL if _has_local_axes(knl, mine)
                 else AddressSpace.PRIVATE)
        budget = local if space == AddressSpace.LOCAL else private
        if _space_bytes(knl, mine, space) + nbytes > budget:
            continue
        if not _c_safe(knl, insns, unit_ids):
            continue
        knl = _moved(knl, name, shape, block, tv, groups_of, space)
        knl = _no_local_sync(knl, insns, unit_ids)
        where_text = "local" if space == AddressSpace.LOCAL else "private"
        done.append(f"global temporary {name!r} kept in {where_text} memory ({block} "
                    "entries of its first axis per work-group)")
    return knl, done


def privatize(knl: Any, unit_ids: Sequence[frozenset[str]], first: Sequence[int],
              private: int) -> tuple[Any, list[str]]:
    """*knl* with the local temporaries of launches that run one work-item per group
    (PoCL on a CPU) in private memory, within *private* bytes per work-item, and one line
    per temporary moved. Local memory there is shared with no one, but loopy still puts a
    work-group barrier after each write to it, and PoCL compiles a kernel in time that grows
    steeply with the number of its barriers (minutes for a launch of several einsums)."""
    from loopy.kernel.data import AddressSpace

    from feinsum.matching.merge import _has_local_axes

    launch = {i: first[k] for k, u in enumerate(unit_ids) for i in u}
    members: dict[int, set[str]] = {}
    for i, f in launch.items():
        members.setdefault(f, set()).add(i)
    done = []
    for name, tv in sorted(knl.temporary_variables.items()):
        if tv.address_space != AddressSpace.LOCAL or not isinstance(tv.shape, tuple) or (
                not all(isinstance(n, int) for n in tv.shape)):
            continue
        where = {launch.get(i.id) for i in _accessors(knl, name)}
        if len(where) != 1 or None in where:
            continue
        mine = members[where.pop()]  # type: ignore[index]
        nbytes = math.prod(tv.shape) * _itemsize(knl, tv)
        if _has_local_axes(knl, mine) or (
                _space_bytes(knl, mine, AddressSpace.PRIVATE) + nbytes > private):
            continue
        temps = dict(knl.temporary_variables)
        temps[name] = tv.copy(address_space=AddressSpace.PRIVATE)
        knl = knl.copy(temporary_variables=temps)
        done.append(f"local temporary {name!r} kept in private memory (one work-item per "
                    "work-group: no barriers)")
    return knl, done


def _unit_of(unit_ids: Sequence[frozenset[str]]) -> dict[str, int]:
    return {i: k for k, u in enumerate(unit_ids) for i in u}


def _c_safe(knl: Any, insns: Sequence[Any], unit_ids: Sequence[frozenset[str]]) -> bool:
    """Whether loopy can check the accessors *insns* of a local temporary within each
    unit: a C statement among them must be told (``no_sync_with``) that it needs no
    barrier with every other accessor of its unit (loopy cannot read C statements'
    accesses)."""
    from loopy.kernel.instruction import CInstruction

    unit = _unit_of(unit_ids)
    for a in insns:
        if not isinstance(a, CInstruction):
            continue
        for b in insns:
            if b.id != a.id and unit[b.id] == unit[a.id] and not (
                    any(i == b.id for i, _ in a.no_sync_with)
                    or any(i == a.id for i, _ in b.no_sync_with)):
                return False
    return True


def _no_local_sync(knl: Any, insns: Sequence[Any], unit_ids: Sequence[frozenset[str]]) -> Any:
    """The accessors of a demoted temporary in different units of one launch told that
    they need no work-group barrier between them: assembly puts one between the units
    where a group has several work-items (:func:`feinsum.matching.merge.with_barriers`)."""
    unit = _unit_of(unit_ids)
    extra: dict[str, set[tuple[str, str]]] = {}
    for a in insns:
        for b in insns:
            if unit[a.id] != unit[b.id]:
                extra.setdefault(a.id, set()).add((b.id, "local"))
    return knl.copy(instructions=[
        i.copy(no_sync_with=i.no_sync_with | frozenset(extra[i.id])) if i.id in extra else i
        for i in knl.instructions])


def _c_order(tv: Any) -> bool:
    strides = [getattr(t, "stride", None) for t in (tv.dim_tags or ())]
    want = [math.prod(tv.shape[k + 1:]) for k in range(len(tv.shape))]
    return strides == want


def _maps(knl: Any, insn: Any, name: str, groups: dict[int, str]) -> list[Any]:
    """The access maps of *insn* to temporary *name* (:data:`~feinsum.matching.merge.ALL`
    where they cannot be described)."""
    from loopy.kernel.instruction import CInstruction

    from feinsum.matching.merge import ALL, _access, _contiguous_axes
    from feinsum.spec.formulas import walk

    if isinstance(insn, CInstruction):
        subs = [a for a in insn.assignees if getattr(getattr(a, "aggregate", None), "name",
                                                      None) == name]
        if not subs or name in insn.read_variables:
            return [ALL]
        return [_access(knl, insn, s, groups, _contiguous_axes(knl, s)) for s in subs]
    subs = [a for a in insn.assignees if getattr(getattr(a, "aggregate", None), "name",
                                                  None) == name]
    for e in (x for ex in [getattr(insn, "expression", 0), *insn.predicates] for x in walk(ex)):
        if isinstance(e, prim.Subscript) and getattr(e.aggregate, "name", None) == name:
            subs.append(e)
    from feinsum.matching.merge import _bare

    if name in _bare([getattr(insn, "expression", 0), *insn.predicates]) or not subs:
        return [ALL]
    return [_access(knl, insn, s, groups) for s in subs]


def _moved(knl: Any, name: str, shape: tuple[int, ...], block: int, tv: Any,
           groups_of: dict[str, str], space: Any) -> Any:
    from loopy.kernel.instruction import CInstruction
    from loopy.symbolic import IdentityMapper

    class Shift(IdentityMapper):  # type: ignore[misc]
        def __init__(self, g: str) -> None:
            super().__init__()
            self.g = g

        def map_subscript(self, e: Any, *args: Any) -> Any:
            e = super().map_subscript(e, *args)
            if getattr(e.aggregate, "name", None) != name:
                return e
            idx = list(e.index_tuple)
            idx[0] = idx[0] - block * prim.Variable(self.g)
            return prim.Subscript(e.aggregate, tuple(idx))

    row = math.prod(tv.shape[1:])
    insns = []
    for insn in knl.instructions:
        g = groups_of.get(insn.id)
        if g is None:
            insns.append(insn)
        elif isinstance(insn, CInstruction):
            base = f"feinsum_base_{insn.id}"
            code = re.sub(rf"\b{re.escape(name)}\b", f"({name} - {base})", insn.code)
            shift = Shift(g)
            insns.append(insn.copy(
                code=code, iname_exprs=[*insn.iname_exprs,
                                        (base, row * block * prim.Variable(g))],
                assignees=tuple(shift(a) for a in insn.assignees)))
        else:
            insns.append(insn.with_transformed_expressions(Shift(g)))
    temps = dict(knl.temporary_variables)
    temps[name] = tv.copy(shape=shape, dim_tags=None, address_space=space)
    return knl.copy(instructions=insns, temporary_variables=temps)
