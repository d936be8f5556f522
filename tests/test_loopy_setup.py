"""What loopy prints while feinsum asks it for a schedule (``feinsum.lowering.loopy_setup``)."""

from __future__ import annotations

import logging
from typing import Any

import loopy as lp
import numpy as np
import pytest
from loopy.diagnostic import DependencyCycleFound

import feinsum.lowering.loopy_setup  # noqa: F401  (installs the routing)
from feinsum.errors import PredictionError
from feinsum.hook.check import program_problem
from feinsum.prediction import predict


def _unschedulable() -> Any:
    """A kernel loopy finds no schedule for (two statements that wait for each other):
    its scheduler prints its report before it raises."""
    return lp.make_kernel(
        "{[i]: 0 <= i < 16}",
        """
        a[i] = b[i]  {id=x, dep=y}
        b[i] = a[i] + 1  {id=y, dep=x}
        """, [lp.GlobalArg("a,b", np.float32, shape=(16,))], target=lp.PyOpenCLTarget(),
        lang_version=(2018, 2))


def test_the_report_stays_off_stdout_in_feinsum_calls(capsys: Any, caplog: Any) -> None:
    """The hook's check and the performance model report the failure in their own words;
    loopy's report goes to the ``feinsum.loopy`` logger (a ``--json`` output stays JSON)."""
    with caplog.at_level(logging.DEBUG, logger="feinsum.loopy"):
        problem = program_problem(_unschedulable())
        with pytest.raises(PredictionError, match="cannot read this kernel"):
            predict(_unschedulable(), "h200", {})
    assert problem and "Dependency" in problem, problem
    assert capsys.readouterr().out == ""
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "feinsum.loopy")
    assert "INSTRUCTIONS" in logged


def test_the_report_is_loopys_own_elsewhere(capsys: Any) -> None:
    """A caller other than feinsum (here the test) keeps loopy's report on stdout."""
    with pytest.raises(DependencyCycleFound):
        lp.linearize(lp.preprocess_program(_unschedulable()))
    assert "INSTRUCTIONS" in capsys.readouterr().out
