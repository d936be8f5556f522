"""Einsum benchmarks: the DG operator family and the tensor contractions of
``shared/workloads.md``, one process, one run, same data.

    python benchmarks/bench_einsum.py [--quick] [--only div grad ...] [--tune 24]
                                      [--db PATH] [--configs 12] [--no-untransformed]
                                      [--seed 0] [--block 8]

For each workload: feinsum's tuned recipe (``--tune N``, the default with N = 24:
:func:`feinsum.autotune` searches the recipe's space with N evaluations, recorded in the
timing database ``--db``, default the user's; a re-run resumes and measures nothing twice),
then the tuner's best and the heuristic default are timed here beside the peers; with
``--tune 0`` a plain sweep instead: the default, a few hand-picked CPU configurations and
``--configs`` random valid ones, each built once and timed), the untransformed reference
kernel (one call: it runs on one work-item), ``numpy.einsum(optimize=True)``, ``opt_einsum`` and
``torch.einsum`` (CPU, 2 threads) when installed. Prints seconds, GFLOP/s (the flops of
the cheapest pairwise contraction order, :func:`feinsum.contraction_flops`: for the DG
operators a quarter to two thirds of the spec's naive count), the fraction of the roofline
(at that flop count) measured in this run
(:func:`feinsum.measure_roofline`) and the ratio to the fastest peer. Kernel times are
host wall-clock for one enqueue + finish with preallocated outputs, the fastest of the
repeats, like the peers' (which allocate their outputs, as a user's call does).
``--quick``: small sizes, a smoke test. Timings on a shared machine are noisy: compare
only ratios from one run.

The ``*_blocked`` workloads hold the same values as the plain DG ones stored
element-blocked: ``u_b[b, j, l] = u[b*B + l, j]`` (``--block`` B, default 8: eight float64
in an AVX-512 register), the element axis split into ``(E/B, B)`` with ``B`` moved last.
Their peers run on the blocked arrays; the fastest peer on the plain layout (the same
work) is printed too, with feinsum's ratio to it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import feinsum as fs  # noqa: E402
from feinsum.spec.costs import contraction_flops, cost  # noqa: E402
from feinsum.timing.roofline import measure_roofline  # noqa: E402

F64, F32 = "float64", "float32"
#: Above this many flops the untransformed kernel is timed at smaller lengths.
UNTRANSFORMED_FLOPS = 3e8
#: Hand-picked starting points of the sweep on CPUs (merged into each default).
CPU_PICKS: dict[str, list[dict[str, Any]]] = {
    "dg_operator": [{"vec": 8, "work_items": 4}, {"vec": 8, "work_items": 16},
                    {"vec": 4, "work_items": 8}, {"vec": 8, "rows_per_pass": 2},
                    {"vec": 16, "work_items": 2}],
    "contraction": [{"tx": 2, "ty": 8}, {"tx": 1, "ty": 16}, {"tx": 2, "ty": 12},
                    {"tx": 4, "ty": 4}, {"tx": 2, "ty": 8, "lx": 4},
                    {"scheme": "tiled", "lx": 16, "ly": 1, "px": 1, "py": 8, "kt": 8}],
}


#: blocked workload -> the plain workload with the same values.
BLOCKED = {"local_blocked": "local", "divergence_blocked": "divergence",
           "gradient_blocked": "gradient", "face_mass_blocked": "face_mass"}


#: The recipes feinsum tunes for each family (those that apply to a workload compete).
DG, CONTRACTION = ("dg_operator", "dg_transposed"), ("contraction",)


def workloads(quick: bool, block: int = 8) -> dict[str, tuple[tuple[str, ...], Any]]:
    """name -> (recipe names, spec) for every reference workload (and the blocked DG ones)."""
    E = 2400 if quick else 50_000
    if E % block:
        raise SystemExit(f"--block {block} must divide the element count {E}")
    a = fs.array
    D, D3 = a("D", (35, 35), F64), a("D", (3, 35, 35), F64)
    J3, L, Jf = a("J", (3, 3, E), F64), a("L", (35, 4, 15), F64), a("J", (4, E), F64)
    u = [a(f"u{k}", (E, 35), F64) for k in range(4)]
    u3 = [a(f"u{k}", (3, E, 35), F64) for k in range(4)]
    v = [a(f"v{k}", (4, E, 15), F64) for k in range(4)]
    n, t, (il, jk) = (128, 16, (64, 16)) if quick else (1024, 64, (512, 64))
    out: dict[str, tuple[tuple[str, ...], Any]] = {
        "local": (DG, fs.einsum("ij,ej->ei", D, u[0])),
        "divergence": (DG, fs.einsum("xre,rij,xej->ei", J3, D3, u3[0])),
        "gradient": (DG, fs.einsum("xre,rij,ej->xei", J3, D3, u[0])),
        "face_mass": (DG, fs.einsum("ifj,fe,fej->ei", L, Jf, v[0])),
        "local_x4": (DG, fs.batched_einsum("ij,ej->ei", [[D, w] for w in u])),
        "divergence_x4": (DG, fs.batched_einsum(
            "xre,rij,xej->ei", [[J3, D3, w] for w in u3])),
        "gradient_x4": (DG, fs.batched_einsum(
            "xre,rij,ej->xei", [[J3, D3, w] for w in u])),
        "face_mass_x4": (DG, fs.batched_einsum(
            "ifj,fe,fej->ei", [[L, Jf, w] for w in v])),
        "gemm": (CONTRACTION, fs.einsum("ik,kj->ij", a("A", (n, n), F32),
                                          a("B", (n, n), F32))),
        "ttm": (CONTRACTION, fs.einsum("ijkl,mi->mjkl", a("T", (t,) * 4, F32),
                                         a("W", (t, t), F32))),
        "two_index": (CONTRACTION, fs.einsum("ijk,jkl->il", a("A", (il, jk, jk), F32),
                                               a("B", (jk, jk, il), F32))),
    }
    NB, B = E // block, block
    Jb, ub = a("J", (3, 3, NB, B), F64), a("u0", (NB, 35, B), F64)
    out |= {
        "local_blocked": (DG, fs.einsum("ij,bjl->bil", D, ub)),
        "divergence_blocked": (DG, fs.einsum(
            "xrbl,rij,xbjl->bil", Jb, D3, a("u0", (3, NB, 35, B), F64))),
        "gradient_blocked": (DG, fs.einsum("xrbl,rij,bjl->xbil", Jb, D3, ub)),
        "face_mass_blocked": (DG, fs.einsum(
            "ifj,fbl,fbjl->bil", L, a("J", (4, NB, B), F64), a("v0", (4, NB, 15, B), F64))),
    }
    return out


def canonical_inputs(spec: Any, named: dict[str, Any]) -> dict[str, Any]:
    """*named* (arrays of *spec* by their names) keyed by the canonical names."""
    from feinsum.spec.canonical import canonical_lengths, canonicalize, isomorphism

    e = canonicalize(spec).with_lengths(canonical_lengths(spec))
    return {c: named[u] for c, u in isomorphism(e, spec).arrays.items()}


def blocked_inputs(plain: Any, blocked: Any, seed: int) -> tuple[dict[str, Any],
                                                                  dict[str, Any]]:
    """Canonical inputs of *plain* and of *blocked* holding the same values: the axis of
    length E of each plain array split into (E/B, B), B moved last."""
    from feinsum.lowering.validation import random_inputs

    named = random_inputs(plain, {}, seed)
    out = {}
    for arr in blocked.arrays:
        x = named[arr.name]
        k = next((k for k, (m, n) in enumerate(zip(x.shape, arr.shape, strict=True))
                  if m != n), None)
        if k is not None:
            x = x.reshape(*x.shape[:k], arr.shape[k], -1, *x.shape[k + 1:])
            x = np.ascontiguousarray(np.moveaxis(x, k + 1, -1))
        out[arr.name] = x
    return canonical_inputs(plain, named), canonical_inputs(blocked, out)


def fastest_time(fn: Any, repeat: int = 5, budget: float = 0.2) -> float:
    """Fastest of at least *repeat* calls and *budget* seconds (at most 5 s) after a
    warm-up: the statistic of the peers (:func:`feinsum.tuning.peers.time_peers`) and of the
    autotuner, the least sensitive to other work on a shared machine."""
    fn()
    samples: list[float] = []
    t_start = time.perf_counter()
    while len(samples) < repeat or sum(samples) < budget:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if time.perf_counter() - t_start > 5 * max(budget, 1):
            break
    return min(samples)


class Runner:
    """Builds and times loopy kernels of one spec on one device, same inputs."""

    def __init__(self, e: Any, lengths: dict[str, int], inputs: dict[str, Any], queue: Any):
        import pyopencl.array as cla

        self.e, self.queue, self.lengths = e, queue, lengths
        self.args: dict[str, Any] = {k: cla.to_device(queue, v) for k, v in inputs.items()
                                     if isinstance(v, np.ndarray)}
        self.args.update({k: np.int32(v) for k, v in lengths.items()})
        shape = tuple(lengths.get(str(n), n) for n in
                      (e.lengths[i] for i in e.out_indices))
        for r in range(e.nrows):
            self.args[f"out{r}"] = cla.empty(queue, shape, e.value_dtype(r))
        from feinsum.lowering.validation import reference_outputs

        self.reference = reference_outputs(e, lengths, inputs)

    def executor(self, t_unit: Any) -> Any:
        ex = t_unit.executor(self.queue.context)
        return lambda: (ex(self.queue, **self.args), self.queue.finish())

    def check(self) -> str | None:
        from feinsum.lowering.validation import compare, reduction_length, tolerance

        got = {k: self.args[k].get() for k in self.reference}
        dt = self.e.value_dtype(0)
        rtol = max(tolerance(dt, reduction_length(self.e, self.lengths)), 1e-4 if dt.itemsize == 4
                   else 1e-10)
        return compare(got, self.reference, rtol)[1]


def sweep_configs(recipe: Any, e: Any, device: Any, n: int, seed: int
                  ) -> list[dict[str, Any]]:
    """The plain sweep: default + hand-picked CPU configurations + *n* random valid ones."""
    space, base = recipe.space(e, device), recipe.default(e, device)
    configs = [base] + [{**base, **pick} for pick in CPU_PICKS.get(recipe.name, [])
                        if device.is_cpu]
    return configs + (space.sample(np.random.default_rng(seed), n=n) if n else [])


def tuned_configs(recipes: list[Any], spec: Any, e: Any, device: Any, budget: int, db: Any,
                  seed: int) -> list[tuple[Any, dict[str, Any]]]:
    """The autotuner's best configuration of each of *recipes* for *spec* (*budget*
    evaluations shared by them, recorded in *db*), then each recipe's default."""
    result = fs.autotune(spec, db=db, recipes=recipes, budget=budget, seed=seed,
                         peers=False, baseline=False, progress=False)
    print(f"{'':14} tuned: {len(result.measurements)} new evaluations "
          f"({result.previous} recorded earlier), {result.elapsed:.0f} s")
    best = [(r, result.best_per_recipe[r.name].params) for r in recipes
            if r.name in result.best_per_recipe]
    return best + [(r, r.default(e, device)) for r in recipes]


def sweep(e: Any, run: Runner, device: Any, configs: list[tuple[Any, dict[str, Any]]]
          ) -> tuple[float, tuple[Any, dict[str, Any]] | None, int]:
    """Best time and (recipe, configuration) over *configs* (invalid ones skipped)."""
    from feinsum.lowering.kernel import generate_loopy

    best: tuple[float, tuple[Any, dict[str, Any]] | None] = (np.inf, None)
    tried, seen = 0, set()
    spaces = {r.name: r.space(e, device) for r, _ in configs}
    for recipe, cfg in configs:
        space = spaces[recipe.name]
        key = (recipe.name, space.canonical(cfg)) if space.is_valid(cfg) else None
        if key is None or key in seen:
            continue
        seen.add(key)
        try:
            fn = run.executor(recipe.apply(generate_loopy(e), cfg, e, device))
            fn()
            problem = run.check()
            if problem:
                print(f"    ! wrong result {recipe.name} {cfg}: {problem}")
                continue
            t = fastest_time(fn)
        except Exception as exc:  # a failing configuration is skipped, not fatal
            print(f"    ! {type(exc).__name__}: {str(exc)[:200]}")
            continue
        tried += 1
        if t < best[0]:
            best = (t, (recipe, cfg))
    return best[0], best[1], tried


def untransformed(e: Any, lengths: dict[str, int], flops: float, queue: Any, seed: int
                  ) -> tuple[str, float]:
    """One call of the reference kernel (one work-item: slow). Above ~3e8 flops it runs
    at smaller lengths (every length symbol scaled alike) and the time is scaled up by
    the flop ratio: ``untransformed ~``."""
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.lowering.validation import random_inputs

    small, label = dict(lengths), "untransformed"
    if flops > UNTRANSFORMED_FLOPS and lengths:
        f = (UNTRANSFORMED_FLOPS / flops) ** (1 / len(lengths))
        small = {k: max(16, int(v * f)) for k, v in lengths.items()}
        label = "untransformed ~"
    run = Runner(e, small, random_inputs(e, small, seed), queue)
    fn = run.executor(generate_loopy(e))
    t0 = time.perf_counter()
    fn()
    t = time.perf_counter() - t0
    return label, t * flops / float(cost(e, small).total_flops)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--only", nargs="*", help="workload names")
    ap.add_argument("--tune", type=int, default=None, metavar="N",
                    help="autotuner evaluations per workload (default 24; quick 0); "
                    "0: a plain sweep (--configs)")
    ap.add_argument("--db", default=None,
                    help="timing database the tuner records in (default: $FEINSUM_DB or "
                    "the user's default database)")
    ap.add_argument("--configs", type=int, default=None,
                    help="random configurations per workload of the plain sweep "
                    "(default 12; quick 2)")
    ap.add_argument("--no-untransformed", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--block", type=int, default=8, help="B of the *_blocked workloads")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")  # loopy's parameter-finder notes on every call
    nconf = args.configs if args.configs is not None else (2 if args.quick else 12)
    budget = args.tune if args.tune is not None else (0 if args.quick else 24)

    import pyopencl as cl

    from feinsum.devices.opencl import device_info, get_context, get_device
    from feinsum.lowering.validation import random_inputs
    from feinsum.recipes import get_recipe
    from feinsum.spec.canonical import canonical_lengths, canonicalize
    from feinsum.tuning.peers import time_peers

    try:
        import torch

        torch.set_num_threads(2)
    except ImportError:
        pass
    dev = get_device()
    info = device_info(dev)
    queue = cl.CommandQueue(get_context(dev))
    roof = measure_roofline(dev, db=False, quick=args.quick)
    db = fs.open_database(args.db, include_shipped=False) if budget else None
    print(f"device: {info.name}; roofline this run: {roof}")
    print("feinsum: " + (f"tuned, {budget} evaluations a workload, records in {db.where}"
                         if db is not None else f"best of a plain sweep ({nconf} random)"))
    print(f"{'workload':14} {'who':22} {'seconds':>10} {'GFLOP/s':>8} {'roof':>6} "
          f"{'BW':>6} {'vs peer':>8}")
    specs = workloads(args.quick, args.block)
    for name, (rnames, spec) in specs.items():
        if args.only and name not in args.only:
            continue
        e, lengths = canonicalize(spec), canonical_lengths(spec)
        c = cost(e, lengths)
        flops, nbytes = float(c.total_flops), float(c.bytes)
        # GFLOP/s and roofline at the cheapest contraction order's flops: what a
        # factorising kernel (or a peer's path) must do at least
        useful = float(contraction_flops(e, lengths))
        inputs = random_inputs(e, lengths, args.seed)
        plain_peers: dict[str, float] = {}
        if name in BLOCKED:
            plain = specs[BLOCKED[name]][1]
            plain_inputs, inputs = blocked_inputs(plain, spec, args.seed)
            plain_peers = time_peers(canonicalize(plain), plain_inputs, min_samples=5,
                                     min_time=0.2)
        run = Runner(e, lengths, inputs, queue)
        recipes = [r for r in map(get_recipe, rnames) if r.applies(e, info) is None]
        configs = (tuned_configs(recipes, spec, e, info, budget, db, args.seed) if db
                   is not None else [(r, c) for r in recipes
                                     for c in sweep_configs(r, e, info, nconf, args.seed)])
        t_best, chosen, tried = sweep(e, run, info, configs)
        rname, cfg = (chosen[0].name, chosen[1]) if chosen else ("/".join(rnames), None)
        peers = time_peers(e, inputs, min_samples=5, min_time=0.2)
        rows: list[tuple[str, float]] = [(f"feinsum {rname}", t_best)]
        if not args.no_untransformed:
            rows.append(untransformed(e, lengths, flops, queue, args.seed))
        rows += sorted(peers.items(), key=lambda kv: kv[1])
        fastest = min(peers.values()) if peers else None
        if plain_peers:
            who, t_plain = min(plain_peers.items(), key=lambda kv: kv[1])
            rows.append((f"{who.split('.')[0]} (plain)", t_plain))
        for who, t in rows:
            frac = roof.fraction(e.value_dtype(0), useful, nbytes, t) if np.isfinite(t) else None
            ratio = f"{fastest / t:7.2f}x" if fastest and np.isfinite(t) else "     n/a"
            bw = nbytes / t / roof.bandwidth
            print(f"{name:14} {who:22} {t:10.5f} {useful / t / 1e9:8.2f} "
                  f"{'' if frac is None else f'{frac:6.1%}':>6} {bw:6.1%} {ratio:>8}")
        print(f"{'':14} best of {tried} configurations: {cfg}")
        if plain_peers:
            print(f"{'':14} feinsum vs the fastest peer on the plain layout: "
                  f"{min(plain_peers.values()) / t_best:.2f}x")
        sys.stdout.flush()
    print(f"(peers: {', '.join(sorted(peers))}; {os.cpu_count()} cores; ratios > 1: faster "
          "than the fastest peer)")


if __name__ == "__main__":
    main()
