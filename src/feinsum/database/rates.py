"""Flops, bytes and GFLOP/s of records, derived when they are read (internal).

A record's rate is the flops of the cheapest contraction order of its einsum at its lengths
(:func:`feinsum.spec.costs.roofline_work`, what the autotuner and the benchmarks count) over its
minimum time. Records measured before feinsum counted that way store the flops of every
term of the full index space, whose "rate" of a factorising kernel exceeds the device's
peak; the stored values stay as they were measured, and every reader (``query``, ``best``,
the hook's ``expected_gflops``, the CLI's tables and reports) gets the derived ones.
"""

from __future__ import annotations

import json
import threading
from typing import Any

_CACHE: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()
_MISSING = object()


def record_work(canonical_key: str, spec_json: str | None, lengths_key: str) -> Any:
    """The :class:`~feinsum.spec.costs.RooflineWork` of an einsum (its canonical key and spec
    JSON) at canonical lengths (their JSON), or None where it cannot be computed (a spec this
    feinsum cannot read, lengths that leave a symbol free). Cached per key and lengths."""
    found = _CACHE.get((canonical_key, lengths_key), _MISSING)
    if found is not _MISSING:
        return found
    work = None
    if spec_json:
        try:
            from feinsum.spec.costs import roofline_work
            from feinsum.spec.serialize import spec_from_json

            spec = spec_from_json(spec_json)
            work = roofline_work(spec, json.loads(lengths_key))
        except Exception:  # an unreadable spec or lengths: the stored values stand
            work = None
    with _LOCK:
        if len(_CACHE) > 4096:
            _CACHE.clear()
        _CACHE[(canonical_key, lengths_key)] = work
    return work


def derived(canonical_key: str, spec_json: str | None, lengths_key: str,
            min_time: float | None, flops: float | None, nbytes: float | None,
            gflops: float | None) -> tuple[float | None, float | None, float | None]:
    """(flops, bytes, GFLOP/s) of a record: derived from its einsum where possible, else the
    stored ones."""
    work = record_work(canonical_key, spec_json, lengths_key)
    if work is None:
        return flops, nbytes, gflops
    rate = work.flops / min_time * 1e-9 if min_time else None
    return float(work.flops), float(work.bytes), rate
