"""Kernel-reduction benchmarks (the workloads of ``shared/workloads.md``), one run, same data.

    python benchmarks/bench_kernel_reductions.py [--sizes 1000 10000 100000] [--big]
        [--no-keops] [--only gauss softmin nn gauss4 few_rows block_sparse]
        [--block-sparse N]

Every feinsum figure is a ``feinsum.compile``d reduction (what users call) on device
arrays. For each workload: feinsum (the ``kernel_vec_cpu`` recipe, configuration picked by
a small search at N = 1e4, then used at every size), numpy tensorized and torch tensorized
(up to 1e4; beyond, the M x N matrix does not fit: "n/a (memory)"), the untransformed
reference loopy kernel (up to 1e4) and pykeops on the CPU when installed (2 threads, after
its compile, best of 3; one run at 1e5). ``--big`` adds the 1e6 Gaussian convolution
(feinsum alone). Few rows (M = 16, N = 1e6): the best 1D configuration against the 2D
scheme. Block-sparse: two clustered clouds, several cutoffs (kept tiles/pairs, speed-up
over dense, throughput, error, preparation). Times are seconds; ratios are measured in
this run only, on a machine that may be shared.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import feinsum  # noqa: E402
from feinsum.reductions.builder import kernel_reduction  # noqa: E402

DT = np.float32
SIGMA = 0.1


def best_of(fn: Any, repeat: int) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# {{{ workloads


def workloads() -> dict[str, dict[str, Any]]:
    g = {"g": 1}
    return {
        "gauss": dict(spec=kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
                                            j_vars={"y": 3, "b": 1}, params=g, dtype=DT),
                      keops=("Exp(-SqDist(x,y)*g)*b", "Sum"), e=1),
        "gauss4": dict(spec=kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
                                             j_vars={"y": 3, "b": 4}, params=g, dtype=DT),
                       keops=("Exp(-SqDist(x,y)*g)*b", "Sum"), e=4),
        "softmin": dict(spec=kernel_reduction("b - sqdist(x, y) * g", i_vars={"x": 3},
                                              j_vars={"y": 3, "b": 1}, params=g, dtype=DT,
                                              reduction="logsumexp"),
                        keops=("b-SqDist(x,y)*g", "LogSumExp"), e=1),
        "nn": dict(spec=kernel_reduction("sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3},
                                         dtype=DT, reduction="min_argmin"),
                   keops=("SqDist(x,y)", "Min_ArgMin"), e=0),
    }


def data(m: int, n: int, e: int, rng: np.random.Generator, spec: Any = None) -> dict[str, Any]:
    a: dict[str, Any] = {"x": rng.random((m, 3), dtype=DT), "y": rng.random((n, 3), dtype=DT),
                         "g": DT(1 / (2 * SIGMA**2))}
    if e == 1:
        a["b"] = rng.random(n, dtype=DT)
    elif e > 1:
        a["b"] = rng.random((n, e), dtype=DT)
    if spec is not None:
        names = {v.name for v in spec.arrays}
        a = {k: v for k, v in a.items() if k in names}
    return a


def numpy_tensorized(name: str, a: dict[str, Any]) -> dict[str, np.ndarray]:
    d2 = ((a["x"][:, None, :] - a["y"][None, :, :]) ** 2).sum(-1)
    if name in ("gauss", "gauss4"):
        return {"out0": np.exp(-d2 * a["g"]) @ a["b"]}
    if name == "softmin":
        v = a["b"][None, :] - d2 * a["g"]
        mx = v.max(1, keepdims=True)
        return {"out0": (np.log(np.exp(v - mx).sum(1)) + mx[:, 0])}
    return {"out0": d2.min(1), "out0_index": d2.argmin(1).astype(np.int32)}


def torch_tensorized(name: str, a: dict[str, Any]) -> Any:
    import torch

    torch.set_num_threads(2)
    x, y = torch.from_numpy(a["x"]), torch.from_numpy(a["y"])
    d2 = torch.cdist(x, y) ** 2
    if name in ("gauss", "gauss4"):
        b = torch.from_numpy(a["b"])
        return torch.exp(-d2 * float(a["g"])) @ b
    if name == "softmin":
        return torch.logsumexp(torch.from_numpy(a["b"])[None] - d2 * float(a["g"]), dim=1)
    return d2.min(1)


# }}}


# {{{ feinsum: compiled reductions on device arrays


class Runner:
    """Runs ``feinsum.compile``d reductions (what users call) on device arrays."""

    def __init__(self) -> None:
        from feinsum.devices.opencl import device_info, get_device, get_queue

        self.device = get_device()
        self.queue = get_queue(self.device)
        self.info = device_info(self.device)

    def compile(self, e: Any, recipe: str | None = None, params: dict[str, Any] | None = None
                ) -> Any:
        """``feinsum.compile`` with a given configuration (no database: this run decides)."""
        compile_einsum: Any = feinsum.compile
        return compile_einsum(e, device=self.device, db=False, recipe=recipe, params=params)

    def to_device(self, a: dict[str, Any]) -> dict[str, Any]:
        import pyopencl.array as cla

        return {k: cla.to_device(self.queue, v) if isinstance(v, np.ndarray) and v.ndim else v
                for k, v in a.items()}

    def run(self, f: Any, dev: dict[str, Any], repeat: int = 1, **kw: Any
            ) -> tuple[float, dict[str, Any]]:
        """Best time of *repeat* calls (after one that builds), and the outputs on the host."""
        out: Any = None

        def go() -> None:
            nonlocal out
            out = f(**dev, **kw)
            self.queue.finish()

        go()  # build / JIT
        t = best_of(go, repeat)
        if isinstance(out, tuple):
            return t, {"out0": out[0].get(), "out0_index": out[1].get()}
        return t, {"out0": out.get()}


def tune(runner: Runner, name: str, e: Any, a: dict[str, Any], reps: int
         ) -> tuple[dict[str, Any] | None, Any]:
    """A small search of kernel_vec_cpu's space at this size; returns the best config."""
    from feinsum.recipes import get_recipe

    space = get_recipe("kernel_vec_cpu").space(e, runner.info)
    best = (np.inf, None, None)
    dev = runner.to_device(a)
    for cfg in space.enumerate():
        if not cfg["denorms_are_zero"] and np.float32 == DT:
            continue
        try:
            f = runner.compile(e, "kernel_vec_cpu", cfg)
            t, _ = runner.run(f, dev, reps)
        except Exception as exc:  # a configuration that fails to build is skipped
            print(f"    {cfg}: failed ({type(exc).__name__})")
            continue
        if t < best[0]:
            best = (t, cfg, f)
    print(f"  tuned {name}: {best[1]} ({best[0]:.4f} s at the tuning size)")
    return best[1], best[2]


# }}}


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def keops_routine(name: str, formula: str, red: str, e: int) -> Any:
    from pykeops.numpy import Genred

    alias = ["x = Vi(3)", "y = Vj(3)", "g = Pm(1)"]  # g unused by the nearest neighbour
    if e:
        alias.append(f"b = Vj({e})")
    return Genred(formula, alias, reduction_op=red, axis=1)


def keops_args(name: str, a: dict[str, Any]) -> list[Any]:
    args = [a["x"], a["y"], np.array([a.get("g", 0)], DT)]
    if "b" in a:
        b = a["b"]
        args.append(b[:, None] if b.ndim == 1 else b)
    return args


def few_rows_candidates(info: Any, e: Any) -> dict[str, list[dict[str, Any]]]:
    """Every 1D configuration (denormals flushed, tiles not unrolled) and a grid of the
    2D scheme's."""
    from feinsum.recipes import get_recipe

    out: dict[str, list[dict[str, Any]]] = {}
    for recipe in ("kernel_vec_cpu", "tiled_1d"):
        out[recipe] = [c for c in get_recipe(recipe).space(e, info).enumerate()
                       if c["denorms_are_zero"] and not c.get("unroll")
                       and c.get("K", 0) <= 256]
    out["tiled_2d"] = [{"V": v, "U": u, "nsplit": ns, "tile": t, "denorms_are_zero": True}
                       for v in (8, 16) for u in (1, 2) for ns in (2, 8, 32)
                       for t in (1, 1024) if v * u <= 16]
    return out


def few_rows_bench(runner: Runner, m: int, n: int, rng: np.random.Generator,
                   reps: int = 100) -> None:
    """Few rows, many terms: the best 1D configuration against the 2D scheme.

    On a shared 2-core machine the second core is free only part of the time, and the
    2D scheme needs it: every configuration is screened (best of 3), then the 3 fastest
    of each scheme are timed again, interleaved, best of *reps* calls each."""
    print(f"\n== few rows: Gaussian convolution, M = {m}, N = {n}")
    e = workloads()["gauss"]["spec"]
    a = data(m, n, 1, rng, e)
    dev = runner.to_device(a)
    want = feinsum.evaluate(e, a)["out0"]
    finalists: dict[str, list[tuple[float, dict[str, Any], Any]]] = {}
    for recipe, cfgs in few_rows_candidates(runner.info, e).items():
        timed = []
        for cfg in cfgs:
            try:
                f = runner.compile(e, recipe, cfg)
                t, _ = runner.run(f, dev, 3)
            except Exception as exc:
                print(f"    {recipe} {cfg}: failed ({type(exc).__name__})")
                continue
            timed.append((t, cfg, f))
        finalists[recipe] = sorted(timed, key=lambda x: x[0])[:3]
    best: dict[str, tuple[float, dict[str, Any], float]] = {}
    times = {(r, k): np.inf for r, fs in finalists.items() for k in range(len(fs))}
    for _ in range(reps):
        for r, fs in finalists.items():
            for k, (_t, _cfg, f) in enumerate(fs):
                t0 = time.perf_counter()
                f(**dev)
                runner.queue.finish()
                times[r, k] = min(times[r, k], time.perf_counter() - t0)
    for r, fs in finalists.items():
        k = min(range(len(fs)), key=lambda k: times[r, k])
        _, got = runner.run(fs[k][2], dev, 1)
        best[r] = (times[r, k], fs[k][1], rel_err(got["out0"], want))
        print(f"  best {r}: {best[r][0] * 1e3:.2f} ms with {best[r][1]} "
              f"(rel.err {best[r][2]:.1e})")
    one_d = min(best["kernel_vec_cpu"][0], best["tiled_1d"][0])
    print(f"  2D scheme vs best 1D configuration: {one_d / best['tiled_2d'][0]:.2f}x faster "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


def spiral_and_blob(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    t = (0.15 + rng.random(n)) * 4 * np.pi
    x = np.stack([t * np.cos(t), t * np.sin(t), 0.3 * np.sin(3 * t)], 1) / (4 * np.pi)
    x = x + 0.01 * rng.standard_normal((n, 3))
    y = 0.25 * rng.standard_normal((n, 3))
    return x.astype(DT), y.astype(DT)


def block_sparse_bench(runner: Runner, n: int, rng: np.random.Generator) -> None:
    """Two clustered clouds, voxel clusters, pairs of clusters closer than a cutoff."""
    from dataclasses import replace

    from feinsum.reductions import ranges as R

    s = 0.05
    print(f"\n== block-sparse Gaussian convolution: spiral and blob, {n} points each, s = {s}")
    x, y = spiral_and_blob(n, rng)
    b = rng.random(n, dtype=DT)
    e = kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
                         j_vars={"y": 3, "b": 1}, params={"g": 1}, dtype=DT, block_sparse=True)
    dense_e = replace(e, block_sparse=None)
    g = DT(1 / (2 * s**2))
    t0 = time.perf_counter()
    x, lx = R.sort_clusters(x, R.grid_cluster(x, 0.05))
    (y, b), ly = R.sort_clusters((y, b), R.grid_cluster(y, 0.05))
    rx, cx, _ = R.cluster_ranges_centroids(x, lx)
    ry, cy, _ = R.cluster_ranges_centroids(y, ly)
    t_cluster = time.perf_counter() - t0
    print(f"  clusters: {len(rx)} and {len(ry)} (voxels of 0.05), clustering {t_cluster:.3f} s")
    dense_f = runner.compile(dense_e)
    dev = runner.to_device({"x": x, "y": y, "b": b, "g": g})
    t_dense, dense = runner.run(dense_f, dev, 1)
    dense_rate = n * n / t_dense
    print(f"  dense: {t_dense:.3f} s ({dense_rate / 1e9:.2f} Gpairs/s), "
          f"{dense_f.last_choice.recipe} {dict(dense_f.last_choice.params)}")
    f = runner.compile(e)
    none = np.zeros(0, np.int64)
    runner.run(f, dev, 1, ranges=R.from_pairs(rx, ry, none, none))  # builds the kernel
    for cutoff in (0.1, 0.2, 0.4, 0.8):
        t0 = time.perf_counter()
        ci, cj = R.pairs_within(cx, cy, cutoff)
        rg = R.from_pairs(rx, ry, ci, cj)
        t_host = time.perf_counter() - t0
        sizes_i = (rx[:, 1] - rx[:, 0])[ci]
        sizes_j = (ry[:, 1] - ry[:, 0])[cj]
        pairs = float(np.sum(sizes_i.astype(np.float64) * sizes_j))
        t0 = time.perf_counter()
        f(**dev, ranges=rg)  # checks the ranges, int32, launch table, upload: cached
        runner.queue.finish()
        t_first = time.perf_counter() - t0
        t_bs, got = runner.run(f, dev, 1, ranges=rg)
        t_prep = t_host + max(t_first - t_bs, 0.0)
        err = rel_err(got["out0"], dense["out0"])
        rate = pairs / t_bs
        print(f"  cutoff {cutoff}: tiles {ci.size} ({ci.size / (len(rx) * len(ry)):.2%}), "
              f"pairs {pairs / n**2:.2%}, mean tile {pairs / max(ci.size, 1):.0f} pairs, "
              f"time {t_bs:.3f} s, speed-up over dense {t_dense / t_bs:.1f}x, "
              f"throughput {rate / dense_rate:.0%} of dense, rel.err {err:.1e}, "
              f"preparation {t_prep:.3f} s ({f.last_choice.recipe} "
              f"{dict(f.last_choice.params)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 10_000, 100_000])
    ap.add_argument("--big", action="store_true", help="also 1e6 x 1e6 (feinsum alone)")
    ap.add_argument("--no-keops", action="store_true")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--block-sparse", type=int, default=100_000, metavar="N",
                    help="points per cloud of the block-sparse benchmark (0: skip)")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    rng = np.random.default_rng(0)
    runner = Runner()
    print(f"device: {runner.info.name}")
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
        print("torch: not installed, its column is skipped")
    have_keops = False
    if not args.no_keops:
        try:
            import pykeops  # noqa: F401
            have_keops = True
        except ImportError:
            print("pykeops: not installed, its column is skipped")
    rows = []
    for name, w in workloads().items():
        if args.only and name not in args.only:
            continue
        e = w["spec"]
        print(f"\n== {name}: {e}")
        tune_n = 10_000
        _, ex = tune(runner, name, e, data(tune_n, tune_n, w["e"], rng, e), 2)
        ref_ex = runner.compile(e, "untransformed")
        keops = keops_routine(name, w["keops"][0], w["keops"][1], w["e"]) if have_keops else None
        sizes = list(args.sizes) if name == "gauss" else [s for s in args.sizes if s >= 1e5] or [
            max(args.sizes)]
        if name == "gauss" and args.big:
            sizes.append(1_000_000)
        for n in sizes:
            a = data(n, n, w["e"], rng, e)
            dev = runner.to_device(a)
            reps = 3 if n <= 10_000 else 1
            t_fe, got = runner.run(ex, dev, reps)
            line = {"workload": name, "M=N": n, "feinsum": t_fe}
            # accuracy: against evaluate on the first rows
            sub = dict(a, x=a["x"][:64])
            want = feinsum.evaluate(e, sub)
            line["rel.err"] = rel_err(got["out0"][:64], want["out0"])
            if "out0_index" in want:
                line["index ok"] = float(np.mean(got["out0_index"][:64] == want["out0_index"]))
            if n <= 10_000:
                line["numpy"] = best_of(lambda a=a, w=name: numpy_tensorized(w, a), reps)
                line["torch"] = (best_of(lambda a=a, w=name: torch_tensorized(w, a), reps)
                                 if have_torch else "not installed")
                line["loopy ref"] = runner.run(ref_ex, dev, 1)[0]
            else:
                line["numpy"] = line["torch"] = "n/a (memory)"
                line["loopy ref"] = "n/a (time)"
            if keops is not None and n <= 100_000:
                kargs = keops_args(name, a)
                keops(*kargs, backend="CPU")  # compile
                line["pykeops cpu"] = best_of(lambda k=keops, a=kargs: k(*a, backend="CPU"),
                                              3 if n <= 10_000 else 1)
            rows.append(line)
            print("  " + ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in line.items()))
            for peer in ("numpy", "torch", "loopy ref", "pykeops cpu"):
                if isinstance(line.get(peer), float):
                    print(f"    feinsum vs {peer}: {line[peer] / t_fe:.1f}x faster")
    print("\nconfigurations are the best of kernel_vec_cpu's space at N = 1e4 in this run")
    if not args.only or "few_rows" in args.only:
        few_rows_bench(runner, 16, 1_000_000, rng)
    if args.block_sparse and (not args.only or "block_sparse" in args.only):
        block_sparse_bench(runner, args.block_sparse, rng)


if __name__ == "__main__":
    main()
