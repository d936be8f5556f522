"""The scripts of benchmarks/ still run: each at its smallest size, in a subprocess, on the
default device (peers that are not installed are skipped by the scripts themselves). This
checks that they work and print their tables, not how fast anything is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not (ROOT / "benchmarks").is_dir(), reason="needs the source tree, not an installed copy"
)

CASES = {
    "arraycontext": (["bench_arraycontext.py", "--elements", "64", "--repeat", "1", "--only",
                      "DG step"], ["DG step", "vs untransformed"]),
    "first_call": (["bench_first_call.py", "--elements", "64", "--warm", "1", "--only",
                    "matmul"],
                   ["matmul", "plain", "feinsum"]),
    "campaign": (["bench_campaign.py", "--jobs", "2", "--budget", "1", "--workers", "1",
                  "--repeat", "1"], ["jobs/min", "device held for timing"]),
    "einsum": (["bench_einsum.py", "--quick", "--configs", "1", "--no-untransformed",
                "--only", "local", "gemm"], ["local", "gemm", "best of"]),
    "elementwise": (["bench_elementwise.py", "--quick", "--configs", "1", "--only",
                     "scale_cols"], ["copy bandwidth", "feinsum default", "feinsum tuned"]),
    "gpu": (["bench_gpu.py", "--quick", "--budget", "1", "--only", "local", "gaussian"],
            ["device:", "roofline measured", "local", "gaussian", "fastest peer"]),
    "kernel_reductions": (["bench_kernel_reductions.py", "--sizes", "1000", "--no-keops",
                           "--only", "nn"], ["feinsum"]),
    "query": (["bench_query.py", "--n", "500", "--repeat", "2"], ["best"]),
    "search": (["bench_search.py", "replay"], ["model-based strategy"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_benchmark_script_runs(name: str, tmp_path: Path) -> None:
    if name in ("arraycontext", "first_call"):
        from test_arraycontext import require_arraycontext

        require_arraycontext()
    args, expected = CASES[name]
    env = {**os.environ, "FEINSUM_DB": str(tmp_path / "feinsum.sqlite"),
           "FEINSUM_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / args[0]), *args[1:]],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, f"{args[0]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    for text in expected:
        assert text in proc.stdout, f"{args[0]} printed no {text!r}:\n{proc.stdout[-3000:]}"
    assert "Traceback" not in proc.stderr
