"""The shipped records (db/*.jsonl) carry the fingerprints of their code, are current, and a
sample of them regenerates to its fingerprint with OpenCL unavailable (revalidation and
``scripts/ship_records.sh --revalidate-only`` need no device)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from feinsum.database import FORMAT_VERSION
from feinsum.database.records import FINGERPRINT_ORIGINS
from feinsum.timing.fingerprint import is_comparable

SHIPPED = sorted((Path(__file__).parents[1] / "db").glob("*.jsonl"))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_records_are_fingerprinted_and_current(path: Path) -> None:
    from feinsum.tuning.codecheck import CurrentRecipes

    current = CurrentRecipes()
    lines = _lines(path)
    assert lines[0] == {"format": "feinsum-timings", "format_version": FORMAT_VERSION,
                        "type": "header"}
    live = [m for m in lines if m["type"] == "measurement" and m["retired_at"] is None]
    assert live
    # (a record without a fingerprint at an older version cannot be revalidated: queries
    # ignore it, as they did before fingerprints)
    stale = sorted({(m["recipe"], m["recipe_version"]) for m in live
                    if current.get(m["recipe"]) != m["recipe_version"]
                    and m["code_fingerprint"] is not None})
    assert not stale, ("shipped records of recipe versions that are not current: run "
                       f"`scripts/ship_records.sh --revalidate-only` ({stale})")
    built = [m for m in live if m["status"] in ("ok", "wrong-result", "runtime-error")]
    assert all(is_comparable(m["code_fingerprint"]) and m["fingerprint_origin"] in
               FINGERPRINT_ORIGINS and m["code_loopy_version"] for m in built)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_records_regenerate_without_a_device(path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """One record of each recipe (the one with the smallest spec and configuration)."""
    import pyopencl as cl

    from feinsum.database.revalidation import CheckItem
    from feinsum.database.store import device_from_dict
    from feinsum.tuning.codecheck import CurrentRecipes

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("revalidation opened OpenCL")

    for name in ("get_platforms", "Context", "Program", "CommandQueue"):
        monkeypatch.setattr(cl, name, refuse)
    lines = _lines(path)
    devices = {d["key"]: device_from_dict(d["info"]) for d in lines if d["type"] == "device"}
    specs = {e["canonical_key"]: json.dumps(e["spec"]) for e in lines if e["type"] == "einsum"}
    sample: dict[str, dict[str, Any]] = {}
    for m in lines:
        if m["type"] != "measurement" or m["status"] != "ok" or m["retired_at"]:
            continue
        size = (len(specs[m["einsum"]]), len(json.dumps(m["params"])), m["uid"])
        if m["recipe"] not in sample or size < sample[m["recipe"]][0]:
            sample[m["recipe"]] = (size, m)  # type: ignore[assignment]
    current = CurrentRecipes()
    items = [CheckItem(_record(m), specs[m["einsum"]], devices[m["device"]])
             for _, m in sample.values()]  # type: ignore[misc]
    regenerated = current.fingerprints(items)
    for item in items:
        r = item.record
        assert regenerated[r.uid].error is None, (r.recipe_name, regenerated[r.uid].error)
        assert regenerated[r.uid].fingerprint == r.code_fingerprint, r.recipe_name


def _record(m: dict[str, Any]) -> Any:
    import datetime as dt

    from feinsum.database import Record

    return Record(
        id=0, uid=m["uid"], source="shipped", canonical_key=m["einsum"], structure_key="",
        lengths=m["lengths"], device_key=m["device"], device_name="", device_vendor="",
        device_type="", driver_version="", platform_name="", recipe_name=m["recipe"],
        recipe_version=m["recipe_version"], params=m["params"], status=m["status"],
        samples=tuple(m["samples"]), sample_count=m["sample_count"], min_time=m["min_time"],
        median_time=m["median_time"], spread=None, flops=None, bytes=None, gflops=None,
        validation_error=None, message=None, tiles_kept_fraction=None, host=None,
        loopy_version=None, pyopencl_version=None, feinsum_version=None, started_at=None,
        measured_at=dt.datetime.now(dt.UTC), code_fingerprint=m["code_fingerprint"])
