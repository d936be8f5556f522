"""The performance model against every record of a GPU run: predicted vs measured.

    python benchmarks/calibrate_model.py [--db PATH] [--model h200] [--rst FILE]
                                         [--json FILE] [--subset N]

Every ``ok`` record of the feinsum database ``--db`` (default: the H200 run of 2026-11-26,
``../shared/gpu/h200-2026-11-26/bench-gpu-h200.sqlite``) has its code generated again, exactly
as it ran: its recipe with its ``params_json``, the canonical spec of ``einsums.spec_json``,
the ``DeviceInfo`` of ``devices.info_json``, at its lengths (the fingerprint of that code is
compared with the record's). The model of ``--model`` predicts it; the script prints each
record's predicted and measured time, their ratio and the bounding resource, the ratio
spread, and per workload Spearman's rank correlation and the share of pairs in order.

The script runs with the hash seed the timing workers generate code with
(``PYTHONHASHSEED=0``, :data:`feinsum.timing.hashseed.CODE_HASH_SEED`; it starts itself
again with it if needed): loopy's code for some kernels depends on the seed, and the code
predicted must be the code that was timed.

``--rst FILE`` writes the table docs/performance-model.rst includes; ``--json FILE`` writes
``--subset`` records per workload (the fastest, the slowest and evenly between, by measured
time) for ``tests/test_prediction_h200.py``. Nothing is fitted here: the model's constants
are :mod:`feinsum.prediction.hardware`'s.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_RUN = Path("shared", "gpu", "h200-2026-11-26", "bench-gpu-h200.sqlite")
#: the checkout's sibling ../shared (a worktree's: ../../shared)
DEFAULT_DB = next((p / _RUN for p in (ROOT.parent, ROOT.parent.parent) if (p / _RUN).is_file()),
                  ROOT.parent / _RUN)

_QUERY = """
select m.id, e.canonical_key, e.canonical_text, e.spec_json, r.name, c.params_json,
       m.lengths_key, m.min_time, m.code_fingerprint, d.info_json
from measurements m join einsums e on e.id = m.einsum_id join recipes r on r.id = m.recipe_id
     join configurations c on c.id = m.configuration_id join devices d on d.id = m.device_id
where m.status = 'ok' and m.min_time is not null order by e.id, m.min_time
"""


def _workload_names() -> dict[str, str]:
    from feinsum.spec.canonical import canonical_key
    from feinsum.tuning.workloads import workloads

    return {canonical_key(w.spec): name for gpu in (False, True)
            for name, w in workloads(gpu=gpu).items()}


def read_records(db: Path) -> list[Any]:
    """Every ok record of *db* as a :class:`MeasuredConfiguration`."""
    from feinsum.prediction.calibration import MeasuredConfiguration

    names = _workload_names()
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = []
    for (mid, key, text, spec_json, recipe, params, lengths, seconds, fp,
         info) in con.execute(_QUERY):
        out.append(MeasuredConfiguration(
            id=mid, workload=names.get(key, text), recipe=recipe,
            params=json.loads(params), spec_json=spec_json, device=json.loads(info),
            lengths=json.loads(lengths), seconds=seconds, code_fingerprint=fp))
    return out


def subset(records: list[Any], per_workload: int) -> list[Any]:
    """Per workload, *per_workload* records evenly spread by measured time."""
    by: dict[str, list[Any]] = {}
    for r in records:
        by.setdefault(r.workload, []).append(r)
    out = []
    for rs in by.values():
        rs = sorted(rs, key=lambda r: r.seconds)
        n = min(per_workload, len(rs))
        picks = sorted({round(i * (len(rs) - 1) / max(1, n - 1)) for i in range(n)})
        out.extend(rs[i] for i in picks)
    return out


def _rst(rows: list[tuple[Any, Any, bool]], summary: Any, model: str) -> str:
    head = ("id", "workload", "recipe", "measured ms", "predicted ms", "ratio", "bound",
            "code")
    body = [(str(r.id), r.workload, r.recipe, f"{r.seconds * 1e3:.4g}",
             f"{p.seconds * 1e3:.4g}", f"{p.seconds / r.seconds:.2f}", p.limit,
             "as measured" if same else "differs")
            for r, p, same in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    rule = "  ".join("=" * w for w in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
             rule]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)).rstrip()
              for b in body]
    lines.append(rule)
    ws = sorted(summary.spearman)
    lines += ["", f"Model ``{model}``: {summary.count} records, "
              f"{summary.within_2x:.0%} within 0.5-2x, geometric mean error "
              f"{summary.geometric_error:.2f}x (ratio min {min(summary.ratios):.2f}, "
              f"max {max(summary.ratios):.2f}).", "",
              "Per workload, Spearman's rank correlation and the pairs in order (measured "
              "times more than 5% apart):", ""]
    lines += [f"* {w}: {summary.spearman[w]:.2f}, {summary.pairs[w]:.0%} of pairs"
              for w in ws]
    return "\n".join(lines) + "\n"


def main() -> None:
    import os

    from feinsum.timing.hashseed import CODE_HASH_SEED

    if os.environ.get("PYTHONHASHSEED") != CODE_HASH_SEED:
        env = {**os.environ, "PYTHONHASHSEED": CODE_HASH_SEED}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, default=DEFAULT_DB)
    ap.add_argument("--model", default="h200", help="the device model that predicts")
    ap.add_argument("--rst", type=Path, help="write the table (reStructuredText) here")
    ap.add_argument("--json", type=Path, help="write a subset of the records here")
    ap.add_argument("--subset", type=int, default=3, help="records per workload for --json")
    ap.add_argument("--only", nargs="*", type=int, help="record ids")
    args = ap.parse_args()
    if not args.db.is_file():
        sys.exit(f"no database {args.db}; pass --db PATH")
    warnings.simplefilter("ignore")
    from feinsum.prediction.calibration import summarise

    records = [r for r in read_records(args.db) if not args.only or r.id in args.only]
    rows = []
    print(f"{'id':>4} {'workload':<11} {'recipe':<14} {'measured':>10} {'predicted':>10} "
          f"{'ratio':>6}  bound     code")
    for r in records:
        t0 = time.perf_counter()
        p, same = r.check(args.model)
        rows.append((r, p, same))
        print(f"{r.id:>4} {r.workload:<11} {r.recipe:<14} {r.seconds * 1e3:>8.4f}ms "
              f"{p.seconds * 1e3:>8.4f}ms {p.seconds / r.seconds:>6.2f}  {p.limit:<9} "
              f"{'same' if same else 'DIFFERS'} ({time.perf_counter() - t0:.1f} s)",
              flush=True)
    s = summarise((r, p) for r, p, _ in rows)
    logs = sorted(math.log(x) for x in s.ratios)
    print(f"\n{s.count} records: {s.within_2x:.0%} within 0.5-2x, geometric mean error "
          f"{s.geometric_error:.2f}x, median ratio {math.exp(logs[len(logs) // 2]):.2f}")
    for w in sorted(s.spearman):
        print(f"  {w:<12} Spearman {s.spearman[w]:5.2f}, pairs in order {s.pairs[w]:.0%}")
    if args.rst:
        args.rst.write_text(_rst(rows, s, args.model))
    if args.json:
        chosen = subset(records, args.subset)
        args.json.write_text(json.dumps([r.as_dict() for r in chosen], indent=1) + "\n")
        print(f"{len(chosen)} records written to {args.json}")


if __name__ == "__main__":
    main()
