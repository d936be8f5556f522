"""The performance model against every record of GPU runs: predicted vs measured.

    python benchmarks/calibrate_model.py [--db PATH ...] [--model h200] [--rst FILE]
                                         [--json FILE] [--subset N] [--also ID ...]

Every ``ok`` record of the GPU runs ``--db`` (feinsum databases, named by their folder, or
JSON-lines exports, named by their file; default: the H200 runs of 2026-11-26 and
2026-11-27 kept in ``benchmarks/data/gpu-runs/``) has its code generated again, exactly
as it ran: its recipe with its ``params_json``, the canonical spec of ``einsums.spec_json``,
the ``DeviceInfo`` of ``devices.info_json``, at its lengths (the fingerprint of that code is
compared with the record's). The model of ``--model`` predicts it; the script prints each
record's predicted and measured time, their ratio and the bounding resource, then the
ratio spread over all runs and, per run, the spread and per workload Spearman's rank
correlation and the share of pairs in order. A workload a run measured at several lengths
(the DG workloads at E = 5e4 and 1e6) is one workload per lengths (``gradient
[n0=1000000]``): the order across sizes is not what the ranking needs.

The script runs with the hash seed the timing workers generate code with
(``PYTHONHASHSEED=0``, :data:`feinsum.timing.hashseed.CODE_HASH_SEED`; it starts itself
again with it if needed): loopy's code for some kernels depends on the seed, and the code
predicted must be the code that was timed.

``--rst FILE`` writes the table docs/performance-model.rst includes; ``--json FILE`` writes
``--subset`` records per run and workload (the fastest, the slowest and evenly between, by
measured time) and the records ``--also`` names (ids of the first run given) for
``tests/test_prediction_h200.py``, of the records whose code is still the code measured (a
record a later fix changed, as the ttm ``gemm_gpu`` record of 2026-11-27 whose double
buffer read past ``K``, is retired in ``db/`` and left out). Nothing is fitted here: the
model's constants are :mod:`feinsum.prediction.hardware`'s.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: every GPU run's records, exported (``feinsum db export``) as the run left them
DEFAULT_DBS = sorted((ROOT / "benchmarks" / "data" / "gpu-runs").glob("*.jsonl.gz"))

_QUERY = """
select m.id, e.canonical_key, e.canonical_text, e.spec_json, r.name, c.params_json,
       m.lengths_key, m.min_time, m.code_fingerprint, d.info_json, m.uid
from measurements m join einsums e on e.id = m.einsum_id join recipes r on r.id = m.recipe_id
     join configurations c on c.id = m.configuration_id join devices d on d.id = m.device_id
where m.status = 'ok' and m.min_time is not null order by e.id, m.min_time
"""


def _workload_names() -> dict[str, str]:
    from feinsum.spec.canonical import canonical_key
    from feinsum.tuning.workloads import workloads

    return {canonical_key(w.spec): name for gpu in (False, True)
            for name, w in workloads(gpu=gpu).items()}


def _run_name(db: Path) -> str:
    """A database is named by its folder, an export by its file (less its suffixes)."""
    return db.resolve().parent.name if _is_database(db) else db.name.split(".")[0]


def _is_database(db: Path) -> bool:
    with db.open("rb") as f:
        return f.read(16) == b"SQLite format 3\0"


def _query(db: Path) -> list[Any]:
    """The ok records of a database, or of an export imported into a temporary one (with
    the ids the run's database gave them, from ``RUN.ids.json`` beside the export where it
    is there: docs and tests name records by them; else the order of the export's lines)."""
    if _is_database(db):
        return list(sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute(_QUERY))
    from feinsum.database.api import Database

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "run.sqlite")
        with Database(path, include_shipped=False) as imported:
            imported.import_file(db)
        con = sqlite3.connect(path)
        try:
            rows = list(con.execute(_QUERY))
        finally:
            con.close()
    sidecar = db.with_name(db.name.split(".")[0] + ".ids.json")
    if sidecar.is_file():
        ids = json.loads(sidecar.read_text())
        rows = [(ids[row[-1]], *row[1:]) for row in rows]
    return rows


def read_records(db: Path) -> list[Any]:
    """Every ok record of *db* as a :class:`MeasuredConfiguration` of the run *db* names;
    a workload measured at several lengths is named with them."""
    from feinsum.prediction.calibration import MeasuredConfiguration

    names = _workload_names()
    rows = _query(db)
    sizes: dict[str, set[str]] = {}
    for row in rows:
        sizes.setdefault(names.get(row[1], row[2]), set()).add(row[6])
    out = []
    for (mid, key, text, spec_json, recipe, params, lengths, seconds, fp,
         info, _uid) in rows:
        name = names.get(key, text)
        if len(sizes[name]) > 1:
            name += " [" + ",".join(f"{k}={v}" for k, v in json.loads(lengths).items()) + "]"
        out.append(MeasuredConfiguration(
            id=mid, workload=name, recipe=recipe,
            params=json.loads(params), spec_json=spec_json, device=json.loads(info),
            lengths=json.loads(lengths), seconds=seconds, code_fingerprint=fp,
            run=_run_name(db)))
    return out


def subset(records: list[Any], per_workload: int) -> list[Any]:
    """Per run and workload, *per_workload* records evenly spread by measured time."""
    by: dict[tuple[str, str], list[Any]] = {}
    for r in records:
        by.setdefault((r.run, r.workload), []).append(r)
    out = []
    for rs in by.values():
        rs = sorted(rs, key=lambda r: r.seconds)
        n = min(per_workload, len(rs))
        picks = sorted({round(i * (len(rs) - 1) / max(1, n - 1)) for i in range(n)})
        out.extend(rs[i] for i in picks)
    return out


def _summary_lines(label: str, s: Any, model: str) -> list[str]:
    logs = sorted(math.log(x) for x in s.ratios)
    pairs = [v for v in s.pairs.values() if not math.isnan(v)]
    return [f"{label} (model ``{model}``): {s.count} records, {s.within_2x:.0%} within "
            f"0.5-2x, geometric mean error {s.geometric_error:.2f}x, median ratio "
            f"{math.exp(logs[len(logs) // 2]):.2f} (min {min(s.ratios):.2f}, max "
            f"{max(s.ratios):.2f}); pairs in order, mean over workloads: "
            f"{sum(pairs) / max(1, len(pairs)):.0%}."]


def _rst(rows: list[tuple[Any, Any, bool]], runs: dict[str, Any], total: Any,
         model: str) -> str:
    head = ("run", "id", "workload", "recipe", "measured ms", "predicted ms", "ratio",
            "bound", "code")
    body = [(r.run.removeprefix("h200-"), str(r.id), r.workload, r.recipe,
             f"{r.seconds * 1e3:.4g}", f"{p.seconds * 1e3:.4g}",
             f"{p.seconds / r.seconds:.2f}", p.limit, "as measured" if same else "differs")
            for r, p, same in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    rule = "  ".join("=" * w for w in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
             rule]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)).rstrip()
              for b in body]
    lines.append(rule)
    if len(runs) > 1:
        lines += ["", *_summary_lines("All runs", total, model)]
    for run, s in runs.items():
        lines += ["", *_summary_lines(f"Run {run}", s, model), "",
                  "Per workload, Spearman's rank correlation and the pairs in order "
                  "(measured times more than 5% apart):", ""]
        lines += [f"* {w}: {s.spearman[w]:.2f}, {s.pairs[w]:.0%} of pairs"
                  for w in sorted(s.spearman)]
    return "\n".join(lines) + "\n"


def main() -> None:
    import os

    from feinsum.timing.hashseed import CODE_HASH_SEED

    if os.environ.get("PYTHONHASHSEED") != CODE_HASH_SEED:
        env = {**os.environ, "PYTHONHASHSEED": CODE_HASH_SEED}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, nargs="+", help="feinsum databases or exports, one "
                    "per run (default: benchmarks/data/gpu-runs/*.jsonl.gz)")
    ap.add_argument("--model", default="h200", help="the device model that predicts")
    ap.add_argument("--rst", type=Path, help="write the table (reStructuredText) here")
    ap.add_argument("--json", type=Path, help="write a subset of the records that still "
                    "generate the code measured here")
    ap.add_argument("--subset", type=int, default=3,
                    help="records per run and workload for --json")
    ap.add_argument("--also", nargs="*", type=int, default=[],
                    help="record ids (of the first run) --json writes besides the subset")
    ap.add_argument("--only", nargs="*", type=int, help="record ids")
    args = ap.parse_args()
    dbs = args.db or [d for d in DEFAULT_DBS if d.is_file()]
    missing = [d for d in dbs if not d.is_file()]
    if missing or not dbs:
        sys.exit(f"no database {missing or DEFAULT_DBS}; pass --db PATH ...")
    warnings.simplefilter("ignore")
    from feinsum.prediction.calibration import summarise

    records = [r for db in dbs for r in read_records(db)
               if not args.only or r.id in args.only]
    rows = []
    print(f"{'run':<11} {'id':>4} {'workload':<11} {'recipe':<14} {'measured':>10} "
          f"{'predicted':>10} {'ratio':>6}  bound     code")
    for r in records:
        t0 = time.perf_counter()
        p, same = r.check(args.model)
        rows.append((r, p, same))
        print(f"{r.run.removeprefix('h200-'):<11} {r.id:>4} {r.workload:<11} "
              f"{r.recipe:<14} {r.seconds * 1e3:>8.4f}ms {p.seconds * 1e3:>8.4f}ms "
              f"{p.seconds / r.seconds:>6.2f}  {p.limit:<9} {'same' if same else 'DIFFERS'} "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
    total = summarise((r, p) for r, p, _ in rows)
    runs = {run: summarise((r, p) for r, p, _ in rows if r.run == run)
            for run in dict.fromkeys(r.run for r in records)}
    print()
    if len(runs) > 1:
        print(_summary_lines("All runs", total, args.model)[0].replace("``", ""))
    for run, s in runs.items():
        print(_summary_lines(f"Run {run}", s, args.model)[0].replace("``", ""))
        for w in sorted(s.spearman):
            print(f"  {w:<28} Spearman {s.spearman[w]:5.2f}, pairs in order "
                  f"{s.pairs[w]:.0%}")
    if args.rst:
        args.rst.write_text(_rst(rows, runs, total, args.model))
    if args.json:  # only records that still generate the code measured
        current = [r for r, _, same in rows if same]
        chosen = subset(current, args.subset)
        first = records[0].run if records else ""
        chosen += [r for r in current if r.run == first and r.id in args.also
                   and r not in chosen]
        args.json.write_text(json.dumps([r.as_dict() for r in chosen], indent=1) + "\n")
        print(f"{len(chosen)} records written to {args.json}")


if __name__ == "__main__":
    main()
