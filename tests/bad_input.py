"""The bad inputs of docs/bad-input.csv (the table docs/bad-input.rst shows) and the files
they are tried on: the tests read the table, so the docs and the tests cannot drift.

Every row runs in a directory holding

* ``records.sqlite``: a database of a made-up device "Test Device 9000": a ``generic`` and an
  untransformed record of ``ij,ej->ei`` (i=j=8) at E=1024, 300 failed records with long
  messages (so that the file has many pages), a roofline; revalidated, so that revalidation
  finds it current;
* ``records.jsonl``: its export; ``team.jsonl``: the same, the shipped records
  (``FEINSUM_SHIPPED``) every row sees; ``fresh.jsonl``: its export before revalidation
  (revalidation fingerprints two records: it changes); ``z.jsonl``: an empty file;
* ``damaged.sqlite``: ``records.sqlite`` with the pages of its measurements overwritten
  (:func:`damage`: pages in the middle of the file; its header and small tables intact);
* ``busy.sqlite``: ``records.sqlite`` with a roofline whose float32 peak is the float64 one
  (as a busy machine measures it) and whose bandwidth puts the generic record above it.
"""

from __future__ import annotations

import csv
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "bad-input.csv"
SPEC = ("ij,ej->ei", (8, 8), ("E", 8))
DEVICE = "Test Device 9000"
FILLERS = 300


@dataclass(frozen=True)
class Row:
    """One row of the table: where the input is given (CLI, PLAN, file, API), the input
    (a shell command, or a Python expression for API), the exit code (or the exception
    class for API) and the part of the message that matters."""

    line: int
    surface: str
    input: str
    result: str
    message: str

    @property
    def id(self) -> str:
        return f"{self.line:02d}-{self.surface}"


def _literal(cell: str) -> str:
    cell = cell.strip()
    return cell[2:-2] if cell.startswith("``") and cell.endswith("``") else cell


def rows() -> list[Row]:
    with open(TABLE, newline="", encoding="utf-8") as f:
        found = list(csv.reader(f))
    header, body = found[0], found[1:]
    assert [h.strip() for h in header] == ["where", "input", "result", "message"], header
    return [Row(n, *(_literal(c) for c in cells)) for n, cells in enumerate(body, 2)]


def device() -> Any:
    from database_support import make_device

    return make_device(vendor="TestVendor", name=DEVICE, compute_units=2,
                       native_vector_width_float=8, native_vector_width_double=4,
                       preferred_vector_width_float=8, preferred_vector_width_double=4)


def einsum() -> Any:
    import feinsum

    sub, a, u = SPEC
    return feinsum.einsum(sub, feinsum.array("A", a), feinsum.array("u", u))


def roofline(f32: float = 2e11, f64: float = 1e11, bandwidth: float = 2.2e10
             ) -> dict[str, Any]:
    from feinsum.timing.roofline import ROOFLINE_VERSION

    return {"version": ROOFLINE_VERSION, "device_key": device().key,
            "copy_bandwidth": bandwidth, "triad_bandwidth": bandwidth,
            "peak_flops": {"float32": f32, "float64": f64},
            "measured_at": "2026-11-20T00:00:00+00:00"}


def damage(path: Path) -> None:
    """Overwrite every page of the measurements table and its indexes of the SQLite file
    *path* (pages in the middle of the file: the small tables before them, devices,
    einsums, recipes, stay intact) with garbage; where SQLite lacks its ``dbstat`` table,
    the middle half of the file."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [n for (n,) in conn.execute(
            "SELECT pageno FROM dbstat WHERE name LIKE '%measurements%'")]
    except sqlite3.OperationalError:  # no dbstat
        total = path.stat().st_size
        size, pages = total // 2, [2]  # bytes [total/4, 3 total/4) as one "page"
    finally:
        conn.close()
    with open(path, "r+b") as f:
        for n in pages:
            f.seek((n - 1) * size)
            f.write(b"\xde\xad\xbe\xef" * (size // 4))


def make_files(directory: Path) -> Path:
    """The files every row runs beside (see the module docstring), in *directory*."""
    import feinsum
    from feinsum.database import NewMeasurement, open_database
    from feinsum.recipes import get_recipe
    from feinsum.timing.measurement import UNTRANSFORMED, untransformed_version

    directory.mkdir(parents=True, exist_ok=True)
    dev, e = device(), einsum()
    e_at = e.with_lengths({"E": 1024})
    generic = get_recipe("generic")
    params = generic.default(feinsum.canonicalize(e), dev)
    flops, nbytes = 2.0 * 8 * 8 * 1024, 8.0 * (64 + 2 * 8 * 1024)
    records = directory / "records.sqlite"
    with open_database(records, include_shipped=False) as db:
        db.add_measurements([
            NewMeasurement(einsum=e_at, device=dev, recipe_name="generic",
                           recipe_version=generic.version, params=params,
                           samples=[1e-5, 1.1e-5], flops=flops, bytes=nbytes),
            NewMeasurement(einsum=e_at, device=dev, recipe_name=UNTRANSFORMED,
                           recipe_version=untransformed_version(), params={},
                           samples=[4e-5, 4.2e-5], flops=flops, bytes=nbytes),
            *(NewMeasurement(einsum=e_at, device=dev, recipe_name="generic",
                             recipe_version=generic.version, params={**params, "lx": k},
                             status="compile-error", message=f"filler {k} " + "x" * 400)
              for k in range(FILLERS))])
        db.set_roofline(dev, roofline())
    with open_database(records, include_shipped=False) as db:
        db.export(directory / "fresh.jsonl")  # without fingerprints: revalidation adds them
    feinsum.revalidate(records, jobs=1)  # fingerprints: found current from now on
    with open_database(records, include_shipped=False) as db:
        db.export(directory / "records.jsonl")
    (directory / "z.jsonl").touch()
    shutil.copy(directory / "records.jsonl", directory / "team.jsonl")
    shutil.copy(records, directory / "damaged.sqlite")
    damage(directory / "damaged.sqlite")
    shutil.copy(records, directory / "busy.sqlite")
    with open_database(directory / "busy.sqlite", include_shipped=False) as db:
        db.set_roofline(dev, roofline(f32=1e11, f64=1e11, bandwidth=5e9))
    return directory
