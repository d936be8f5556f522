"""The same programs under the 2026 arraycontext and pytato, which emit einsums otherwise:
each reduction in a statement of its own writing a global temporary, its bounds held in
private temporaries assigned constants (``_pt_sum_r0_ubound = 3``).

``scripts/bootstrap test`` installs that pair into ``.venv/feinsum-head`` (beside the
mid-2025 pair in the venv itself); each test runs ``tests/arraycontext_cases.py`` in a
process with it first on ``PYTHONPATH``. Skipped where it is absent, saying so, and
required in CI (``FEINSUM_REQUIRE_ARRAYCONTEXT=1``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_arraycontext import REQUIRE, check_lazy, require_arraycontext

HERE = Path(__file__).resolve().parent
HEAD = Path(sys.prefix) / "feinsum-head"
# einsum groups transformed: as under the mid-2025 pair; the 2026 pytato writes
# jac * einsum(...) as the einsum and then a product of two arrays, an einsum of its own
# with too little work at E = 48 to get a kernel (left to the default schedule)
EXPECTED = {"dg_step": 2, "dg_mass_step": 3, "several": 5, "matmul": 1,
            "sum_of_products": 1, "tagged": 1, "unit_axis": 1, "no_einsum": 0}
TOO_SMALL = {"unit_axis": 1}


def run_head(*names: str) -> dict[str, Any]:
    require_arraycontext()
    if not (HEAD / "pytato").is_dir():
        why = (f"the 2026 arraycontext/pytato are not installed in {HEAD} "
               "(`scripts/bootstrap test` installs them from ../shared/wheels/head)")
        if os.environ.get(REQUIRE):
            pytest.fail(f"{REQUIRE} is set but {why}")
        pytest.skip(why)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HEAD), str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, str(HERE / "arraycontext_cases.py"), *names],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("FACTS "))
    facts: dict[str, Any] = json.loads(line[len("FACTS "):])
    for pkg, path in facts.pop("versions").items():
        assert str(HEAD) in path, f"{pkg} came from {path}, not the 2026 wheels"
    return facts


@pytest.mark.parametrize("names", [("dg_step", "dg_mass_step", "several"),
                                   ("matmul", "sum_of_products", "tagged"),
                                   ("unit_axis", "no_einsum")])
def test_head_lazy_programs(names: tuple[str, ...]) -> None:
    facts = run_head(*names)
    for name in names:
        check_lazy(facts[name], EXPECTED[name], 1e-12, TOO_SMALL.get(name, 0))


def test_head_whole_dg_steps() -> None:
    """The DG steps at 300 elements under the 2026 pair: no more launches and global
    temporaries than pytato's program."""
    from test_arraycontext import check_whole

    names = ("dg_step@300", "dg_mass_step@300")
    facts = run_head(*names)
    for name in names:
        check_lazy(facts[name], EXPECTED[name.split("@")[0]], 1e-12)
        check_whole(facts[name])


def test_head_float32_and_eager() -> None:
    facts = run_head("dg_step_float32", "eager")
    check_lazy(facts["dg_step_float32"], 2, 2e-5)
    assert facts["eager"]["programs"] == 2
    for run in facts["eager"]["runs"]:
        assert run["transformed"] == 1 and run["vs_numpy"] <= 1e-12, run["report"]
