"""The ``feinsum`` command, through its real entry point (a subprocess), errors included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

FEINSUM = [sys.executable, "-m", "feinsum.cli"]
SPEC = ["ij,ej->ei", "-s", "i=8,j=8,e=E"]
TEST_DEVICE = "Test Device 9000"


def feinsum(*args: str, db: Path | None = None, check: int | None = 0,
            timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("FEINSUM_DB", None)
    if db is not None:
        env["FEINSUM_DB"] = str(db)
    p = subprocess.run([*FEINSUM, *args], capture_output=True, text=True, env=env,
                       timeout=timeout, check=False)
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


def as_json(p: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(p.stdout)


def _device() -> Any:
    from feinsum.devices.opencl import DeviceInfo

    return DeviceInfo(
        platform_name="Test Platform", platform_version="OpenCL 3.0 test", vendor="TestVendor",
        name=TEST_DEVICE, driver_version="1.0", opencl_version="OpenCL 3.0", device_type="CPU",
        compute_units=2, max_work_group_size=4096, max_work_item_sizes=(4096, 4096, 4096),
        local_mem_size=65536, global_mem_size=2**33, max_constant_buffer_size=65536,
        preferred_vector_width_float=8, preferred_vector_width_double=4,
        native_vector_width_float=8, native_vector_width_double=4, has_fp64=True)


@pytest.fixture(scope="module")
def filled_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with a generic and an untransformed record of SPEC at E=1024, a failed
    record and a roofline, on a made-up device (no OpenCL needed to read it)."""
    import feinsum
    from feinsum.database import NewMeasurement, open_database
    from feinsum.recipes import get_recipe
    from feinsum.timing.measurement import UNTRANSFORMED, untransformed_version

    path = tmp_path_factory.mktemp("cli") / "filled.sqlite"
    dev = _device()
    e = feinsum.einsum("ij,ej->ei", feinsum.array("A", (8, 8)), feinsum.array("u", ("E", 8)))
    e_at = e.with_lengths({"E": 1024})
    generic = get_recipe("generic")
    params = generic.default(feinsum.canonicalize(e), dev)
    flops, nbytes = 2.0 * 8 * 8 * 1024, 8.0 * (64 + 2 * 8 * 1024)
    with open_database(path, include_shipped=False) as db:
        db.add_measurement(NewMeasurement(
            einsum=e_at, device=dev, recipe_name="generic", recipe_version=generic.version,
            params=params, samples=[1e-5, 1.1e-5, 1.2e-5], flops=flops, bytes=nbytes))
        db.add_measurement(NewMeasurement(
            einsum=e_at, device=dev, recipe_name=UNTRANSFORMED,
            recipe_version=untransformed_version(), params={}, samples=[4e-5, 4.2e-5],
            flops=flops, bytes=nbytes))
        db.add_measurement(NewMeasurement(
            einsum=e_at, device=dev, recipe_name="generic", recipe_version=generic.version,
            params={**params, "lx": 1}, status="compile-error", message="boom"))
        db.set_roofline(dev, {"version": 1, "device_key": dev.key, "copy_bandwidth": 2e10,
                              "triad_bandwidth": 2.2e10,
                              "peak_flops": {"float32": 2e11, "float64": 1e11},
                              "measured_at": "2026-01-01"})
    return path


# {{{ help, usage, fast start


SUBCOMMANDS = ["devices", "tune", "match", "query", "best", "show", "list", "report", "db"]


def test_help_is_fast_and_imports_nothing_heavy() -> None:
    code = textwrap.dedent("""
        import contextlib, io, sys
        from feinsum.cli import main
        codes = []
        for argv in (["--help"], *[[c, "--help"] for c in sys.argv[1:]],
                     ["db", "export", "--help"]):
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    main(argv)
                except SystemExit as exc:
                    codes.append(exc.code)
        heavy = [m for m in ("torch", "matplotlib", "loopy", "pyopencl", "sqlalchemy",
                             "islpy", "rich", "optuna") if m in sys.modules]
        print(codes, heavy)
    """)
    p = subprocess.run([sys.executable, "-c", code, *SUBCOMMANDS], capture_output=True,
                       text=True, check=True)
    assert p.stdout.strip() == f"{[0] * (len(SUBCOMMANDS) + 2)} []", p.stdout + p.stderr


def test_console_script_help() -> None:
    script = Path(sys.executable).parent / "feinsum"
    if not script.exists():
        pytest.skip("the feinsum console script is not installed next to this python")
    p = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=True)
    for c in SUBCOMMANDS:
        assert c in p.stdout


def test_usage_errors_exit_2() -> None:
    assert feinsum(check=2).returncode == 2
    p = feinsum("query", "--no-such-option", check=2)
    assert "unrecognized arguments" in p.stderr
    feinsum("db", check=2)
    feinsum("tune", "ij->i", "--strategy", "magic", check=2)


def test_version() -> None:
    assert feinsum("--version").stdout.startswith("feinsum ")


# }}}


# {{{ user errors: exit 1, one line, no traceback unless --debug


def _one_line_error(p: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert p.returncode == 1, (p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_bad_subscripts(filled_db: Path) -> None:
    _one_line_error(feinsum("query", "ij,j->q", "-s", "i=2,j=2,q=3", db=filled_db,
                            check=None), "q")
    _one_line_error(feinsum("query", "ij,jk->ik", "-s", "i=2,j=2", db=filled_db, check=None),
                    "no length for index k")


def test_unknown_device(filled_db: Path) -> None:
    _one_line_error(feinsum("best", *SPEC, "--device", "no-such-device-xyz", db=filled_db,
                            check=None), "no-such-device-xyz")
    _one_line_error(feinsum("query", *SPEC, "--device", "no-such-device-xyz",
                            db=filled_db, check=None), "no device matching")


def test_missing_database(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "none.sqlite"
    for cmd in (["list"], ["query", *SPEC], ["show", "1"], ["report", "--no-plot"],
                ["db", "info"]):
        _one_line_error(feinsum(*cmd, "--db", str(missing), check=None), "no database at")


def test_corrupt_database(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_text("this is not a database\n" * 20)
    _one_line_error(feinsum("list", "--db", str(bad), check=None), str(bad))
    p = feinsum("--debug", "list", "--db", str(bad), check=None)
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_kernel_file_that_raises(tmp_path: Path) -> None:
    f = tmp_path / "broken.py"
    f.write_text("raise RuntimeError('boom in the kernel file')\n")
    _one_line_error(feinsum("match", str(f), check=None), "RuntimeError", "boom")
    _one_line_error(feinsum("tune", "--kernel", str(f), "--no-db", check=None), "boom")
    _one_line_error(feinsum("match", str(tmp_path / "absent.py"), check=None),
                    "does not exist")


def test_unknown_record(filled_db: Path) -> None:
    _one_line_error(feinsum("show", "4711", db=filled_db, check=None), "no record")


def test_tune_needs_lengths() -> None:
    _one_line_error(feinsum("tune", *SPEC, "--no-db", check=None), "-l E=")
    _one_line_error(feinsum("tune", *SPEC, "-l", "Q=3", "--no-db", check=None), "Q")


# }}}


# {{{ the subcommands


KERNEL_FILE = '''
import numpy as np
import loopy as lp

knl = lp.make_kernel(
    "{[iel, idof, jdof, k]: 0 <= iel < nelements and 0 <= idof, jdof < 8 and 0 <= k < 8}",
    """
    out[iel, idof] = sum(jdof, mat[idof, jdof] * u[iel, jdof])  {id=apply}
    v[iel, k] = 2 * u[iel, k]  {id=scale}
    w[iel, k] = u[iel, k + 0*k] * 3 + v[iel, (k + 1) % 8]  {id=shifted, dep=scale}
    """,
    [lp.GlobalArg("mat,u,out,v,w", np.float64, shape=lp.auto),
     lp.ValueArg("nelements", np.int32)],
    name="volume", lang_version=(2018, 2))
'''


def test_match(tmp_path: Path) -> None:
    f = tmp_path / "kernel.py"
    f.write_text(KERNEL_FILE)
    d = as_json(feinsum("match", str(f), "--json"))
    (found,) = d["einsums"]
    assert found["statements"] == ["apply"] and found["kernel"] == "volume"
    assert found["canonical_key"].startswith("fek1-")
    assert found["lengths"] == {"iel": "nelements", "idof": 8, "jdof": 8}
    reasons = {r["statement"]: r["reason"] for r in d["not_matched"]}
    assert set(reasons) == {"scale", "shifted"}
    assert "elementwise" in reasons["scale"]
    assert "shifted" in reasons["shifted"] or "index" in reasons["shifted"]
    text = feinsum("match", f"{f}:knl").stdout
    assert found["canonical_key"] in text and "shifted" in text
    d = as_json(feinsum("match", str(f), "--within", "id:apply", "--json"))
    assert [e["statements"] for e in d["einsums"]] == [["apply"]]
    _one_line_error(feinsum("match", str(f), "--within", "id:shifted", check=None),
                    "shifted")
    _one_line_error(feinsum("match", f"{f}:nothing", check=None), "nothing")


PROGRAM_FILE = '''
import loopy as lp
import numpy as np

t_unit = lp.make_kernel(
    "{[e, i, j, e1, i1]: 0 <= e, e1 < 300 and 0 <= i, j, i1 < 35}",
    """
    t[e, i] = sum(j, m[i, j] * u[e, j])
    out[e1, i1] = 2 * t[e1, i1] + u[e1, i1]
    """,
    [lp.GlobalArg("m", np.float64, shape=(35, 35)), lp.GlobalArg("u,out", np.float64,
     shape=(300, 35)), lp.TemporaryVariable("t", np.float64, shape=(300, 35),
     address_space=lp.AddressSpace.GLOBAL)],
    name="apply", seq_dependencies=True)
'''


def test_match_program(tmp_path: Path) -> None:
    """``--program``: the hook's report with the device kernels before and after."""
    f = tmp_path / "program.py"
    f.write_text(PROGRAM_FILE)
    d = as_json(feinsum("match", f"{f}:t_unit", "--program", "--json", "--db",
                        str(tmp_path / "empty.sqlite")))
    (group,) = d["groups"]
    assert group["fused"] and "out" in group["fused"][0]
    assert len(d["launches"]["launches"]) == 1
    assert d["untransformed_launches"]["temporaries"][0]["temporary"] == "t"
    text = feinsum("match", f"{f}:t_unit", "--program", "--db",
                   str(tmp_path / "empty.sqlite")).stdout
    assert "device kernels" in text and "untransformed:" in text


def test_query(filled_db: Path) -> None:
    recs = as_json(feinsum("query", *SPEC, "--json", db=filled_db))
    assert [r["recipe_name"] for r in recs] == ["generic", "untransformed"]
    assert recs[0]["median_time"] < recs[1]["median_time"]
    everything = as_json(feinsum("query", *SPEC, "--status", "all", "--json", db=filled_db))
    assert len(everything) == 3
    assert as_json(feinsum("query", *SPEC, "--recipe", "untransformed", "--json",
                           db=filled_db))[0]["recipe_name"] == "untransformed"
    assert as_json(feinsum("query", *SPEC, "-l", "E=999", "--json", db=filled_db,
                           check=1)) == []  # nothing found: exit 1
    assert len(as_json(feinsum("query", *SPEC, "-l", "E=1024", "--limit", "1", "--json",
                               db=filled_db))) == 1
    text = feinsum("query", *SPEC, "--device", "9000", db=filled_db).stdout
    assert "generic" in text and "user#1" in text


def test_best(filled_db: Path) -> None:
    d = as_json(feinsum("best", *SPEC, "-l", "E=1024", "--device", "9000", "--json",
                        db=filled_db))
    assert d["rung"] == "exact" and d["record"]["recipe_name"] == "generic"
    d = as_json(feinsum("best", *SPEC, "-l", "E=4096", "--device", "9000", "--json",
                        db=filled_db))
    assert d["rung"] == "nearest-lengths" and d["distance"] == pytest.approx(2.0)
    d = as_json(feinsum("best", "ij,jk->ik", "-s", "i=8,j=8,k=8", "--device", "9000",
                        "--json", db=filled_db, check=1))  # no record: exit 1
    assert d["rung"] == "default" and d["record"] is None
    assert d["default"]["recipe"] and isinstance(d["default"]["params"], dict)
    assert "rung exact" in feinsum("best", *SPEC, "-l", "E=1024", "--device", "9000",
                                   db=filled_db).stdout


def test_show(filled_db: Path) -> None:
    d = as_json(feinsum("show", "1", "--json", db=filled_db))
    assert d["recipe_name"] == "generic" and d["ref"] == "user#1"
    assert "__kernel" in d["code"] and d["canonical_text"].startswith("sum")
    same = as_json(feinsum("show", d["uid"], "--json", "--no-code", db=filled_db))
    assert same["id"] == 1 and same["code"] is None
    text = feinsum("show", "user#2", db=filled_db).stdout
    assert "untransformed" in text and "__kernel void" in text


def test_list(filled_db: Path) -> None:
    d = as_json(feinsum("list", "--json", db=filled_db))
    (g,) = d["groups"]
    assert (g["records"], g["ok"], g["device_name"]) == (3, 2, TEST_DEVICE)
    assert g["best_gflops"] == pytest.approx(2 * 64 * 1024 / 1e-5 / 1e9)  # at min time
    assert g["label"] == "ij,ej->ei"  # as first recorded, not canonical ("ab,cb->ca")
    assert as_json(feinsum("list", "--device", "nomatch", "--json", db=filled_db,
                           check=1))["groups"] == []
    assert as_json(feinsum("list", "--einsum", g["canonical_key"][:12], "--json",
                           db=filled_db))["groups"]
    assert "ij,ej->ei" in feinsum("list", db=filled_db).stdout


def test_report(filled_db: Path, tmp_path: Path) -> None:
    png, svg, page = tmp_path / "r.png", tmp_path / "r.svg", tmp_path / "r.html"
    d = as_json(feinsum("report", "-o", str(png), "--html", str(page), "--json",
                        db=filled_db))
    (row,) = d["points"]
    assert row["speedup"] == pytest.approx(4e-5 / 1e-5) and row["recipe"] == "generic"
    assert row["lengths"] == "e=1024" and row["einsum"] == "ij,ej->ei"  # its own names
    assert png.read_bytes().startswith(b"\x89PNG")
    html = page.read_text()
    assert 'src="data:image/png;base64,' in html and "generic" in html
    assert "<script>" in html and "sortable" in html
    assert "http://" not in html and "https://" not in html  # self-contained
    feinsum("report", "-o", str(svg), db=filled_db)
    assert "<svg" in svg.read_text()
    text = feinsum("report", "--no-plot", db=filled_db).stdout
    assert "4.00x" in text  # minimum times, as the tuner ranks
    _one_line_error(feinsum("report", "-o", str(tmp_path / "r.pdf"), db=filled_db,
                            check=None), ".png or .svg")


def test_report_without_matplotlib(filled_db: Path, tmp_path: Path) -> None:
    code = ("import sys; sys.modules['matplotlib'] = None; from feinsum.cli import main; "
            f"sys.exit(main(['report', '--db', {str(filled_db)!r}, '-o', "
            f"{str(tmp_path / 'x.png')!r}]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    _one_line_error(p, "pip install 'feinsum[plot]'")
    code = code.replace("'-o',", "'--no-plot', '-o',")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_db_commands(filled_db: Path, tmp_path: Path) -> None:
    info = as_json(feinsum("db", "info", "--json", db=filled_db))
    assert (info["measurements"], info["ok"]) == (3, 2)
    export = tmp_path / "records.jsonl"
    assert as_json(feinsum("db", "export", str(export), "--json",
                           db=filled_db))["measurements"] == 3
    other = tmp_path / "other.sqlite"
    up = as_json(feinsum("db", "upgrade", str(other), "--json"))
    assert up["schema_version"] and other.exists()
    r = as_json(feinsum("db", "import", str(export), "--db", str(other), "--json"))
    assert r["sources"][str(export)]["added"] == 3
    r = as_json(feinsum("db", "merge", str(filled_db), "--db", str(other), "--json"))
    assert r["sources"][str(filled_db)]["added"] == 0
    d = as_json(feinsum("db", "prune", "--status", "compile-error", "--dry-run", "--json",
                        "--db", str(other)))
    assert d["would_delete"] == 1 and d["deleted"] == 0
    feinsum("db", "prune", "--status", "compile-error", "--db", str(other))
    assert as_json(feinsum("db", "info", str(other), "--json"))["measurements"] == 2
    _one_line_error(feinsum("db", "prune", "--db", str(other), check=None), "criterion")
    _one_line_error(feinsum("db", "import", str(tmp_path / "none.jsonl"), "--db", str(other),
                            check=None))


NO_EINSUM_KERNEL = '''
import numpy as np
import loopy as lp

knl = lp.make_kernel(
    "{[i]: 0 <= i < n}", "y[i] = 2 * x[i]  {id=scale}",
    [lp.GlobalArg("x,y", np.float64, shape=lp.auto), lp.ValueArg("n", np.int32)],
    name="scale", lang_version=(2018, 2))
'''


def _code(*argv: str) -> int:
    """The exit code of ``feinsum ARGV`` (in this process: quicker than a subprocess; the
    console script exits with what main() returns)."""
    import contextlib
    import io

    from feinsum.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            return main(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            return int(exc.code or 0)


def test_exit_codes_of_every_command(filled_db: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """0 found or did, 1 found nothing or a user error, 2 a usage error: for every command
    (docs/cli.rst, "Exit codes")."""
    monkeypatch.setenv("FEINSUM_DB", str(filled_db))
    einsum, nothing = tmp_path / "einsum.py", tmp_path / "nothing.py"
    einsum.write_text(KERNEL_FILE)
    nothing.write_text(NO_EINSUM_KERNEL)
    export = tmp_path / "all.jsonl"
    cases = {
        ("feinsum",): 2, ("--version",): 0,
        ("devices", "--db", ":memory:"): 0, ("devices", "--bogus"): 2,
        ("tune", *SPEC, "--no-db"): 1, ("tune", "ij->i", "--strategy", "magic"): 2,
        ("match", str(einsum)): 0, ("match", str(nothing)): 1,
        ("match", str(nothing), "--json"): 1, ("match",): 2,
        ("query", *SPEC): 0, ("query", *SPEC, "-l", "E=7"): 1, ("query", "--limit"): 2,
        ("best", *SPEC, "-l", "E=1024", "--device", "9000"): 0,
        ("best", "ij,jk->ik", "-s", "i=8,j=8,k=8", "--device", "9000"): 1,
        ("best", *SPEC, "--bogus"): 2,
        ("show", "1", "--no-code"): 0, ("show", "4711"): 1, ("show",): 2,
        ("list",): 0, ("list", "--einsum", "zzz"): 1, ("list", "--min-records", "x"): 2,
        ("report", "--no-plot"): 0, ("report", "--no-plot", "--einsum", "zzz"): 1,
        ("report", "--no-plot", "--since", "soon"): 1, ("report", "--bogus"): 2,
        ("db", "info"): 0, ("db", "export", str(export)): 0,
        ("db", "export", str(tmp_path / "none.jsonl"), "--recipe", "zzz"): 1,
        ("db", "import", str(tmp_path / "missing.jsonl")): 1,
        ("db", "prune", "--db", str(tmp_path / "p.sqlite")): 1, ("db",): 2,
        ("db", "upgrade", str(tmp_path / "new.sqlite")): 0,
    }
    got = {argv: _code(*argv[argv[0] == "feinsum":]) for argv in cases}
    assert got == cases


def test_devices_without_a_usable_one_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    import feinsum.devices.opencl

    real = feinsum.devices.opencl.all_devices
    monkeypatch.setattr(feinsum.devices.opencl, "all_devices",
                        lambda: [(d, "cannot build kernels") for d, _ in real()])
    assert _code("devices", "--db", ":memory:") == 1


def test_devices() -> None:
    d = as_json(feinsum("devices", "--json", "--db", ":memory:"))
    assert any(e["usable"] for e in d)
    assert {"id", "name", "type", "roofline"} <= set(d[0])


def test_tune_then_query(tmp_path: Path) -> None:
    db = tmp_path / "tuned.sqlite"
    d = as_json(feinsum("tune", "ij,j->i", "-s", "i=16,j=16", "--budget", "2",
                        "--no-peers", "--recipe", "generic", "--json", "--db", str(db)))
    assert d["best"]["status"] == "ok" and d["best"]["recipe"] == "generic"
    assert d["evaluated"] == 2 and d["untransformed"]["status"] == "ok"
    recs = as_json(feinsum("query", "ij,j->i", "-s", "i=16,j=16", "--json", "--db",
                           str(db)))
    assert len(recs) == 3  # two configurations and the untransformed kernel
    again = as_json(feinsum("tune", "ij,j->i", "-s", "i=16,j=16", "--budget", "2",
                            "--no-peers", "--recipe", "generic", "--json", "--db", str(db)))
    assert again["evaluated"] == 0 and again["previous"] == 2  # resumed: nothing new


# }}}

# vim: foldmethod=marker
