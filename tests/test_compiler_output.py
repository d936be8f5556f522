"""feinsum.devices.compiler_output: a refused build handled by feinsum leaves no stray
``1 error generated.`` on the terminal (PoCL's clang prints it to descriptor 2), and
nothing else written to descriptor 2 meanwhile is lost."""

from __future__ import annotations

import os
from typing import Any

import pytest

from feinsum.devices import compiler_output as co
from feinsum.hook.check import build_problem

BAD = "__kernel void f(__global float *a) { a[0] = undeclared_thing; }"
GOOD = "__kernel void f(__global float *a) { a[0] = 1.0f; }"


def test_a_refused_build_is_reported_not_printed(cl_device: Any,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    why = build_problem(BAD, [], cl_device)
    assert why is not None and "undeclared_thing" in why, why
    assert build_problem(GOOD, [], cl_device) is None
    err = capfd.readouterr().err
    assert "error generated" not in err, err


class _Program:
    """A stand-in for ``pyopencl.Program`` whose build writes to descriptor 2 (as another
    thread, or the compiler, would) and then fails or not."""

    fail = True

    def __init__(self, *args: Any) -> None:
        pass

    def build(self, options: Any = None) -> None:
        os.write(2, b"written by another thread\n1 warning and 1 error generated.\n"
                 if self.fail else b"1 warning generated.\n")
        if self.fail:
            raise RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE\n"
                               "<source>:1:2: error: something the device lacks")


@pytest.mark.parametrize("fail", [True, False])
def test_everything_else_written_meanwhile_comes_out_after(
        fail: bool, cl_device: Any, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    import pyopencl as cl

    monkeypatch.setattr(_Program, "fail", fail)
    monkeypatch.setattr(cl, "Program", _Program)
    why = build_problem(GOOD, [], cl_device)
    err = capfd.readouterr().err
    if fail:
        assert why is not None and why.endswith("error: something the device lacks"), why
        assert "written by another thread" in err and "generated" not in err, err
    else:  # a build that succeeds keeps its compiler's warnings
        assert why is None and "1 warning generated." in err, err


def test_nothing_is_captured_where_descriptor_2_cannot_be_redirected(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(fd: int) -> int:
        raise OSError("descriptor 2 is closed")

    monkeypatch.setattr(co.os, "dup", refuse)
    with co.compiler_output() as got:
        pass
    assert got.text == ""
    co.echo(got, refused=True)  # nothing to write, no error
