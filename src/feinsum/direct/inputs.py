"""Checking the arrays and ranges a :class:`feinsum.direct.executor.CompiledEinsum` is called with.

Every problem is an :class:`~feinsum.EvaluationError` naming the array and the fix.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from feinsum.errors import EvaluationError, FeinsumError
from feinsum.spec.model import Array, BatchedEinsum

#: the kernel arguments of the first half of KeOps' 6-tuple
RANGE_NAMES = ("ranges_i", "slices_i", "redranges_j")


def is_cl_array(v: Any) -> bool:
    try:
        import pyopencl.array as cla
    except ImportError:  # pragma: no cover - pyopencl is a dependency
        return False
    return isinstance(v, cla.Array)


def shape_text(a: Array) -> str:
    return "(" + ", ".join(map(str, a.shape)) + ("," if a.ndim == 1 else "") + ")"


def bind_arrays(spec: BatchedEinsum, args: Sequence[Any], kwargs: Mapping[str, Any]
                ) -> dict[str, Any]:
    """The spec's arrays by name, from positional (``spec.arrays`` order) and keyword
    arguments."""
    arrays = spec.arrays
    names = [a.name for a in arrays]
    if len(args) > len(arrays):
        raise EvaluationError(f"{len(args)} positional arrays given but the spec has "
                              f"{len(arrays)} ({', '.join(names)})")
    bound = dict(zip(names, args, strict=False))
    for k, v in kwargs.items():
        if k not in names:
            raise EvaluationError(f"unknown array {k!r}; the spec's arrays are "
                                  f"{', '.join(names)}")
        if k in bound:
            raise EvaluationError(f"array {k!r} given both by position and by name")
        bound[k] = v
    missing = [a for a in arrays if a.name not in bound]
    if missing:
        a = missing[0]
        raise EvaluationError(
            f"missing array {a.name!r} (shape {shape_text(a)}, {a.dtype}); pass it as "
            f"{a.name}=... (arrays given: {', '.join(sorted(bound)) or 'none'})")
    return bound

def check_array(a: Array, v: Any, symbols: dict[str, tuple[int, str]]) -> Any:
    """*v* checked against the spec's array *a* (rank, fixed lengths, dtype, layout); the
    value to pass to the kernel. Length symbols seen are recorded in *symbols* (value,
    where), and must agree with those recorded before."""
    if a.ndim == 0:
        if is_cl_array(v):
            v = v.get()
        x = np.asarray(v)
        if x.ndim != 0 or (x.dtype.kind == "c" and a.dtype.kind != "c") or (
                x.dtype.kind not in "biufc"):
            raise EvaluationError(f"{a.name!r} is a scalar of dtype {a.dtype}; got "
                                  f"{type(v).__name__} {getattr(x, 'shape', '')}")
        return a.dtype.type(x)
    cl = is_cl_array(v)
    x = v if cl else np.asarray(v)
    if x.ndim != a.ndim:
        raise EvaluationError(
            f"array {a.name!r} has shape {tuple(x.shape)} but the spec gives "
            f"{shape_text(a)}; pass an array of rank {a.ndim}")
    for k, (n, got) in enumerate(zip(a.shape, x.shape, strict=True)):
        if isinstance(n, int):
            if got != n:
                raise EvaluationError(
                    f"array {a.name!r} has shape {tuple(x.shape)} but the spec gives "
                    f"{shape_text(a)} (axis {k} must have length {n})")
        elif n in symbols and symbols[n][0] != got:
            raise EvaluationError(
                f"length {n!r} is {symbols[n][0]} in {symbols[n][1]} but {got} in "
                f"array {a.name!r} (axis {k}); arrays sharing a length must agree")
        else:
            symbols.setdefault(n, (int(got), f"array {a.name!r} (axis {k})"))
    if x.dtype != a.dtype:
        raise EvaluationError(
            f"array {a.name!r} has dtype {x.dtype} but the spec gives {a.dtype}; pass "
            f"{a.name}.astype(np.{a.dtype.name}) (or build the spec with that dtype)")
    if cl:
        ok = x.flags.f_contiguous if a.order == "F" else x.flags.c_contiguous
        if not ok:
            raise EvaluationError(f"pyopencl array {a.name!r} is not "
                                  f"{'Fortran' if a.order == 'F' else 'C'}-contiguous; "
                                  "pass a contiguous copy")
        return x
    return np.asfortranarray(x) if a.order == "F" else np.ascontiguousarray(x)


def range_arrays(ranges: Any) -> tuple[list[np.ndarray], str]:
    """The first three arrays of KeOps' 6-tuple (or of a 3-tuple) on the host, int32 or
    int64, and a digest of their content (the key of prepared inputs)."""
    if not isinstance(ranges, (tuple, list)) or len(ranges) not in (3, 6):
        raise EvaluationError(
            "ranges= takes KeOps' 6-tuple (ranges_i, slices_i, redranges_j, ranges_j, "
            "slices_j, redranges_i), e.g. from feinsum.reductions.ranges.from_pairs, or its first "
            f"three arrays; got {type(ranges).__name__}"
            + (f" of length {len(ranges)}" if isinstance(ranges, (tuple, list)) else ""))
    host = []
    for name, r in zip(RANGE_NAMES, ranges[:3], strict=True):
        x = r.get() if is_cl_array(r) else np.asarray(r)
        if x.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise EvaluationError(f"ranges: {name} must be int32 or int64, got {x.dtype}")
        host.append(np.ascontiguousarray(x))
    digest = hashlib.blake2b(digest_size=16)
    for x in host:
        digest.update(repr((x.dtype.str, x.shape)).encode())
        digest.update(x.tobytes())
    return host, digest.hexdigest()


def int32_ranges(host: Sequence[np.ndarray], m: int, n: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ranges_i``, ``slices_i``, ``redranges_j`` checked against an ``m x n`` reduction
    and cast to int32 (what kernels take)."""
    from feinsum.reductions.ranges import check_ranges

    try:
        check_ranges(host[0], host[1], host[2], m, n)
    except (ValueError, TypeError, FeinsumError) as exc:
        raise EvaluationError(f"ranges do not fit an {m} x {n} reduction: {exc}") from exc
    ri, sl, rr = (np.ascontiguousarray(x.astype(np.int32).reshape(s)) for x, s in
                  zip(host, ((-1, 2), (-1,), (-1, 2)), strict=True))
    return ri, sl, rr
