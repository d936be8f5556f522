"""Checking a recipe numerically: random valid configurations against :func:`feinsum.evaluate`.

Recipe tests call :func:`check_random_configurations`; the performance engineer's guide
(``docs/recipes.rst``) shows how. Each configuration is built once (the canonical spec
keeps long axes symbolic) and run at several lengths that are multiples of no tile.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import feinsum.reductions  # noqa: F401  (registers the block-sparse lowering)
from feinsum.recipes.recipe import Recipe, as_device_info
from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox.parameters import Config, canonical_json

#: Values tried for length symbols: multiples of no power of two above 1.
ODD_LENGTHS = (1, 7, 37, 45, 73, 261, 301)


@dataclass(frozen=True)
class Case:
    """One configuration checked: the canonical spec, the configuration, the lengths."""

    spec: BatchedEinsum
    params: Config
    lengths: tuple[dict[str, int], ...]
    error: str | None = None

    def __str__(self) -> str:
        what = "ok" if self.error is None else self.error
        return f"{self.spec} {canonical_json(self.params)} at {list(self.lengths)}: {what}"


def run_kernel(t_unit: Any, e: BatchedEinsum, lengths: Mapping[str, int], queue: Any,
               seed: int = 0, extra_args: Mapping[str, Any] | None = None
               ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run *t_unit* (a kernel for canonical *e*) on random inputs at *lengths*; return its
    outputs and :func:`feinsum.evaluate`'s, by output name."""
    from feinsum.lowering.validation import random_inputs, reference_outputs

    inputs = random_inputs(e, lengths, seed)
    args = {**inputs, **{k: np.int32(v) for k, v in lengths.items()}, **(extra_args or {})}
    _, result = t_unit.executor(queue.context)(queue, **args)
    names = [a.name for a in t_unit.default_entrypoint.args if a.is_output]
    if isinstance(result, Mapping):
        got = {k: np.asarray(v.get() if hasattr(v, "get") else v) for k, v in result.items()}
    else:
        got = {n: np.asarray(v.get() if hasattr(v, "get") else v)
               for n, v in zip(names, result, strict=True)}
    return got, reference_outputs(e, lengths, inputs)


def check_configuration(recipe: Recipe, e: BatchedEinsum, params: Mapping[str, Any],
                        lengths: Sequence[Mapping[str, int]], queue: Any, seed: int = 0,
                        device: Any = None, t_unit: Any = None) -> str | None:
    """Apply *recipe* with *params* to canonical *e*, build once, run at every entry of
    *lengths*; ``None`` if every output matches :func:`feinsum.evaluate`, else what is
    wrong (a recipe failure, a build error or the mismatch). *device* (default: the
    queue's) is the device the configuration is for, e.g. a GPU's model
    (:mod:`feinsum.devices.models`) whose code runs on the queue's CPU; *t_unit*, if given,
    is the code already generated."""
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.lowering.validation import compare, reduction_length, tolerance

    if t_unit is None:
        try:
            t_unit = recipe.apply(generate_loopy(e), params, e,
                                  as_device_info(queue.device if device is None else device))
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
    for k, n in enumerate(lengths):
        try:
            extra = recipe.prepare(e.with_lengths(dict(n)), {}, params)
            got, ref = run_kernel(t_unit, e, n, queue, seed + k, extra)
        except Exception as exc:
            return f"at {dict(n)}: {type(exc).__name__}: {str(exc)[:2000]}"
        dtype = e.value_dtype(0)
        rtol = tolerance(dtype, reduction_length(e, n))
        if dtype.kind == "f" and dtype.itemsize == 4:
            rtol = max(rtol, 1e-4)
        _, problem = compare(got, ref, rtol)
        if problem:
            return f"at {dict(n)}: {problem}"
    return None


def sample_lengths(e: BatchedEinsum, rng: np.random.Generator, count: int = 2
                   ) -> tuple[dict[str, int], ...]:
    """*count* random assignments of :data:`ODD_LENGTHS` to the length symbols of *e*."""
    syms = e.length_symbols
    return tuple({s: int(rng.choice(ODD_LENGTHS[1:] if k else ODD_LENGTHS)) for s in syms}
                 for k in range(count))


def check_random_configurations(
    recipe: Recipe, specs: Sequence[BatchedEinsum], queue: Any, n: int = 20, seed: int = 0,
    lengths_per_build: int = 2, include_default: bool = True, device: Any = None,
) -> list[Case]:
    """Check *n* random valid configurations (seeded), spread round-robin over *specs*
    (canonicalised here; give long axes as symbols so one build serves several lengths),
    each run at *lengths_per_build* random odd lengths. *device* (default: the queue's)
    is the device the configurations are for, e.g. a GPU's model whose code runs on the
    queue's CPU. Returns every case; the failing ones have an :attr:`Case.error`."""
    from feinsum.spec.canonical import canonicalize

    rng = np.random.default_rng(seed)
    device = as_device_info(queue.device if device is None else device)
    canon = [canonicalize(s) for s in specs]
    picks: dict[int, list[Config]] = {k: [] for k in range(len(canon))}
    for k in itertools.islice(itertools.cycle(range(len(canon))), n):
        picks[k].append({})
    cases = []
    for k, e in enumerate(canon):
        space = recipe.space(e, device)
        want = len(picks[k])
        configs = space.sample(rng, n=want) if want else []
        if include_default and configs:
            configs[0] = recipe.default(e, device)
        for params in configs:
            lengths = sample_lengths(e, rng, lengths_per_build)
            err = check_configuration(recipe, e, params, lengths, queue, seed, device=device)
            cases.append(Case(e, dict(params), lengths, err))
    return cases


def assert_all_ok(cases: Sequence[Case]) -> None:
    """Fail (``AssertionError``, for test suites) listing every case that went wrong."""
    bad = [str(c) for c in cases if c.error]
    if bad:
        raise AssertionError("\n".join(bad))
