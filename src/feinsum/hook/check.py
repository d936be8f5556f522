"""The whole-program check: loopy must linearize and generate code for what the hook made,
and the device's OpenCL compiler must build that code, before the caller runs it.

The check does what loopy's executor does at the call, with loopy's caches on, so the
call reuses it instead of doing it again: for a program on a PyOpenCL target whose
arguments all have types (pytato's programs, the eager context's einsums), each
entrypoint's executor's typed-and-scheduled translation unit (:meth:`loopy.target.execution.
ExecutorBase.get_typed_and_scheduled_translation_unit`, cached under the program) and its
code (:func:`loopy.generate_code_v2`, cached under the linearized program). Any failure of
either (a schedule loopy cannot find, accesses it cannot order, a vector type it cannot
emit) is a problem, and the caller keeps a smaller transformation.

Given the ``pyopencl.Device`` the program will run on, the check also builds the code as
the executor will (:class:`pyopencl.Program` with the entrypoint's ``build_options``): a
device compiler that refuses the recipes' code (an identifier the code never declared, a
vector type or built-in the device lacks) is a problem too, found here instead of at the
program's first call. PyOpenCL keeps the binary in its cache, keyed by the code, the
options and the device, so the call's build reads it from there: on PoCL the second build
of a kernel takes a few percent of the first.

A program with argument types known only at the call cannot be checked so: its types
are taken as int32 (length parameters) and float64 (arrays), which does not change how
loopy schedules it, and it is linearized alone (its code is generated at the call).
"""

from __future__ import annotations

from typing import Any


def program_problem(t_unit: Any, device: Any = None) -> str | None:
    """Why loopy cannot run *t_unit* (None: it can); with *device* (a
    ``pyopencl.Device``), also why its OpenCL compiler cannot build the code. See the
    module docstring."""
    import loopy as lp

    try:
        for entrypoint in sorted(t_unit.entrypoints) or [None]:
            executor = _executor(t_unit, entrypoint)
            if executor is None or executor.has_runtime_typed_args:
                return _untyped_problem(t_unit)
            linearized = executor.get_typed_and_scheduled_translation_unit(None)
            code = lp.generate_code_v2(linearized)
            if device is not None:
                problem = build_problem(code.device_code(),
                                        linearized[entrypoint].options.build_options, device)
                if problem is not None:
                    return problem
        return None
    except Exception as exc:  # any loopy failure means: not usable
        return _why(exc)


def build_problem(code: str, options: Any, device: Any) -> str | None:
    """Why *device*'s OpenCL compiler cannot build *code* with *options* (None: it
    builds); the compiler's first error line, where its log has one."""
    import pyopencl as cl

    from feinsum.devices.compiler_output import compiler_output, echo
    from feinsum.devices.opencl import get_context

    refused: Exception | None = None
    with compiler_output() as printed:
        try:
            cl.Program(get_context(device), code).build(options=options)
        except Exception as exc:  # the compiler's refusal, or the runtime's
            refused = exc
    echo(printed, refused is not None)
    if refused is None:
        return None
    first = next((ln.strip() for ln in str(refused).splitlines() if "error" in ln.lower()
                  and "clBuildProgram" not in ln), None)
    what = f"the device's OpenCL compiler refused the code ({device.name.strip()})"
    if first is None:
        return f"{what}: {_why(refused)}"
    import re

    return f"{what}: {re.sub(r'[^ ]+:[0-9]+:[0-9]+: *', '', first)[:300]}"


def linearized(t_unit: Any) -> Any | None:
    """*t_unit* linearized as the call will linearize it (the executor's cached
    typed-and-scheduled translation unit), or, with argument types known only at the call,
    with those types guessed (see the module docstring); None where even that leaves types
    unknown. Raises what loopy raises."""
    import loopy as lp

    executor = _executor(t_unit)
    if executor is not None and not executor.has_runtime_typed_args:
        return executor.get_typed_and_scheduled_translation_unit(None)
    typed = _typed_for_check(t_unit)
    return None if typed is None else lp.linearize(lp.preprocess_program(typed))


def _executor(t_unit: Any, entrypoint: str | None = None) -> Any | None:
    """The executor the call of *entrypoint* (default: the first) will make (without an
    OpenCL context: :func:`build_problem` builds), or None for targets other than
    PyOpenCL's."""
    from loopy.target.pyopencl import PyOpenCLTarget
    from loopy.target.pyopencl_execution import PyOpenCLExecutor

    if not isinstance(t_unit.target, PyOpenCLTarget) or not t_unit.entrypoints:
        return None
    return PyOpenCLExecutor(None, t_unit,  # type: ignore[arg-type]
                            entrypoint=entrypoint or sorted(t_unit.entrypoints)[0])


def _untyped_problem(t_unit: Any) -> str | None:
    import loopy as lp
    from loopy.check import pre_codegen_callable_checks
    from loopy.kernel.function_interface import CallableKernel
    from loopy.schedule import get_one_linearized_kernel

    typed = _typed_for_check(t_unit)
    if typed is None:  # types known only at the call: nothing to check here
        return None
    t = lp.preprocess_program(typed)
    for clbl in t.callables_table.values():
        if isinstance(clbl, CallableKernel):
            linearized = get_one_linearized_kernel(clbl.subkernel, t.callables_table)
            pre_codegen_callable_checks(linearized, t.callables_table)
    return None


def _typed_for_check(t_unit: Any) -> Any:
    """*t_unit* with every type inferred, for scheduling only: the types loopy learns only
    at the call (a length parameter's, an input's) are taken as int32 and float64, which
    does not change how it schedules. None if even that leaves types unknown."""
    import loopy as lp
    import numpy as np
    from loopy.types import NumpyType

    try:
        return lp.infer_unknown_types(t_unit, expect_completion=True)
    except Exception:  # loopy's inference failing is expected here: fill in and retry
        pass
    for clbl in t_unit.callables_table.values():
        knl = getattr(clbl, "subkernel", None)
        if knl is None:
            continue
        guess = {a.name: (np.int32 if isinstance(a, lp.ValueArg) else np.float64)
                 for a in knl.args if not isinstance(a.dtype, NumpyType)}
        if guess:
            t_unit = t_unit.with_kernel(lp.add_dtypes(knl, guess))
    try:
        return lp.infer_unknown_types(t_unit, expect_completion=True)
    except Exception:  # still unknown: the caller's code generation will check
        return None


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, KeyError) and "dtype" in text:
        text = f"no such vector type {text}"
    return f"{type(exc).__name__}: {text}"[:300]
