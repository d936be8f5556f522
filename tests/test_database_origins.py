"""Schema revision 0005: how einsums were first recorded (labels in the user's names) and the
peers' timings; records' GFLOP/s derived from the cheapest contraction order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from database_support import make_device

import feinsum
from feinsum.database import Database, NewMeasurement, einsum_origin, open_database
from feinsum.database.origins import einsum_label, lengths_label, parse_origin

pytest_plugins = ("database_fixtures",)


def _divergence() -> Any:
    J = feinsum.array("J", (3, 3, "E"))
    D = feinsum.array("D", (3, 35, 35))
    u = feinsum.array("u", (3, "E", 35))
    return feinsum.einsum("xre,rij,xej->ei", J, D, u)


def _measure(db: Database, e: Any, seconds: float, *, origin: Any = None,
             naive_flops: bool = False) -> None:
    flops = feinsum.cost(e).total_flops if naive_flops else None
    db.add_measurement(NewMeasurement(
        einsum=e, device=make_device(), recipe_name="generic", recipe_version="v1",
        params={"s": seconds}, samples=[seconds, seconds * 1.1], flops=flops, origin=origin))


def test_origin_names_the_users_symbols_and_kernel() -> None:
    e = _divergence()
    o = einsum_origin(e, {"E": 50000})
    assert o["subscripts"] == "xre,rij,xej->ei" and o["symbols"] == {"n0": "E"}
    assert einsum_label(o, "canonical") == "xre,rij,xej->ei"
    assert lengths_label(o, {"n0": 50000}) == "E=50000"
    assert lengths_label(None, {"n0": 50000}) == "n0=50000"
    k = einsum_origin(e, {"E": 8}, kernel="div", statements=("d0", "d1"))
    assert einsum_label(k, "x") == "div:d0+d1 xre,rij,xej->ei"
    a, b = feinsum.array("A", (4096, 4096)), feinsum.array("B", (4096, 4096))
    gemm = einsum_origin(feinsum.einsum("ik,kj->ij", a, b))
    assert sorted(gemm["symbols"].values()) == ["i", "j", "k"]
    assert parse_origin("not json") is None and parse_origin(None) is None


def test_the_first_origin_is_kept(db: Database) -> None:
    from feinsum.cli.dbread import einsum_origin_of

    e = _divergence()
    first = einsum_origin(e, {"E": 1000}, kernel="div", statements=["d0"])
    _measure(db, e.with_lengths({"E": 1000}), 1e-3, origin=first)
    _measure(db, e.with_lengths({"E": 1000}), 2e-3,
             origin=einsum_origin(e, {"E": 1000}, kernel="other", statements=["x"]))
    (key,) = {r.canonical_key for r in db.query(e)}
    assert einsum_origin_of(db, key) == first
    # without an origin, a spec's own names
    a = feinsum.array("mat", (8, 8))
    plain = feinsum.einsum("pq,eq->ep", a, feinsum.array("v", (100, 8)))
    _measure(db, plain, 1e-3)
    (key,) = {r.canonical_key for r in db.query(plain)}
    assert einsum_label(einsum_origin_of(db, key), key) == "pq,eq->ep"


def test_an_einsum_recorded_before_gets_its_first_origin(tmp_path: Path) -> None:
    import sqlalchemy as sa

    from feinsum.database.models import Einsum

    path = tmp_path / "old.sqlite"
    e = _divergence().with_lengths({"E": 5000})
    with open_database(path, include_shipped=False) as db:
        _measure(db, e, 1e-3)  # the spec's own names
        with db.user_store.writing() as txn:  # as revision 0003 left it
            txn.conn.execute(sa.update(Einsum).values(origin_json=None))
    with open_database(path, include_shipped=False) as db:
        _measure(db, e, 2e-3, origin=einsum_origin(_divergence(), {"E": 5000}))
        with db.user_store.reading() as conn:
            (text,) = conn.execute(sa.select(Einsum.origin_json)).scalars()
    assert json.loads(text)["symbols"] == {"n0": "E"}


def test_records_rate_the_cheapest_contraction_order(db: Database) -> None:
    e = _divergence().with_lengths({"E": 2000})
    _measure(db, e, 1e-3, naive_flops=True)  # stored as earlier feinsums counted
    (r,) = db.query(e)
    useful = feinsum.contraction_flops(e)
    assert useful < feinsum.cost(e).total_flops
    assert r.flops == useful and r.gflops == pytest.approx(useful / 1e-3 / 1e9)
    assert r.bytes == feinsum.cost(e).bytes


def test_peer_timings_round_trip(db: Database, tmp_path: Path) -> None:
    e = _divergence().with_lengths({"E": 3000})
    _measure(db, e, 1e-3)
    dev = make_device()
    assert db.add_peer_timings(e, dev, {"numpy.einsum": 0.02, "torch.einsum": 0.01}) == 2
    peers = db.peer_timings(e, dev)
    assert [(p.peer, p.seconds) for p in peers] == [("torch.einsum", 0.01),
                                                   ("numpy.einsum", 0.02)]
    assert dict(peers[0].lengths) == {"n0": 3000} and peers[0].source == "user"
    with pytest.raises(feinsum.DatabaseError, match="positive time"):
        db.add_peer_timings(e, dev, {"numpy.einsum": -1.0})
    out = tmp_path / "with-peers.jsonl"
    db.export(out)
    kinds = [json.loads(line)["type"] for line in out.read_text().splitlines()]
    assert kinds.count("peer") == 2 and kinds[-1] == "end"
    einsum_line = next(json.loads(line) for line in out.read_text().splitlines()
                       if json.loads(line)["type"] == "einsum")
    assert einsum_line["origin"]["subscripts"] == "xre,rij,xej->ei"
    with open_database(tmp_path / "other.sqlite", include_shipped=False) as other:
        report = other.import_file(out)
        assert (report.added, report.peers) == (1, 2)
        assert other.import_file(out).peers == 0  # nothing twice
        assert [p.uid for p in other.peer_timings(e)] == [p.uid for p in peers]


def test_format_1_exports_still_import(tmp_path: Path) -> None:
    """Exports written before peers and origins (format 1) read as before."""
    src = tmp_path / "new.sqlite"
    e = _divergence().with_lengths({"E": 640})
    with open_database(src, include_shipped=False) as db:
        _measure(db, e, 1e-3)
        db.export(tmp_path / "v2.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "v2.jsonl").read_text().splitlines()]
    lines[0]["format_version"] = 1
    for line in lines:
        line.pop("origin", None)
    old = tmp_path / "v1.jsonl"
    old.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with open_database(tmp_path / "fresh.sqlite", include_shipped=False) as db:
        assert db.import_file(old).added == 1
