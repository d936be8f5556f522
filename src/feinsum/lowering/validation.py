"""Validation of a candidate's results: inputs, validation lengths, tolerances, comparison.

A candidate is checked against :func:`feinsum.evaluate` on random inputs (uniform in
[0.5, 1.5): no cancellation, safe divisors). Validation runs at *small lengths*: each long
length brought down to about 331 (not a multiple of common tile sizes, so remainder code
runs), raised until the kernel's assumptions (``lp.assume``) hold, so the one compiled
program (whose long lengths are runtime arguments) serves validation and timing. Errors
are relative to the largest reference magnitude of each output; the tolerance depends on
the dtype and the number of terms summed; integer outputs (argmin/argmax indices) must
match exactly; NaN must appear exactly where the reference has it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from feinsum.spec.model import BatchedEinsum


def random_inputs(spec: BatchedEinsum, lengths: Mapping[str, int], seed: int
                  ) -> dict[str, Any]:
    """Host arrays (0-d: numpy scalars) for every array of *spec* at *lengths*, uniform in
    [0.5, 1.5) (positive: no cancellation, safe divisors)."""
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for a in spec.with_lengths(dict(lengths)).arrays:
        shape = tuple(int(n) for n in a.shape)
        if a.dtype.kind == "c":
            v = rng.uniform(0.5, 1.5, shape) + 1j * rng.uniform(0.5, 1.5, shape)
        elif a.dtype.kind in "iu":
            v = rng.integers(1, 4, shape)
        else:
            v = rng.uniform(0.5, 1.5, shape)
        v = np.asarray(v).astype(a.dtype)
        out[a.name] = v[()] if v.ndim == 0 else np.asarray(v, order=a.order)
    return out


def small_lengths(assumptions: Any, lengths: Mapping[str, int], target: int) -> dict[str, int]:
    """Validation lengths: each long length brought down to about *target* (not a multiple
    of common tile sizes), raised until the kernel's *assumptions* (an isl set over its
    parameters, or None) hold."""
    chosen: dict[str, int] = {}
    for name, full in lengths.items():
        options = [n for n in range(min(target, full), min(full, 8 * target)) if n > 0]
        chosen[name] = full
        for n in options:
            if satisfies(assumptions, {**chosen, name: n}):
                chosen[name] = n
                break
    return chosen


def satisfies(assumptions: Any, values: Mapping[str, int]) -> bool:
    if assumptions is None:
        return True
    import islpy as isl

    s = assumptions
    for name, v in values.items():
        idx = s.get_space().find_dim_by_name(isl.dim_type.param, name)
        if idx >= 0:
            s = s.fix_val(isl.dim_type.param, idx, isl.Val.int_from_si(s.get_ctx(), int(v)))
    return not s.is_empty()


def tolerance(dtype: Any, reduction_length: int, rtol: float | None = None) -> float:
    """Relative tolerance (against the largest reference magnitude) for a result of *dtype*
    accumulated over *reduction_length* terms."""
    dt = np.dtype(dtype)
    if rtol is not None:
        return rtol
    if dt.kind in "iu":
        return 0.0
    eps = float(np.finfo(dt).eps)
    base = 1e-4 if eps > 1e-10 else 1e-10
    return max(base, eps * reduction_length)


def reduction_length(spec: BatchedEinsum, lengths: Mapping[str, int]) -> int:
    """Terms per output entry: the product of the reduction lengths."""
    e = spec.with_lengths(dict(lengths))
    return max(1, math.prod(int(e.lengths[i]) for i in e.reduction_indices))


def compare(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
            rtol: float) -> tuple[float, str | None]:
    """The largest relative error over the outputs, and what is wrong (None if within)."""
    worst = 0.0
    for name, ref in reference.items():
        if name not in outputs:
            return math.inf, f"output {name!r} missing"
        got = np.asarray(outputs[name])
        ref = np.asarray(ref)
        if got.shape != ref.shape:
            return math.inf, f"{name}: shape {got.shape}, expected {ref.shape}"
        if ref.dtype.kind in "iu":  # argmin/argmax indices: exact
            bad = int(np.count_nonzero(got != ref))
            if bad:
                return math.inf, f"{name}: {bad} of {ref.size} indices differ"
            continue
        nan_ref, nan_got = np.isnan(ref), np.isnan(got)
        if np.any(nan_ref != nan_got):
            return math.inf, f"{name}: NaN where the reference has none (or the reverse)"
        finite = ~nan_ref
        scale = float(np.max(np.abs(ref[finite]), initial=0.0)) or 1.0
        err = float(np.max(np.abs(got[finite] - ref[finite]), initial=0.0)) / scale
        worst = max(worst, err)
        if not err <= rtol:
            return err, f"{name}: relative error {err:.3g} > tolerance {rtol:.3g}"
    return worst, None


def reference_outputs(spec: BatchedEinsum, lengths: Mapping[str, int],
                      inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """:func:`feinsum.evaluate` of *spec* at *lengths*, by output name."""
    from feinsum.lowering.reference import evaluate

    result = evaluate(spec.with_lengths(dict(lengths)), dict(inputs))
    return {str(k): np.asarray(v) for k, v in result.items()}
