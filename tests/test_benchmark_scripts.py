"""The scripts of benchmarks/ still run: each at its smallest size, in a subprocess, on the
default device (peers that are not installed are skipped by the scripts themselves). This
checks that they work and print their tables, not how fast anything is."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not (ROOT / "benchmarks").is_dir(), reason="needs the source tree, not an installed copy"
)

CASES = {
    "arraycontext": (["bench_arraycontext.py", "--elements", "64", "--repeat", "1", "--only",
                      "DG step"], ["DG step", "vs untransformed"]),
    "factors": (["bench_factors.py", "--elements", "64", "--n", "64", "--repeat", "1",
                 "--only", "0.4 * gradient", "A @ (w*B)"],
                ["0.4 * gradient", "A @ (w*B)", "vs plain"]),
    "first_call": (["bench_first_call.py", "--elements", "64", "--warm", "1", "--only",
                    "matmul"],
                   ["matmul", "plain", "feinsum", "fast", "(background)"]),
    "campaign": (["bench_campaign.py", "--jobs", "2", "--budget", "1", "--workers", "1",
                  "--repeat", "1"], ["jobs/min", "device held for timing"]),
    "einsum": (["bench_einsum.py", "--quick", "--configs", "1", "--no-untransformed",
                "--only", "local", "gemm"], ["local", "gemm", "best of"]),
    "elementwise": (["bench_elementwise.py", "--quick", "--configs", "1", "--only",
                     "scale_cols"], ["copy bandwidth", "feinsum default", "feinsum tuned"]),
    "gpu": (["bench_gpu.py", "--quick", "--budget", "1", "--only", "local", "gaussian",
             "--out", "gpu-out"],
            ["device:", "roofline measured", "local", "gaussian", "fastest peer"]),
    "matvec": (["bench_matvec.py", "--quick", "--repeat", "1", "--only", "A @ x 4000^2",
                "A.T @ y 1500^2"], ["| A @ x 4000^2 |", "| A.T @ y 1500^2 |", "before / now"]),
    "kernel_reductions": (["bench_kernel_reductions.py", "--sizes", "1000", "--no-keops",
                           "--only", "nn"], ["feinsum"]),
    "predict_defaults": (["predict_defaults.py", "--family", "dg", "--model", "h200",
                          "--workload", "local", "--recipe", "dg_nodes", "--rst", "t.rst"],
                         ["local\th200\tdg_nodes*", "%", " ms", "model's best"]),
    "predict_degree6": (["predict_defaults.py", "--family", "dg", "--model", "h200",
                         "--workload", "local_p6", "--dg-degree", "6"],
                        ["local_p6\th200\tgemm_gpu*", "local_p6\th200\tdg_operator\t"]),
    "predict_programs": (["predict_programs.py", "--elements", "64", "--only", "DG step"],
                         ["DG step\th200\t", "x\t", "nothing measured"]),
    "query": (["bench_query.py", "--n", "500", "--repeat", "2"], ["best"]),
    "search": (["bench_search.py", "replay"], ["model-based strategy"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_benchmark_script_runs(name: str, tmp_path: Path) -> None:
    if name in ("arraycontext", "first_call", "predict_programs"):
        from test_arraycontext import require_arraycontext

        require_arraycontext()
    args, expected = CASES[name]
    env = {**os.environ, "FEINSUM_DB": str(tmp_path / "feinsum.sqlite"),
           "FEINSUM_CACHE_DIR": str(tmp_path / "cache")}
    if name == "first_call":  # what users get: the lazy context transforms in the background
        env["FEINSUM_BACKGROUND"] = "1"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / args[0]), *args[1:]],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, f"{args[0]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    for text in expected:
        assert text in proc.stdout, f"{args[0]} printed no {text!r}:\n{proc.stdout[-3000:]}"
    assert "Traceback" not in proc.stderr
    if name == "gpu":  # the rows are recorded too: JSON lines and the markdown table
        rows = [json.loads(x) for x in (tmp_path / "gpu-out" / "rows.jsonl").read_text()
                .splitlines()]
        assert [r["workload"] for r in rows] == ["local", "gaussian"]
        assert all(r["status"] == "ok" and r["ms"] > 0 and r["peers"] for r in rows), rows
        table = (tmp_path / "gpu-out" / "table.md").read_text()
        assert "| local |" in table and "| gaussian |" in table


def test_workloads_at_another_dg_degree() -> None:
    """``dg_degree``: the DG operators on tetrahedra of that degree, named ``_pN`` (the
    reference degree keeps its names); a degree that is no positive integer is refused."""
    from feinsum.tuning.workloads import tetrahedron_nodes, workloads

    assert tetrahedron_nodes(4) == (35, 15) and tetrahedron_nodes(6) == (84, 28)
    six = workloads(families=("dg",), dg_degree=6)
    assert sorted(six) == sorted(f"{n}_p6" for n in workloads(families=("dg",)))
    assert six["face_mass_x4_p6"].spec.nrows == 4
    assert six["face_mass_p6"].spec.arrays[0].shape == (84, 4, 28)
    with pytest.raises(ValueError, match="positive integer"):
        workloads(dg_degree=0)


def test_bench_gpu_records_each_row_as_it_completes(tmp_path: Path) -> None:
    """A run killed after its first workload keeps that workload's row (rows.jsonl and
    table.md are written as each row completes, not at the end)."""
    env = {**os.environ, "FEINSUM_DB": str(tmp_path / "feinsum.sqlite"),
           "FEINSUM_CACHE_DIR": str(tmp_path / "cache")}
    rows = tmp_path / "out" / "rows.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--quick", "--budget", "1",
         "--no-peers", "--only", "local", "gaussian", "scale_fields", "--out", "out"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            if rows.exists() and rows.read_text().count("\n") >= 1:
                break
            time.sleep(0.2)
        finished = proc.poll() is not None
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert rows.exists(), f"no rows.jsonl:\n{err[-3000:]}"
    got = [json.loads(x) for x in rows.read_text().splitlines()]
    assert got and got[0]["workload"] == "local" and got[0]["ms"] > 0, got
    assert finished or len(got) < 3, "the run was to be stopped before its last row"
    assert "| local |" in (tmp_path / "out" / "table.md").read_text()


def _gpu_peers():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_peers",
                                                  ROOT / "benchmarks" / "gpu_peers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_peers", module)
    spec.loader.exec_module(module)
    return module


def test_peer_bounds() -> None:
    """bench_gpu's peers never run past their bound: measured when the full size fits,
    timed on a subsample of the long axis and scaled when it does not, interrupted and
    reported as timed out when one call overruns."""
    from feinsum.tuning.workloads import workloads

    gp = _gpu_peers()
    spec = workloads()["gaussian"].spec

    def linear(a):  # type: ignore[no-untyped-def]  # 2 s per 1e6 rows
        return lambda: time.sleep(a["x"].shape[0] * 2e-6)

    r = gp.measure_peer("linear", linear, spec, {"M": 10_000, "N": 64}, 2.0)
    assert r.how == "measured" and 0.015 < r.seconds < 0.1, r
    t0 = time.monotonic()
    r = gp.measure_peer("linear", linear, spec, {"M": 1_000_000, "N": 64}, 2.0)
    assert r.scaled and r.how.startswith("scaled from M=") and 1.5 < r.seconds < 3, r
    assert time.monotonic() - t0 < 3
    t0 = time.monotonic()
    r = gp.measure_peer("hangs", lambda a: (lambda: time.sleep(60)), spec,
                        {"M": 1_000_000, "N": 64}, 0.3)
    assert r.seconds is None and r.how == "timed out after 0.3 s", r
    assert time.monotonic() - t0 < 3
    r = gp.measure_peer("raises", lambda a: (lambda: 1 / 0), spec, {"M": 100, "N": 64}, 1.0)
    assert r.seconds is None and r.how.startswith("failed: ZeroDivisionError"), r


def test_peer_without_time_is_not_timed() -> None:
    """A peer given a bound of zero or less is reported as not timed, never as "timed out
    after -2 s"."""
    from feinsum.tuning.workloads import workloads

    gp = _gpu_peers()
    spec = workloads()["gaussian"].spec
    for limit in (0.0, -1.77):
        r = gp.measure_peer("any", lambda a: (lambda: None), spec, {"M": 100, "N": 64}, limit)
        assert r.seconds is None and r.how == "not timed: no time left", r


def _bench_gpu():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_gpu",
                                                  ROOT / "benchmarks" / "bench_gpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_gpu_time_shares() -> None:
    """The time rules of bench_gpu (see its module): peers get a positive bound however
    long the tuning took, the tuner's limit is its part less the overrun seen (never under
    the floor), the workloads not yet run get a cut budget before any is skipped."""
    from feinsum.tuning import ranking

    bg = _bench_gpu()
    # the H200 run: a 13 s share whose tuning took 40 s left the peers -1.8 s to -5.5 s
    t0, share, now = 100.0, 13.0, 140.0
    end = bg.peers_end(t0, share, now)
    assert end == pytest.approx(now + (1 - bg.TUNE_FRACTION) * share)
    limits = [bg.peer_limit(end, now + 2.0 * k, k, 3, None) for k in range(3)]
    assert all(x >= bg.PEER_MIN_SECONDS for x in limits), limits
    assert bg.peer_limit(t0 - 50, now, 0, 3, None) == bg.PEER_MIN_SECONDS
    assert bg.peer_limit(end, now, 0, 3, 1.0) == 1.0  # --peer-limit caps it
    # a tuning that kept to its part: the peers share the rest of the share
    end = bg.peers_end(t0, share, t0 + 0.6 * share)
    assert end == t0 + share
    assert bg.peer_limit(end, t0 + 5.0, 0, 2, None) == pytest.approx(4.0)

    assert bg.tune_limit(7.8, 0.0) == 7.8
    assert bg.tune_limit(7.8, 3.0) == pytest.approx(4.8)
    assert bg.tune_limit(7.8, 30.0) == bg.MIN_TUNE_LIMIT
    assert bg.tune_limit(1.0, 5.0) == 1.0  # a --time-limit under the floor is kept

    assert bg.plan_next(450.0, 20, 8) == (22.5, 8)
    assert bg.plan_next(30.0, 10, 8) == (bg.MIN_SHARE, 6)  # 3 s each: 4 s, budget 6 of 8
    assert bg.plan_next(bg.MIN_SHARE, 100, 8) == (bg.MIN_SHARE, 1)
    assert bg.plan_next(bg.MIN_SHARE - 0.1, 1, 8) is None
    assert bg.plan_next(-20.0, 3, 8) is None

    assert bg.ranking_bound(7.8, 4) == bg.RANK_MIN_SECONDS
    assert bg.ranking_bound(40.0, 4) == pytest.approx(bg.RANK_FRACTION * 10)
    assert bg.ranking_bound(1e4, 1) == ranking.RANKING_SECONDS
    saved = ranking.RANKING_SECONDS
    with bg.ranking_seconds(1.5):
        assert ranking.RANKING_SECONDS == 1.5
    assert saved == ranking.RANKING_SECONDS
    with pytest.raises(SystemExit):
        bg.main(["--time-budget", "-1"])


def test_bench_gpu_keeps_to_its_time_when_tuning_overruns(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str],
                                                          ) -> None:
    """bench_gpu's loop on a tuner that runs 2 s past every limit it is given (as autotune
    does on a GPU: candidates building finish, the model's ranking is not bounded) and a
    peer that hangs: every peer gets a positive bound (the old code gave the peers what was
    left of the share: negative), the next tuner limit takes the overrun off, the workloads
    after get a cut budget rather than being skipped, and the run ends within its
    --time-budget plus about one workload's overrun."""
    import importlib
    from types import SimpleNamespace

    import feinsum.devices.opencl
    import feinsum.timing.roofline
    from feinsum.tuning import ranking

    bg = _bench_gpu()
    gp = importlib.import_module("gpu_peers")  # as bench_gpu imports it
    importlib.import_module("feinsum.lowering.validation")  # imported before it is timed
    monkeypatch.setattr(bg, "MIN_SHARE", 2.0)
    monkeypatch.setattr(bg, "PEER_MIN_SECONDS", 0.5)
    monkeypatch.setattr(bg, "MIN_TUNE_LIMIT", 0.3)
    monkeypatch.setattr(bg, "check_device", lambda spec: "device")
    info = SimpleNamespace(name="Fake GPU", is_cpu=False, peak_bandwidth=None, model=None)
    monkeypatch.setattr(feinsum.devices.opencl, "device_info", lambda dev: info)
    monkeypatch.setattr(feinsum.timing.roofline, "measure_roofline",
                        lambda dev, db, quick: SimpleNamespace(fraction=lambda *a: 0.5))
    calls: list[tuple[float, int, float]] = []

    def autotune(spec, *, time_limit, budget, **kwargs):  # type: ignore[no-untyped-def]
        calls.append((time_limit, budget, ranking.RANKING_SECONDS))
        time.sleep(time_limit + 2.0)
        m = SimpleNamespace(timing=SimpleNamespace(min=1e-3), recipe_name="fake", params={},
                            nbytes=8)
        return SimpleNamespace(best=m, measurements=[m], failures={}, previous=0)

    monkeypatch.setattr(bg.fs, "autotune", autotune)
    monkeypatch.setattr(gp, "peers", lambda name, e, gpu_only=False: {
        "quick": lambda a: (lambda: time.sleep(1e-3)), "hangs": lambda a: (lambda: time.sleep(60))})
    names = ["local", "gemm", "gaussian", "inner", "matvec"]
    budget_s = 12.0
    t0 = time.monotonic()
    bg.main(["--quick", "--budget", "8", "--time-budget", str(budget_s), "--out",
             str(tmp_path / "out"), "--only", *names])
    elapsed = time.monotonic() - t0
    printed = capsys.readouterr().out
    rows = [json.loads(x) for x in (tmp_path / "out" / "rows.jsonl").read_text().splitlines()]
    assert [r["workload"] for r in rows] == names, rows
    ran = [r for r in rows if r["status"] == "ok"]
    assert len(ran) >= 2 and rows[:len(ran)] == ran, rows  # the skipped ones come last
    assert all(r["status"].startswith("skipped: out of time (")
               and not re.search(r"[(\s]-\d", r["status"]) for r in rows[len(ran):]), rows
    assert ranking.RANKING_SECONDS == 20.0  # restored
    # 12 s in 5: 2.4 s each, the tuner 60% of it; then the 2 s overrun is taken off
    assert rows[0]["budget"] == 8 and calls[0][0] == pytest.approx(0.6 * 2.4, rel=0.1)
    assert "tuning took" in " ".join(rows[0]["notes"]), rows[0]
    assert calls[1][0] == pytest.approx(0.3), calls
    # after the overrun 7.6 s are left for 4: 1.9 s each, under MIN_SHARE: 2 s, budget 7
    assert rows[1]["budget"] < 8 and calls[1][1] == rows[1]["budget"], rows[1]
    assert "budget cut to" in " ".join(rows[1]["notes"])
    for r in ran:
        assert [p["peer"] for p in r["peers"]] == ["quick", "hangs"], r
        assert all(p["limit_s"] >= 0.5 for p in r["peers"]), r
        assert r["peers"][0]["how"] == "measured", r
        assert r["peers"][1]["how"].startswith("timed out after "), r
    assert "after -" not in printed and "after -" not in (tmp_path / "out" / "table.md"
                                                          ).read_text()
    overrun = max(r["seconds"] - r["share"] for r in ran)
    assert elapsed < budget_s + overrun + 1.0, (elapsed, rows)


def test_gpu_session_runs_bench_gpu_into_its_folder(tmp_path: Path) -> None:
    """The prepared device command: the devices, bench_gpu's rows and table, the database
    and its records as JSON lines, under OUT/LABEL."""
    env = {**os.environ, "FEINSUM_DB": str(tmp_path / "feinsum.sqlite"),
           "FEINSUM_CACHE_DIR": str(tmp_path / "cache"), "PYTHON": sys.executable,
           "OUT": str(tmp_path / "out"), "LAZY_N": "1000", "GPU_STAGES": "bench lazy"}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "first",
                           "--quick", "--budget", "1", "--no-peers", "--only", "local"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dest = tmp_path / "out" / "first"
    assert "local" in (dest / "table.md").read_text()
    assert "OpenCL devices" in (dest / "devices.txt").read_text()
    lines = [json.loads(x) for x in (dest / "records.jsonl").read_text().splitlines()]
    assert lines[0]["format"] == "feinsum-timings"
    assert any(r.get("recipe") == "contraction" for r in lines), lines
    assert "exited 0" in (dest / "session.log").read_text()
    rows = [json.loads(x) for x in (dest / "lazy_index.jsonl").read_text().splitlines()]
    assert [r["order"] for r in rows] == ["random", "morton", "worst"]
    assert all(r["lazy_ms"] > 0 and r["eager_ms"] > 0 and r["params"]["lazy_index"]
               for r in rows), rows


def test_gpu_session_keeps_to_its_time(tmp_path: Path) -> None:
    """The stages after bench_gpu.py run only while 30 s of SESSION_SECONDS remain: a
    session out of time skips them, says so, and exits with bench_gpu.py's status."""
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"),
           "GPU_STAGES": "programs lazy", "SESSION_SECONDS": "35", "LAZY_N": "1000"}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "second"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = (tmp_path / "out" / "second" / "session.log").read_text()
    assert "bench_arraycontext.py skipped" in log and "bench_lazy_index.py skipped" in log, log
    assert "bench_gpu.py" not in log.split("skipped")[0], log


def test_gpu_session_without_dependencies_says_what_to_carry(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "OUT": str(tmp_path / "out"),
           "FEINSUM_GPU_CARRY": str(tmp_path / "empty")}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "first"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2 and "gpu_carry.sh" in proc.stdout, proc.stdout + proc.stderr
    bad = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "../x"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode == 2 and "LABEL" in bad.stderr


def test_bench_lazy_index_times_both_ways_and_checks_them(tmp_path: Path) -> None:
    script = str(ROOT / "benchmarks" / "bench_lazy_index.py")
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run([sys.executable, script, "--n", "700", "--repeat", "1", "--orders",
                           "worst", "morton", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [json.loads(x)["order"] for x in out.read_text().splitlines()] == ["worst",
                                                                               "morton"]
    assert "eager/lazy" in proc.stdout
    bad = subprocess.run([sys.executable, script, "--n", "0"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode != 0 and "--n and --repeat must be positive" in bad.stderr


def test_gpu_plan_packs_each_label(tmp_path: Path) -> None:
    """The one-command lease: three labels, each packed into OUT/LABEL.tar.gz (the device
    tool returns at most 8 files), the bench stages' rows inside."""
    import tarfile

    env = {**os.environ, "FEINSUM_DB": str(tmp_path / "feinsum.sqlite"),
           "FEINSUM_CACHE_DIR": str(tmp_path / "cache"), "PYTHON": sys.executable,
           "OUT": str(tmp_path / "out"), "GPU_WORK": str(tmp_path / "work"),
           "PLAN_SECONDS": "170", "PLAN_BENCH_ARGS": "--quick --budget 1 --no-peers --only local",
           "PLAN_OVERLAP_ARGS": "--elements 300 2000 --only local --repeat 2"}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_plan.sh")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "first.tar.gz", "gpulen.tar.gz", "programs.tar.gz"]
    for label in ("first", "gpulen"):
        with tarfile.open(out / f"{label}.tar.gz") as tar:
            table = tar.extractfile("./table.md")
            assert table is not None and "local" in table.read().decode()
            assert "./records.jsonl" in tar.getnames()
    with tarfile.open(out / "programs.tar.gz") as tar:
        rows = tar.extractfile("./overlap.jsonl")
        assert rows is not None
        got = [json.loads(x) for x in rows.read().decode().splitlines()]
        configs = {json.dumps(r["params"], sort_keys=True) for r in got}
        assert 1 <= len(configs) <= 2
        assert sorted(r["elements"] for r in got) == sorted([300, 2000] * len(configs))


def test_gpu_overlap_measures_each_configuration_at_each_length(tmp_path: Path) -> None:
    """gpu_overlap.py: dg_nodes' defaults (for the H200 model: the CPU matches none) for
    the smallest and largest element count, each built once and run at every count, its
    output checked, a row each; --analyse adds the model's parts and the share hidden."""
    script = str(ROOT / "benchmarks" / "gpu_overlap.py")
    out = tmp_path / "overlap.jsonl"
    proc = subprocess.run([sys.executable, script, "--elements", "300", "900", "--only",
                           "divergence", "--repeat", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    configs = {json.dumps(r["params"], sort_keys=True) for r in rows}
    assert sorted(r["elements"] for r in rows) == sorted([300, 900] * len(configs))
    assert all(r["wrong"] is None and r["measured"] > 0 and r["model"] == "h200"
               and r["info"]["name"] == "NVIDIA H200" for r in rows), rows
    analysed = subprocess.run([sys.executable, script, "--analyse", str(out)],
                              capture_output=True, text=True, timeout=300)
    assert analysed.returncode == 0 and "median overlap, divergence" in analysed.stdout
    assert len(analysed.stdout.splitlines()) == len(rows) + 3, analysed.stdout
    bad = subprocess.run([sys.executable, script, "--elements", "0"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode != 0 and "positive whole numbers" in bad.stderr
    (tmp_path / "bad.jsonl").write_text('{"workload": "local"}\n')
    for path in (tmp_path / "missing.jsonl", tmp_path / "bad.jsonl"):
        bad = subprocess.run([sys.executable, script, "--analyse", str(path)],
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and "cannot analyse" in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr
