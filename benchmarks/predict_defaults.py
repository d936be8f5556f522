"""What the performance model predicts for each GPU recipe's default on each reference workload.

    python benchmarks/predict_defaults.py [--model h200 h100 ...] [--family dg ...]
                                          [--workload NAME ...] [--recipe NAME ...]
                                          [--rst FILE] [--sample N [--seed S]]
                                          [--dg-degree P]

For every reference workload (:func:`feinsum.tuning.workloads.workloads`, at its
``workloads.md`` GPU lengths: the few-rows workload's 64 rows), every device model given
and every recipe that applies to the workload on that model, the recipe's default
configuration for the model is generated and predicted
(:func:`feinsum.prediction.predict_configuration`): time, fraction of the roofline, the
bounding resource, and the best fraction of the roofline the model allows any one-kernel
schedule (:func:`feinsum.prediction.floor_seconds`: one launch, the roofline's flops and
bytes in sequence as far as the hardware keeps them). The recipe the hook picks when the
database is empty (the first of :func:`feinsum.hook.default_choices` at these lengths:
:func:`feinsum.hook.preference`'s order, ``dg_nodes`` and ``gemm_gpu`` by the model) is
marked ``*``; rows follow the hook's order. This is how GPU schedules are judged in a
session without a GPU; ``benchmarks/bench_gpu.py`` measures them when one is lent. Rows
are printed as they are predicted (a default takes 1-50 s).

``--dg-degree P``: the DG operators at polynomial degree ``P`` on tetrahedra (default 4,
35 nodes; 6: 84 nodes, whose operator outgrows a GPU's local memory), named ``local_pP``
and so on.

``--rst FILE`` also writes the table as reStructuredText (for the docs). ``--sample N``
checks that each default is the best schedule the model knows of: it also predicts ``N``
random valid configurations of each recipe (seeded, the same every run) and adds the
best of them, and the default's time over the best's (above 1: the model prefers a
configuration the default is not; configurations that cannot be generated or predicted
are counted, not ranked).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import feinsum
from feinsum.devices.models import MODELS
from feinsum.hook import default_choices
from feinsum.prediction import floor_seconds, predict_configuration
from feinsum.tuning.workloads import DG_DEGREE, FAMILIES, workloads

HEADER = ("workload", "model", "recipe", "predicted", "roofline", "bound by", "model's best")
SAMPLED = ("best sampled", "default / best", "best configuration", "not predicted")


def _best_sampled(r: Any, spec: Any, info: Any, model: str, lengths: Any, n: int,
                  seed: int) -> tuple[float | None, dict[str, Any] | None, int]:
    """The best predicted of *n* random valid configurations: seconds, configuration, and
    how many could not be generated or predicted."""
    space = r.space(spec, info)
    best: tuple[float | None, dict[str, Any] | None] = (None, None)
    failed = 0
    configs = space.sample(seed, n=n)
    for config in configs:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p = predict_configuration(r, spec, dict(config), model, lengths)
        except feinsum.FeinsumError:
            failed += 1
            continue
        if best[0] is None or p.seconds < best[0]:
            best = (p.seconds, dict(config))
    return best[0], best[1], failed


def _rows(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    for w in workloads(families=tuple(args.family), gpu=True,
                       dg_degree=args.dg_degree).values():
        if args.workload and w.name not in args.workload:
            continue
        spec = feinsum.canonicalize(w.spec)
        lengths = feinsum.canonical_lengths(w.spec.with_lengths(w.lengths))
        for model in args.model:
            info = MODELS[model].info
            choices, _ = default_choices(spec, info, feinsum.recipes(), lengths=lengths)
            for k, choice in enumerate(choices):
                r = choice.recipe
                if args.recipe and r.name not in args.recipe:
                    continue
                p = predict_configuration(r, spec, choice.params, model, lengths)
                mark = "*" if k == 0 else ""
                best = p.roofline_seconds / floor_seconds(spec, lengths, model)
                row: tuple[str, ...] = (w.name, model, r.name + mark,
                                        f"{p.seconds * 1e3:.4g} ms", f"{p.fraction:.0%}",
                                        p.limit, f"{best:.0%}")
                if args.sample:
                    t, config, failed = _best_sampled(r, spec, info, model, lengths,
                                                      args.sample, args.seed)
                    row += ((f"{t * 1e3:.4g} ms", f"{p.seconds / t:.2f}",
                             json.dumps(config, sort_keys=True), str(failed))
                            if t is not None else ("-", "-", "-", str(failed)))
                yield row


def _rst(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(len(header))]
    rule = "  ".join("=" * n for n in widths)

    def line(r: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(n) for c, n in zip(r, widths, strict=True)).rstrip()

    return "\n".join([rule, line(header), rule, *map(line, rows), rule, ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", nargs="+", default=["h200"], choices=sorted(MODELS))
    ap.add_argument("--family", nargs="+", default=["dg", "contraction", "kernel", "reduction"],
                    choices=FAMILIES)
    ap.add_argument("--workload", nargs="*", help="only these workloads")
    ap.add_argument("--recipe", nargs="*", help="only these recipes")
    ap.add_argument("--rst", type=Path, help="write the table (reStructuredText) here")
    ap.add_argument("--sample", type=int, default=0, metavar="N",
                    help="also predict N random valid configurations of each recipe and "
                    "give the best")
    ap.add_argument("--seed", type=int, default=0, help="seed of --sample")
    ap.add_argument("--dg-degree", type=int, default=DG_DEGREE, metavar="P",
                    help="the DG operators' polynomial degree on tetrahedra (4: 35 nodes)")
    args = ap.parse_args(argv)
    if args.sample < 0:
        ap.error(f"--sample {args.sample}: give a number of configurations, 0 or more")
    if args.dg_degree < 1:
        ap.error(f"--dg-degree {args.dg_degree}: give a polynomial degree, 1 or more")
    header = HEADER + (SAMPLED if args.sample else ())
    rows: list[tuple[str, ...]] = []
    print("\t".join(header), flush=True)
    t0 = time.perf_counter()
    for row in _rows(args):
        rows.append(row)
        print("\t".join(row), flush=True)
    print(f"# {len(rows)} predictions in {time.perf_counter() - t0:.0f} s; * = the hook's "
          "pick with an empty database", file=sys.stderr)
    if args.rst:
        args.rst.write_text(_rst(header, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
