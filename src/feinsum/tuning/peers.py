"""Peers: the same computation by other libraries, timed in this process on the same data.

Plain einsums (every operand one array) are timed with ``numpy.einsum(optimize=True)`` and,
when installed, ``opt_einsum.contract`` and ``torch.einsum`` (CPU, all cores); anything
else (formulas, min/max/argmin/logsumexp reductions) with :func:`feinsum.evaluate`, the
bounded-memory numpy evaluation. Times are host wall-clock minima under the measurement
protocol (warm-up, then at least ``min_samples`` calls and ``min_time`` seconds), as
feinsum's own kernels are ranked by their minimum.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from feinsum.spec.model import Array

if TYPE_CHECKING:
    from feinsum.spec.model import BatchedEinsum


def _time(fn: Callable[[], Any], min_samples: int, min_time: float, max_time: float) -> float:
    fn()  # warm-up
    samples: list[float] = []
    t_start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if len(samples) >= min_samples and sum(samples) >= min_time:
            break
        if time.perf_counter() - t_start >= max_time and len(samples) >= 2:
            break
    return min(samples)


def _plain_rows(e: BatchedEinsum) -> list[list[str]] | None:
    """Each row's operand array names, or None if some operand is not a single array."""
    if e.reduction != "sum" or e.block_sparse is not None:
        return None
    rows = []
    for row in e.arguments:
        names = []
        for entry in row:
            if len(entry) != 1 or not isinstance(entry[0], Array):
                return None
            names.append(entry[0].name)
        rows.append(names)
    return rows


def peer_functions(e: BatchedEinsum, inputs: Mapping[str, Any]
                   ) -> dict[str, Callable[[], Any]]:
    """The peers available for *e* (lengths fixed) as zero-argument callables."""
    rows = _plain_rows(e)
    if rows is None:
        from feinsum.lowering.reference import evaluate

        return {"numpy (feinsum.evaluate)": lambda: evaluate(e, dict(inputs))}
    import numpy as np

    letters = {i: chr(ord("a") + k) for k, i in enumerate(e.indices)}
    subscripts = (",".join("".join(letters[i] for i in idx) for idx in e.in_indices)
                  + "->" + "".join(letters[i] for i in e.out_indices))
    operands = [[inputs[n] for n in names] for names in rows]
    peers: dict[str, Callable[[], Any]] = {
        "numpy.einsum": lambda: [np.einsum(subscripts, *ops, optimize=True) for ops in operands]
    }
    try:
        import opt_einsum

        peers["opt_einsum"] = lambda: [opt_einsum.contract(subscripts, *ops) for ops in operands]
    except ImportError:
        pass
    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        t_ops = [[torch.from_numpy(np.ascontiguousarray(a)) for a in ops] for ops in operands]
        peers["torch.einsum"] = lambda: [torch.einsum(subscripts, *ops) for ops in t_ops]
    except ImportError:
        pass
    return peers


def time_peers(e: BatchedEinsum, inputs: Mapping[str, Any], *, min_samples: int = 5,
               min_time: float = 0.2, max_time: float = 10.0) -> dict[str, float]:
    """Minimum seconds per call of every available peer (a peer that raises is left out)."""
    out = {}
    for name, fn in peer_functions(e, inputs).items():
        try:
            out[name] = _time(fn, min_samples, min_time, max_time)
        except Exception:  # a peer that cannot run this case is simply not a peer
            continue
    return out
