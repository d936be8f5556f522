"""Search quality of the autotuner's strategies, by replaying recorded exhaustive sweeps.

Three recipe spaces of at least 200 configurations (a recipe on a reference workload,
its other parameters pinned at the recipe's default) are swept exhaustively once, on
this machine, and saved under ``benchmarks/data/sweep_<name>.json`` (every
configuration's status and timing samples). Replaying a sweep answers "what would this
strategy have found with this budget" deterministically, in seconds: the model-based
strategy (optuna TPE) must reach within 10% of the exhaustive best using at most 25% of
the evaluations (median over 5 seeds); random search is the reference.

    python benchmarks/bench_search.py                 # replay the saved sweeps
    python benchmarks/bench_search.py record          # sweep again (tens of minutes)
    python benchmarks/bench_search.py record --only local_operator-generic
    python benchmarks/bench_search.py live divergence-dg_operator   # one live model run

``record --quick`` sweeps small lengths (a smoke test; the files go to a temporary
directory unless ``--out`` is given).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).parent / "data"

#: name -> workload, recipe, the parameters searched (the others stay at the default)
SWEEPS: dict[str, dict[str, Any]] = {
    "divergence-dg_operator": {"workload": "divergence", "recipe": "dg_operator",
                               "free": ["vec", "work_items", "unroll", "fast_math"]},
    "face_mass-dg_operator": {"workload": "face_mass", "recipe": "dg_operator",
                              "free": ["last", "vec", "acc1", "fast_math"]},
    "local_operator-generic": {"workload": "local_operator", "recipe": "generic",
                               "free": ["lx", "px", "rtile", "unroll_short"]},
}
STRATEGIES = ("model", "random")


def workload(name: str, quick: bool = False) -> Any:
    """The reference workloads of ``../shared/workloads.md`` (DG family, float64)."""
    import feinsum as f

    E = 2000 if quick else 50_000
    d = np.float64
    if name == "local_operator":
        return f.einsum("ij,ej->ei", f.array("D", (35, 35), d), f.array("u", (E, 35), d))
    if name == "divergence":
        return f.einsum("xre,rij,xej->ei", f.array("J", (3, 3, E), d),
                        f.array("D", (3, 35, 35), d), f.array("u", (3, E, 35), d))
    if name == "gradient":
        return f.einsum("xre,rij,ej->xei", f.array("J", (3, 3, E), d),
                        f.array("D", (3, 35, 35), d), f.array("u", (E, 35), d))
    if name == "face_mass":
        return f.einsum("ifj,fe,fej->ei", f.array("L", (35, 4, 15), d),
                        f.array("J", (4, E), d), f.array("v", (4, E, 15), d))
    raise SystemExit(f"unknown workload {name!r}")


# {{{ record


def pinned(recipe: Any, e: Any, info: Any, free: list[str]) -> dict[str, Any]:
    """The recipe's default for the canonical *e*, less the searched parameters."""
    from feinsum.spec.canonical import canonicalize

    spec = canonicalize(e)
    default = recipe.default(spec, info)
    space = recipe.space(spec, info)
    missing = set(free) - set(space.params)
    if missing:
        raise SystemExit(f"{recipe.name} has no parameter(s) {sorted(missing)}")
    return {k: v for k, v in space.to_jsonable(default).items() if k not in free}


def record(name: str, out: Path, quick: bool, db_path: str | None) -> Path:
    import feinsum as f
    from feinsum.database import open_database
    from feinsum.devices.opencl import device_info, get_device
    from feinsum.recipes import get_recipe
    from feinsum.spec.canonical import canonicalize
    from feinsum.tuning.strategies import restrict

    sweep = SWEEPS[name]
    e = workload(sweep["workload"], quick)
    info = device_info(get_device())
    recipe = get_recipe(sweep["recipe"])
    fixed = pinned(recipe, e, info, sweep["free"])
    space = restrict(recipe.space(canonicalize(e), info), fixed)
    configs = list(space.enumerate())
    print(f"{name}: {len(configs)} configurations of {sweep['recipe']} "
          f"({', '.join(sweep['free'])} searched)", flush=True)
    db = open_database(db_path or Path(tempfile.mkdtemp()) / "sweep.sqlite",
                       include_shipped=False)
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    r = f.autotune(e, db=db, recipes=[recipe], strategy="exhaustive", budget=None,
                   fixed={recipe.name: fixed}, progress=True)
    records = db.query(e, status=None, recipe=(recipe.name, recipe.version))
    results = [{"params": dict(rec.params), "status": rec.status,
                "median": rec.median_time, "min": rec.min_time,
                "samples": list(rec.samples), "message": rec.message}
               for rec in records]
    data = {
        "name": name, "workload": sweep["workload"], "subscripts": e.subscripts,
        "lengths": r.lengths, "recipe": recipe.name, "recipe_version": recipe.version,
        "free": sweep["free"], "fixed": fixed,
        "default": space.to_jsonable(space.validate(
            {**recipe.default(canonicalize(e), info), **fixed})),
        "space": space.to_json(), "device": info.as_dict(),
        "recorded_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "elapsed_s": round(time.monotonic() - t0, 1),
        "configs_per_minute": round(r.configs_per_minute, 1),
        "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "untransformed_median": r.baseline.seconds if r.baseline else None,
        "peers": r.peers, "results": results,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"sweep_{name}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    ok = [x for x in results if x["status"] == "ok"]
    print(f"  {len(results)} measured ({len(ok)} ok) in {data['elapsed_s']:.0f} s, "
          f"{data['configs_per_minute']} configurations/minute; best "
          f"{min(x['median'] for x in ok) * 1e3:.3f} ms -> {path}", flush=True)
    return path


# }}}


# {{{ replay


class Sweep:
    """A recorded sweep: the space (only its measured configurations are valid) and the
    median time of each (None: failed)."""

    def __init__(self, data: dict[str, Any]) -> None:
        from feinsum.recipes import Constraint, ParameterSpace, canonical_json

        self.data = data
        self.name = data["name"]
        self.times: dict[str, float | None] = {
            canonical_json(r["params"]): (r["min"] if r["status"] == "ok" else None)
            for r in data["results"]}
        base = ParameterSpace.from_json(data["space"])
        self.space = base.constrain(Constraint(
            "recorded", lambda p: canonical_json(base.to_jsonable(p)) in self.times))
        self.best = min(t for t in self.times.values() if t is not None)
        self.default = data["default"]

    def __len__(self) -> int:
        return len(self.times)

    def time(self, config: dict[str, Any]) -> float | None:
        from feinsum.recipes import canonical_json

        return self.times[canonical_json(self.space.to_jsonable(config))]


def replay(sweep: Sweep, kind: str, seed: int, budget: int) -> list[float]:
    """Best-so-far time after each evaluation of *kind* with *budget* evaluations."""
    from feinsum.tuning.strategies import make_strategy

    st = make_strategy(kind, sweep.space, seed=seed, default=sweep.default)
    best, trace = math.inf, []
    for _ in range(budget):
        config = st.ask()
        if config is None:
            break
        t = sweep.time(config)
        st.tell(config, t)
        best = min(best, t if t is not None else math.inf)
        trace.append(best)
    return trace


def compare(sweeps: list[Sweep], seeds: int, fraction: float, tolerance: float) -> bool:
    print(f"\nreplay: budget {fraction:.0%} of each space, median over {seeds} seeds; "
          f"'within' = best found <= {1 + tolerance:.2f} x the exhaustive best\n")
    head = (f"{'space':28} {'configs':>7} {'budget':>6} {'strategy':>8} {'best/opt':>9} "
            f"{'within':>7} {'evals to 10%':>13}")
    print(head)
    print("-" * len(head))
    passed = True
    for sw in sweeps:
        budget = max(1, int(fraction * len(sw)))
        for kind in STRATEGIES:
            t0 = time.perf_counter()
            traces = [replay(sw, kind, s, budget) for s in range(seeds)]
            ratios = [tr[-1] / sw.best for tr in traces]
            hits = [next((k + 1 for k, b in enumerate(tr) if b <= (1 + tolerance) * sw.best),
                         None) for tr in traces]
            med_ratio = statistics.median(ratios)
            reached = [h for h in hits if h is not None]
            med_hit = (statistics.median(hits) if len(reached) == len(hits) else
                       f">{budget}" if len(reached) <= seeds // 2 else
                       statistics.median(h if h is not None else budget + 1 for h in hits))
            ok = med_ratio <= 1 + tolerance
            if kind == "model":
                passed &= ok
            print(f"{sw.name:28} {len(sw):7d} {budget:6d} {kind:>8} {med_ratio:9.3f} "
                  f"{sum(r <= 1 + tolerance for r in ratios):3d}/{seeds:<3d} {med_hit!s:>13}"
                  f"   ({time.perf_counter() - t0:.1f} s)")
    print("\nmodel-based strategy within 10% at 25% of the evaluations on every space:",
          "yes" if passed else "NO")
    return passed


# }}}


def live(name: str, fraction: float, seed: int) -> None:
    """One live model-based run on the machine, its best compared with the sweep's best
    configuration re-measured in the same run."""
    import feinsum as f
    from feinsum.database import open_database
    from feinsum.devices.opencl import device_info, get_device
    from feinsum.recipes import get_recipe
    from feinsum.spec.canonical import canonicalize
    from feinsum.timing.single import measure

    sw = Sweep(json.loads((DATA / f"sweep_{name}.json").read_text()))
    e = workload(sw.data["workload"])
    budget = max(1, int(fraction * len(sw)))
    recipe = get_recipe(sw.data["recipe"])
    params = recipe.space(canonicalize(e), device_info(get_device())).params
    fixed = {k: v for k, v in sw.data["fixed"].items() if k in params}
    if recipe.version != sw.data["recipe_version"]:
        print(f"note: {recipe.name} changed since the sweep (version {recipe.version}, "
              f"swept {sw.data['recipe_version']}); pinned parameters it lost: "
              f"{sorted(set(sw.data['fixed']) - set(fixed)) or 'none'}")
    db = open_database(Path(tempfile.mkdtemp()) / "live.sqlite", include_shipped=False)
    r = f.autotune(e, db=db, recipes=[recipe], strategy="model", budget=budget,
                   seed=seed, fixed={recipe.name: fixed}, progress=True)
    best_cfg = min((x for x in sw.data["results"] if x["status"] == "ok"),
                   key=lambda x: x["min"])["params"]
    ref = measure(e, recipe, {k: v for k, v in best_cfg.items() if k in params},
                  device=get_device())
    if r.best is None or not ref.seconds:
        raise SystemExit(f"no result to compare: live best {r.best}, sweep's best now {ref}")
    print(f"\nlive model run on {device_info(get_device()).name}: {len(r.measurements)} "
          f"evaluations ({budget} = {fraction:.0%} of {len(sw)}), best "
          f"{r.best.seconds * 1e3:.3f} ms; the sweep's best configuration re-measured now: "
          f"{ref.seconds * 1e3:.3f} ms; ratio {r.best.seconds / ref.seconds:.3f} "
          f"({r.configs_per_minute:.1f} configurations/minute)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    rec = sub.add_parser("record", help="sweep the spaces exhaustively (slow)")
    rec.add_argument("--only", action="append", choices=sorted(SWEEPS))
    rec.add_argument("--quick", action="store_true", help="small lengths (a smoke test)")
    rec.add_argument("--out", type=Path, help="where the sweep files go")
    rec.add_argument("--db", help="database for the sweep's records (default: temporary)")
    rp = sub.add_parser("replay", help="compare strategies on the saved sweeps (default)")
    lv = sub.add_parser("live", help="one live model-based run on a swept space")
    lv.add_argument("name", choices=sorted(SWEEPS))
    lv.add_argument("--seed", type=int, default=0)
    for p in (ap, rp, lv):
        p.add_argument("--fraction", type=float, default=0.25)
    for p in (ap, rp):
        p.add_argument("--seeds", type=int, default=5)
        p.add_argument("--tolerance", type=float, default=0.10)
        p.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    if args.cmd == "record":
        out = args.out or (Path(tempfile.mkdtemp()) if args.quick else DATA)
        for name in args.only or SWEEPS:
            record(name, out, args.quick, args.db)
        return 0
    if args.cmd == "live":
        live(args.name, args.fraction, args.seed)
        return 0
    files = sorted(args.data.glob("sweep_*.json"))
    if not files:
        print(f"no sweeps in {args.data}: run `{sys.argv[0]} record` first")
        return 1
    sweeps = [Sweep(json.loads(p.read_text())) for p in files]
    for sw in sweeps:
        d = sw.data
        print(f"{sw.name}: {d['subscripts']} at {d['lengths']}, {d['recipe']} "
              f"({', '.join(d['free'])}), {len(sw)} configurations on {d['device']['name']}, "
              f"recorded {d['recorded_at']} ({d['configs_per_minute']} configurations/minute, "
              f"load average {d['load_average']})")
    return 0 if compare(sweeps, args.seeds, args.fraction, args.tolerance) else 1


if __name__ == "__main__":
    sys.exit(main())

# vim: foldmethod=marker
