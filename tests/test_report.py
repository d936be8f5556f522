"""``feinsum report``: what it shows (user-facing labels, nothing above the roof), its
filters, and its HTML page opened in a real browser (headless Chromium).

The browser test keeps its screenshot of the page, ``report-page.png``, in its pytest
temporary directory: ``<basetemp>/report-browser0/report-page.png``, under xdist
``<basetemp>/popen-gw<N>/report-browser0/`` (``basetemp``: ``--basetemp DIR``, else
``/tmp/pytest-of-$USER/pytest-<run>``, of which pytest keeps the last three); it prints the
path (``pytest -rP`` shows it). It skips where no Chromium is installed, unless
``FEINSUM_REQUIRE_CHROMIUM=1`` (set by ``.ci/run``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli
from database_support import make_device

import feinsum

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_REQUIRE_ENV = "FEINSUM_REQUIRE_CHROMIUM"
TEST_DEVICE = "Report Test Device"


def _device() -> Any:
    return make_device(vendor="TestVendor", name=TEST_DEVICE, device_type="GPU",
                       compute_units=8, native_vector_width_float=1,
                       native_vector_width_double=1)


def _divergence() -> Any:
    return feinsum.einsum("xre,rij,xej->ei", feinsum.array("J", (3, 3, "E")),
                          feinsum.array("D", (3, 35, 35)), feinsum.array("u", (3, "E", 35)))


@pytest.fixture(scope="module")
def user_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The divergence tuned (as `feinsum tune` records it) on a made-up GPU: two recipes'
    records at E=50000, the untransformed kernel, two peers and a roofline; and an older
    record at E=100000."""
    from feinsum.database import NewMeasurement, einsum_origin, open_database
    from feinsum.timing.measurement import UNTRANSFORMED

    path = tmp_path_factory.mktemp("report") / "user.sqlite"
    dev, e = _device(), _divergence()
    origin = einsum_origin(e, {"E": 50000})
    old = dt.datetime(2026, 1, 5, tzinfo=dt.UTC)
    with open_database(path, include_shipped=False) as db:
        def add(recipe: str, seconds: float, lengths: int = 50000,
                measured_at: dt.datetime = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)) -> None:
            db.add_measurement(NewMeasurement(
                einsum=e.with_lengths({"E": lengths}), device=dev, recipe_name=recipe,
                recipe_version="v1", params={"s": seconds}, samples=[seconds, seconds * 1.05],
                origin=origin, measured_at=measured_at))

        add("dg_operator", 2.0e-4)
        add("generic", 3.0e-4)
        add(UNTRANSFORMED, 6.0e-3)
        add("generic", 9.0e-4, lengths=100000, measured_at=old)
        db.add_peer_timings(e.with_lengths({"E": 50000}), dev,
                            {"numpy.einsum": 9.0e-3, "torch.einsum": 5.0e-4})
        db.set_roofline(dev, {"version": 2, "device_key": dev.key, "copy_bandwidth": 8e11,
                              "triad_bandwidth": 9e11,
                              "peak_flops": {"float32": 2e13, "float64": 1e13},
                              "measured_at": "2026-11-01T00:00:00+00:00"})
    return path


@pytest.fixture
def shipped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The records committed in db/ beside the user's database."""
    monkeypatch.setenv("FEINSUM_SHIPPED", str(REPO / "db"))
    monkeypatch.setenv("FEINSUM_CACHE_DIR", str(tmp_path / "cache"))


# {{{ what the report shows


def test_shipped_records_stay_under_the_roof_with_user_labels(shipped: None,
                                                              tmp_path: Path) -> None:
    """Every table's GFLOP/s (records, `list`, `report`) at most the roofline measured in
    the same database, on the shipped records; labels in the user's words."""
    from feinsum.cli.dbread import devices, groups
    from feinsum.cli.report_data import collect
    from feinsum.database import open_database
    from feinsum.database.rates import record_work
    from feinsum.timing.roofline import Roofline

    with open_database(tmp_path / "empty.sqlite") as db:
        assert db.shipped_store is not None
        panels = collect(db)
        found = groups(db)
        checked = 0
        for dkey, info in devices(db).items():
            roof = Roofline.from_dict(db.get_roofline(info))
            for r in db.query(None, dkey):
                work = record_work(r.canonical_key, _spec(db, r.canonical_key),
                                   json.dumps(dict(r.lengths), sort_keys=True,
                                              separators=(",", ":")))
                bound = roof.attainable(work.dtype, r.flops, r.bytes) / 1e9
                assert r.gflops <= bound * (1 + 1e-9), (r, bound)
                checked += 1
            peak = max(roof.peak_flops.values()) / 1e9
            assert all(g.best_gflops <= peak for g in found if g.device_key == dkey)
    assert checked >= 100
    points = [p for panel in panels for p in panel.points]
    assert {(p.dtype) for p in points} == {"float32", "float64"}
    assert all(p.fraction is not None and p.fraction <= 1 for p in points)
    labels = {p.einsum for p in points}
    assert {"xre,rij,xej->ei", "xre,rij,xej->ei x4", "ik,kj->ij"} <= labels
    # the soft-min in the words of its first shipped origin: the H200's spec, or the CPU
    # records' kernel file
    assert labels & {"ij->i logsumexp", "workloads.py:softmin ij->i logsumexp"}
    assert not any(re.search(r"\bn\d+=", p.lengths) for p in points)  # no canonical symbols
    # the CPU records at the reference E, the H200's at E = 1e6 too
    assert {p.lengths for p in points if p.einsum.startswith("xre")} == {"E=50000",
                                                                        "E=1000000"}


def _spec(db: Any, key: str) -> str:
    from feinsum.cli.dbread import einsum_text

    found = einsum_text(db, key)
    assert found is not None
    return found[1]


def test_report_points_and_filters(user_db: Path, tmp_path: Path) -> None:
    code, out, err = run_cli("report", "--db", str(user_db), "--no-plot", "--json")
    assert code == 0, err
    d = json.loads(out)
    (panel,) = d["panels"]
    assert (panel["device"], panel["dtype"], panel["peak_gflops"]) == (TEST_DEVICE, "float64",
                                                                      1e4)
    by_lengths = {p["lengths"]: p for p in d["points"]}
    assert set(by_lengths) == {"E=50000", "E=100000"}
    p = by_lengths["E=50000"]
    assert (p["einsum"], p["recipe"]) == ("xre,rij,xej->ei", "dg_operator")
    assert p["speedup"] == pytest.approx(30.0) and p["peer"] == "torch.einsum"
    assert p["vs_peer"] == pytest.approx(2.5)
    useful = feinsum.contraction_flops(_divergence().with_lengths({"E": 50000}))
    assert p["gflops"] == pytest.approx(useful / 2e-4 / 1e9)
    assert p["latest"] and not by_lengths["E=100000"]["latest"]
    # filters
    code, out, _ = run_cli("report", "--db", str(user_db), "--no-plot", "--json",
                           "--since", "2026-06-01")
    assert [q["lengths"] for q in json.loads(out)["points"]] == ["E=50000"]
    assert json.loads(run_cli("report", "--db", str(user_db), "--no-plot", "--json",
                              "--einsum", "xre,rij")[1])["points"]
    for option, value, says in (("--einsum", "no-such-einsum", "no-such-einsum"),
                                ("--device", "no-such-device", "no-such-device"),
                                ("--since", "1h", "measured since")):
        code, _, err = run_cli("report", "--db", str(user_db), "--no-plot", option, value)
        assert code == 1 and "nothing to report" in err and says in err, err
    code, _, err = run_cli("report", "--db", str(user_db), "--since", "last tuesday")
    assert code == 1 and "--since" in err and "7d" in err
    # the terminal table
    code, out, _ = run_cli("report", "--db", str(user_db), "--no-plot")
    assert code == 0 and "xre,rij,xej->ei" in out and "30.00x" not in out and "30x" in out


def test_parse_since() -> None:
    from feinsum.cli.report_data import ReportError, parse_since

    now = dt.datetime(2026, 11, 25, 12, tzinfo=dt.UTC)
    assert parse_since("7d", now) == now - dt.timedelta(days=7)
    assert parse_since("90m", now) == now - dt.timedelta(minutes=90)
    assert parse_since("2026-11-20", now) == dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
    assert parse_since(None, now) is None
    with pytest.raises(ReportError, match="age"):
        parse_since("yesterday", now)


def test_report_figure(user_db: Path, tmp_path: Path) -> None:
    svg = tmp_path / "roofline.svg"
    code, _, err = run_cli("report", "--db", str(user_db), "-o", str(svg))
    assert code == 0, err
    text = svg.read_text()
    for needle in ("xre,rij,xej-&gt;ei", "E=50000", "ridge", "peak", "your latest records",
                   "fastest peer", "30\N{MULTIPLICATION SIGN}",
                   "2.5\N{MULTIPLICATION SIGN}"):
        assert needle in text, needle


# }}}


# {{{ the page in a browser


def chromium_or_skip() -> str:
    """The browser: ``$FEINSUM_CHROMIUM`` (set by ``.ci/run``), else one on PATH."""
    names = [os.environ.get("FEINSUM_CHROMIUM") or "", "chromium", "chromium-browser",
             "google-chrome", "google-chrome-stable"]
    for name in filter(None, names):
        found = shutil.which(name)
        if found:
            return found
    reason = ("no Chromium to open the report page with (Debian: apt-get install chromium, "
              "or bash .ci/install-chromium.sh; or set FEINSUM_CHROMIUM=/path/to/chrome)")
    if os.environ.get(CHROMIUM_REQUIRE_ENV) == "1":
        pytest.fail(f"{reason}; {CHROMIUM_REQUIRE_ENV}=1 forbids skipping")
    pytest.skip(reason)


def _headless(chromium: str, *args: str) -> subprocess.CompletedProcess[str]:
    profile = Path(args[-1].removeprefix("file://")).parent / "chromium-profile"
    return subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--hide-scrollbars", f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=120, check=False)


# Appended to a copy of the page: after it loaded, note how the figure and the table
# rendered, click the GFLOP/s header twice (sorting), and write it all into the DOM.
_PROBE = """<script>
window.addEventListener("load", function () {
  var img = document.querySelector("img.roofline");
  var table = document.querySelector("table.sortable");
  var heads = Array.prototype.map.call(table.tHead.rows[0].cells,
                                       function (c) { return c.textContent; });
  var col = heads.indexOf("GFLOP/s");
  function column() {
    return Array.prototype.map.call(table.tBodies[0].rows,
                                    function (r) { return r.cells[col].dataset.value; });
  }
  var result = {width: img.naturalWidth, height: img.naturalHeight,
                shown: img.getBoundingClientRect().width, rows: table.tBodies[0].rows.length,
                heads: heads, before: column()};
  table.tHead.rows[0].cells[col].click();
  result.ascending = column();
  table.tHead.rows[0].cells[col].click();
  result.descending = column();
  result.sort = table.tHead.rows[0].cells[col].getAttribute("aria-sort");
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
});
</script>"""


def test_report_page_in_chromium(user_db: Path, shipped: None,
                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """The page of the shipped records and a user's database, in headless Chromium: the
    figure and the table render (screenshot kept as report-page.png) and sorting works."""
    chromium = chromium_or_skip()
    where = tmp_path_factory.mktemp("report-browser")
    page = where / "report.html"
    code, _, err = run_cli("report", "--db", str(user_db), "-o", str(where / "report.png"),
                           "--html", str(page))
    assert code == 0, err
    html = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing fetched
    shot = where / "report-page.png"
    p = _headless(chromium, "--window-size=1900,3000", f"--screenshot={shot}",
                  page.as_uri())
    assert shot.is_file(), p.stderr[-2000:]
    print(f"screenshot of the report page: {shot}")
    _looks_rendered(shot)

    probe = where / "probe.html"
    probe.write_text(html.replace("</body>", _PROBE + "</body>"))
    p = _headless(chromium, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    m = re.search(r'<pre id="probe">(.*?)</pre>', p.stdout, re.S)
    assert m, (p.stdout[-2000:], p.stderr[-2000:])
    result = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert result["width"] > 1000 and result["height"] > 1500  # three panels, decoded
    assert result["shown"] > 600
    assert result["rows"] == html.count("<tr") - 1 >= 17  # 16 shipped + 2 of the user's
    values = [float(v) for v in result["ascending"]]
    assert values == sorted(values) and values != [float(v) for v in result["before"]]
    assert [float(v) for v in result["descending"]] == sorted(values, reverse=True)
    assert result["sort"] == "descending"


def _looks_rendered(png: Path) -> None:
    """A screenshot with the figure's colours in it, not a blank or an error page."""
    import matplotlib.image

    img = matplotlib.image.imread(str(png))[..., :3]
    assert img.shape[0] >= 2500 and img.shape[1] >= 1800
    spread = img.max(axis=2) - img.min(axis=2)
    colourful = (spread > 0.3).mean()  # the points and arrows (tab10 colours)
    dark = (img.max(axis=2) < 0.3).mean()  # text, axes, roofs
    assert colourful > 1e-3 and dark > 5e-3, (colourful, dark)


# }}}

# vim: foldmethod=marker
