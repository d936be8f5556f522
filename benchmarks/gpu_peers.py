"""The peers of ``bench_gpu.py``, each bounded in time.

A peer is a factory: given the workload's inputs (numpy arrays by the spec's names) it
returns a zero-argument callable that computes the result and waits for it. The peers that
import are used: numpy always (``numpy.einsum(optimize=True)`` for plain einsums,
:func:`feinsum.evaluate` for the rest), torch on CUDA (``torch.einsum``; the kernel
reductions chunked over rows: ``cdist``, ``exp``, a matrix product / ``logsumexp`` /
``min``), cupy (``cupy.einsum``) and pykeops on CUDA (the kernel reductions as
LazyTensors). Nothing here imports torch, cupy or pykeops unless it is installed.

:func:`measure_peer` never waits for a peer longer than its bound: it first times one call
on a subsample of the workload's long axis (``M``, ``E``, ...; time is linear in it), then
either times the full size, when the estimate fits the bound, or a subsample that fits and
scales the time (reported as *scaled*; the first subsample, 1/256 of the axis, grows
16-fold while it takes under 1% of the bound); a call that overruns its bound is interrupted
(``SIGALRM``, between the peer's Python-level steps) and reported as *timed out* (after
the bound, always positive: a peer given no time at all is reported *not timed*).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Long axes, in the order a subsample is taken along (cost is linear in each).
LONG_AXES = ("M", "E", "I", "N", "L")
#: Bytes of one (rows x N) distance block of the chunked torch peers.
CHUNK_BYTES = 1 << 30

Factory = Callable[[dict[str, Any]], Callable[[], Any]]


class PeerTimeout(Exception):
    """A peer ran past its time bound."""


@contextlib.contextmanager
def time_bound(seconds: float) -> Iterator[None]:
    """Raise :class:`PeerTimeout` in the block after *seconds* (main thread: SIGALRM)."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        if seconds <= 0:
            raise PeerTimeout("no time left")
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise PeerTimeout(f"ran past {seconds:.3g} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass(frozen=True)
class PeerResult:
    """One peer's time: ``how`` is ``measured``, ``scaled from AXIS=n`` (the time at the
    subsample times the full length over it), ``timed out after S s`` (S > 0), ``not timed:
    no time left`` (a bound of zero or less) or ``failed: ...``."""

    name: str
    seconds: float | None
    how: str

    @property
    def scaled(self) -> bool:
        return self.how.startswith("scaled")

    def to_json(self) -> dict[str, Any]:
        return {"peer": self.name, "ms": None if self.seconds is None else self.seconds * 1e3,
                "how": self.how}


def _best_time(fn: Callable[[], Any], budget: float) -> float:
    """The fastest of at least two calls after a warm-up (feinsum's peer protocol), the
    sampling stopped at half of *budget* and the whole interrupted at *budget*."""
    from feinsum.tuning.peers import _time

    with time_bound(budget):
        return _time(fn, 3, 0.05, budget / 2)


def measure_peer(name: str, make: Factory, spec: Any, lengths: dict[str, int],
                 limit: float) -> PeerResult:
    """Time peer *make* on *spec* at *lengths* within *limit* seconds (see the module)."""
    from feinsum.lowering.validation import random_inputs

    if not limit > 0:  # nothing to time within: said so, never "timed out after -2 s"
        return PeerResult(name, None, "not timed: no time left")
    t_end = time.perf_counter() + limit

    def left() -> float:
        return t_end - time.perf_counter()

    axis = next((a for a in LONG_AXES if lengths.get(a, 0) >= 64), None)
    try:
        if axis is None:
            return PeerResult(name, _best_time(make(random_inputs(spec, lengths, 0)), left()),
                              "measured")
        full = lengths[axis]
        n0 = max(1, full // 256)
        while True:  # a subsample long enough for fixed costs not to dominate
            fn = make(random_inputs(spec, {**lengths, axis: n0}, 0))
            with time_bound(left()):
                fn()  # warm-up (compilation, allocation)
                t0 = time.perf_counter()
                fn()
                t0 = time.perf_counter() - t0
            if n0 >= full or t0 >= limit / 100:
                break
            n0 = min(full, 16 * n0)
        estimate = t0 * full / n0  # the warm-up and 3 samples must fit, with a margin
        if 6 * estimate <= left():
            return PeerResult(name, _best_time(make(random_inputs(spec, lengths, 0)), left()),
                              "measured")
        n1 = int(min(full, max(n0, full * left() / (6 * estimate))))
        fn = make(random_inputs(spec, {**lengths, axis: n1}, 0))
        return PeerResult(name, _best_time(fn, left()) * full / n1, f"scaled from {axis}={n1}")
    except PeerTimeout:
        return PeerResult(name, None, f"timed out after {limit:.3g} s")
    except Exception as exc:  # a peer that cannot run the case is reported, not fatal
        return PeerResult(name, None, f"failed: {type(exc).__name__}: {str(exc)[:120]}")


# {{{ the peers


def _subscripts(e: Any) -> str:
    letters = {i: chr(ord("a") + k) for k, i in enumerate(e.indices)}
    return (",".join("".join(letters[i] for i in idx) for idx in e.in_indices) + "->"
            + "".join(letters[i] for i in e.out_indices))


def _torch_cuda() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _torch_kernel(name: str, torch: Any, t: dict[str, Any]) -> Any:
    """The kernel reduction *name* in torch, chunked over rows (no M x N block)."""
    x, y = t["x"], t["y"]
    g = float(t["g"]) if "g" in t else 1.0
    rows = max(1, min(x.shape[0], CHUNK_BYTES // (4 * max(1, y.shape[0]))))
    outs = []
    for s in range(0, x.shape[0], rows):
        d2 = torch.cdist(x[s:s + rows], y).square_()
        if name == "softmin":
            outs.append(torch.logsumexp(t["b"][None, :] - g * d2, dim=1))
        elif name == "nearest":
            outs.append(d2.min(dim=1))
        else:  # gaussian, gaussian4, fewrows
            outs.append(torch.exp(d2.mul_(-g)) @ t["b"])
    torch.cuda.synchronize()
    return outs


def _keops(name: str, t: dict[str, Any]) -> Any:
    from pykeops.torch import LazyTensor

    g = float(t["g"]) if "g" in t else 1.0
    x, y = LazyTensor(t["x"][:, None, :]), LazyTensor(t["y"][None, :, :])
    d2 = ((x - y) ** 2).sum(-1)
    if name == "nearest":
        return d2.min_argmin(1)
    b = LazyTensor(t["b"].reshape(t["b"].shape[0], -1)[None, :, :])
    if name == "softmin":
        return (b - g * d2).logsumexp(1)
    return ((-g * d2).exp() * b).sum(1)


#: The kernel reductions the torch and pykeops peers know, by workload name.
KERNELS = ("gaussian", "gaussian4", "softmin", "nearest", "fewrows")


def peers(name: str, e: Any, *, gpu_only: bool = False) -> dict[str, Factory]:
    """The peers that import for workload *name* (spec *e*), as factories of callables.
    *gpu_only*: leave numpy out."""
    from feinsum.tuning.peers import _plain_rows

    rows = _plain_rows(e)
    subs = _subscripts(e)
    out: dict[str, Factory] = {}
    if not gpu_only:
        if rows is not None:
            out["numpy.einsum"] = lambda a: (lambda: [
                np.einsum(subs, *(a[n] for n in r), optimize=True) for r in rows])
        else:
            from feinsum.lowering.reference import evaluate

            out["numpy (feinsum.evaluate)"] = lambda a: (lambda: evaluate(e, dict(a)))
    torch = _torch_cuda()
    if torch is not None:
        def on_cuda(a: dict[str, Any]) -> dict[str, Any]:
            return {k: torch.as_tensor(np.asarray(v), device="cuda") for k, v in a.items()}

        if rows is not None:
            def einsum(a: dict[str, Any]) -> Callable[[], Any]:
                t = on_cuda(a)
                return lambda: ([torch.einsum(subs, *(t[n] for n in r)) for r in rows],
                                torch.cuda.synchronize())

            out["torch.einsum (cuda)"] = einsum
        elif name in KERNELS:
            def chunked(a: dict[str, Any]) -> Callable[[], Any]:
                t = on_cuda(a)
                return lambda: _torch_kernel(name, torch, t)

            out["torch chunked (cuda)"] = chunked
        if name in KERNELS:
            try:
                import pykeops.torch  # noqa: F401

                def keops(a: dict[str, Any]) -> Callable[[], Any]:
                    t = on_cuda(a)
                    return lambda: (_keops(name, t), torch.cuda.synchronize())

                out["pykeops (cuda)"] = keops
            except Exception:  # pykeops missing or unable to find its compiler
                pass
    if rows is not None:
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() > 0:
                def cupy_einsum(a: dict[str, Any]) -> Callable[[], Any]:
                    c = {k: cupy.asarray(v) for k, v in a.items()}
                    return lambda: ([cupy.einsum(subs, *(c[n] for n in r)) for r in rows],
                                    cupy.cuda.Device().synchronize())

                out["cupy.einsum"] = cupy_einsum
        except Exception:  # cupy missing, or no CUDA device
            pass
    return out


# }}}

# vim: foldmethod=marker
