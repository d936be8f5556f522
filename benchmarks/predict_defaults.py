"""What the performance model predicts for each GPU recipe's default on each reference workload.

    python benchmarks/predict_defaults.py [--model h200 h100 ...] [--family dg ...]
                                          [--workload NAME ...] [--recipe NAME ...]
                                          [--rst FILE]

For every reference workload (:func:`feinsum.tuning.workloads.workloads`, at its
``workloads.md`` GPU lengths: the few-rows workload's 64 rows), every device model given
and every recipe that applies to the workload on that model, the recipe's default
configuration for the model is generated and predicted
(:func:`feinsum.prediction.predict_configuration`): time, fraction of the roofline, the
bounding resource. The recipe the hook picks when the database is empty (the first
applicable one in :data:`feinsum.hook.PREFERENCE`) is marked ``*``. This is how GPU
schedules are judged in a session without a GPU; ``benchmarks/bench_gpu.py`` measures them
when one is lent. Rows are printed as they are predicted (a default takes 1-50 s).

``--rst FILE`` also writes the table as reStructuredText (for the docs).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import feinsum
from feinsum.devices.models import MODELS
from feinsum.hook import ordered_recipes
from feinsum.prediction import predict_configuration
from feinsum.tuning.workloads import FAMILIES, workloads

HEADER = ("workload", "model", "recipe", "predicted", "roofline", "bound by")


def _rows(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    recipes = ordered_recipes(feinsum.recipes())
    for w in workloads(families=tuple(args.family), gpu=True).values():
        if args.workload and w.name not in args.workload:
            continue
        spec = feinsum.canonicalize(w.spec)
        lengths = feinsum.canonical_lengths(w.spec.with_lengths(w.lengths))
        for model in args.model:
            info, hook_pick = MODELS[model].info, None
            for r in recipes:
                if r.has_prepare or r.applies(spec, info) is not None:
                    continue
                hook_pick = hook_pick or r.name
                if args.recipe and r.name not in args.recipe:
                    continue
                p = predict_configuration(r, spec, r.default(spec, info), model, lengths)
                mark = "*" if r.name == hook_pick else ""
                yield (w.name, model, r.name + mark, f"{p.seconds * 1e3:.4g} ms",
                       f"{p.fraction:.0%}", p.limit)


def _rst(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[k]) for r in [HEADER, *rows]) for k in range(len(HEADER))]
    rule = "  ".join("=" * n for n in widths)

    def line(r: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(n) for c, n in zip(r, widths, strict=True)).rstrip()

    return "\n".join([rule, line(HEADER), rule, *map(line, rows), rule, ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", nargs="+", default=["h200"], choices=sorted(MODELS))
    ap.add_argument("--family", nargs="+", default=["dg", "contraction", "kernel", "reduction"],
                    choices=FAMILIES)
    ap.add_argument("--workload", nargs="*", help="only these workloads")
    ap.add_argument("--recipe", nargs="*", help="only these recipes")
    ap.add_argument("--rst", type=Path, help="write the table (reStructuredText) here")
    args = ap.parse_args(argv)
    rows: list[tuple[str, ...]] = []
    print("\t".join(HEADER), flush=True)
    t0 = time.perf_counter()
    for row in _rows(args):
        rows.append(row)
        print("\t".join(row), flush=True)
    print(f"# {len(rows)} predictions in {time.perf_counter() - t0:.0f} s; * = the hook's "
          "pick with an empty database", file=sys.stderr)
    if args.rst:
        args.rst.write_text(_rst(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
