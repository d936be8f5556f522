"""DRAM traffic: the bytes of global arrays a device kernel's statements touch.

Every global array the statements read, and every one they write, counts once (caches
beyond that are not modelled). Per device kernel, an access at a constant index counts
only that slice (``q[1, e, j]`` of a ``(5, E, 35)`` array: a fifth of it), so that a
program whose launches each read one field of a stacked array is not charged the whole
stack at every launch; an access at any other index counts the whole array.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import numpy as np

from feinsum.toolbox.cvec import ACCESS

#: The shape and itemsize of a global array by name (None: not a global array).
ArrayOf = Callable[[str], "tuple[Sequence[int], int] | None"]


def touched_slice(idx: Any) -> tuple[int | None, ...] | None:
    """The slice of an array an access at index *idx* touches: per axis the constant
    index, or None where the index varies (None for all of it: a scalar, an unknown
    index, or no constant axis)."""
    if idx is None:
        return None
    out = tuple(int(i) if isinstance(i, (int, np.integer)) else None for i in idx)
    return None if all(i is None for i in out) else out


def footprint(shape: Sequence[int], itemsize: int,
              slices: Iterable[tuple[int | None, ...] | None]) -> float:
    """Bytes of the *slices* (:func:`touched_slice`) of an array, at most all of it."""
    whole = math.prod(shape)
    total = 0
    for s in slices:
        if s is None or len(s) != len(shape):
            return float(itemsize * whole)
        total += math.prod(n for n, fixed in zip(shape, s, strict=True) if fixed is None)
    return float(itemsize * min(total, whole))


def dram_bytes(instructions: Iterable[Any], accessed: Callable[[Any], list[tuple[str, Any]]],
               array_of: ArrayOf, ids: Collection[str] | None = None) -> float:
    """The DRAM bytes of the statements *ids* of *instructions* (None: all of them, whole
    arrays only). *accessed* gives a statement's ``(name, index)`` accesses; C statements
    also touch the arrays of their vector loads and stores (:data:`~feinsum.toolbox.cvec.
    ACCESS`)."""
    import loopy as lp

    read: dict[str, set[Any]] = {}
    written: dict[str, set[Any]] = {}
    for insn in instructions:
        if ids is not None and insn.id not in ids:
            continue
        found = list(accessed(insn))
        if isinstance(insn, lp.CInstruction):
            found += [(m[2], None) for m in ACCESS.findall(insn.code)]
        w = set(insn.assignee_var_names())
        deps = set(insn.read_dependency_names())
        for name, idx in found:
            where = touched_slice(idx) if ids is not None else None
            if name in w:
                written.setdefault(name, set()).add(where)
            if name not in w or name in deps:
                read.setdefault(name, set()).add(where)
    total = 0.0
    for touched in (read, written):
        for name, slices in touched.items():
            array = array_of(name)
            if array is not None:
                total += footprint(*array, slices)
    return total
