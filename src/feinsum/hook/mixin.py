"""A mixin for array contexts: ``transform_loopy_program`` (arraycontext's protocol)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from feinsum.errors import PerformanceWarning

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.hook.report import HookReport

_UNSET: Any = object()
#: whether the warning about a context without a memory pool was given (once a process)
_WARNED_POOL = False
#: pyopencl's allocators that allocate and free memory at every request
_UNPOOLED = ("ImmediateAllocator", "DeferredAllocator", "SVMAllocator")


class FeinsumTransformMixin:
    """Put before an array context class (``class Ctx(FeinsumTransformMixin,
    PyOpenCLArrayContext)``) to transform every einsum of the programs it compiles by the
    best record of the timing database; arraycontext is not needed to use it.

    Configure with class attributes or keyword arguments of ``__init__`` (the others go to
    the next class): ``feinsum_device`` (default: the device of ``self.queue`` if there is
    one, else the default device), ``feinsum_db``, ``feinsum_on_miss``, ``feinsum_budget``,
    ``feinsum_lengths``, ``feinsum_on_busy``, ``feinsum_schedule_all``,
    ``feinsum_transform_once`` — see :func:`feinsum.transform_program`.

    A program the context runs only once (:meth:`_feinsum_runs_once`; arraycontext's
    ``freeze`` of an expression that was not compiled) gets the default schedule only,
    unless ``feinsum_transform_once`` is True: transforming its einsums would cost more than
    it saves.

    A program in which feinsum changed nothing goes to the next class's
    ``transform_loopy_program`` (if any); ``feinsum_last_report`` holds the last
    :class:`~feinsum.hook.HookReport`. :mod:`feinsum.arraycontext` has ready subclasses
    of arraycontext's contexts.

    The context's OpenCL context (``self.queue.context``) is lent to feinsum while it
    lives (:func:`feinsum.devices.opencl.lend_context`): the hook builds the code it checks
    there, and makes no context of its own on the device.

    A context that allocates without a memory pool (its ``allocator`` None or one of
    pyopencl's unpooled allocators) gets a :class:`~feinsum.errors.PerformanceWarning`,
    once a process: every call of a compiled program then allocates and frees its output
    and temporaries, which can take longer than the kernels themselves.
    """

    feinsum_device: Any = None
    feinsum_db: Any = None
    feinsum_on_miss: str = "default"
    feinsum_budget: int | None = None
    feinsum_lengths: Mapping[str, int] | None = None
    feinsum_on_busy: str = "default"
    #: give kernels without einsums the default parallel schedule too
    feinsum_schedule_all: bool = False
    #: transform the einsums of programs that run once too
    feinsum_transform_once: bool = False
    feinsum_last_report: HookReport | None = None

    def __init__(self, *args: Any, feinsum_device: Any = _UNSET, feinsum_db: Any = _UNSET,
                 feinsum_on_miss: Any = _UNSET, feinsum_budget: Any = _UNSET,
                 feinsum_lengths: Any = _UNSET, feinsum_on_busy: Any = _UNSET,
                 feinsum_schedule_all: Any = _UNSET, feinsum_transform_once: Any = _UNSET,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, value in (("feinsum_device", feinsum_device), ("feinsum_db", feinsum_db),
                            ("feinsum_on_miss", feinsum_on_miss),
                            ("feinsum_budget", feinsum_budget),
                            ("feinsum_lengths", feinsum_lengths),
                            ("feinsum_on_busy", feinsum_on_busy),
                            ("feinsum_schedule_all", feinsum_schedule_all),
                            ("feinsum_transform_once", feinsum_transform_once)):
            if value is not _UNSET:
                setattr(self, name, value)
        _check_pool(self)
        context = getattr(getattr(self, "queue", None), "context", None)
        if context is not None:
            from feinsum.devices.opencl import lend_context

            lend_context(context)

    def _feinsum_target_device(self) -> Any:
        if self.feinsum_device is not None:
            return self.feinsum_device
        queue = getattr(self, "queue", None)
        return getattr(queue, "device", None)

    def _feinsum_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`feinsum.transform_program` this context uses."""
        return {"device": self._feinsum_target_device(), "db": self.feinsum_db,
                "on_miss": self.feinsum_on_miss, "budget": self.feinsum_budget,
                "lengths": self.feinsum_lengths, "on_busy": self.feinsum_on_busy,
                "schedule_all": self.feinsum_schedule_all}

    def _feinsum_runs_once(self, t_unit: lp.TranslationUnit) -> bool:
        """Whether the context will run *t_unit* only once (never, here: contexts that can
        tell say so)."""
        return False

    def transform_loopy_program(self, t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
        """*t_unit* with its einsums transformed (:func:`feinsum.transform_program`)."""
        from feinsum.hook.program import transform_program

        once = not self.feinsum_transform_once and self._feinsum_runs_once(t_unit)
        new, report = transform_program(t_unit, **self._feinsum_options(), run_once=once)
        self.feinsum_last_report = report
        if not report.changed:
            parent = getattr(super(), "transform_loopy_program", None)
            if parent is not None:
                try:
                    return parent(t_unit)  # type: ignore[no-any-return]
                except NotImplementedError:
                    return new
        return new


def unpooled(allocator: Any) -> bool:
    """Whether *allocator* (an array context's) allocates without a memory pool: None
    (pyopencl's default) or one of pyopencl's unpooled allocators."""
    return allocator is None or (type(allocator).__name__ in _UNPOOLED and (
        type(allocator).__module__.startswith("pyopencl")))


def _check_pool(actx: Any) -> None:
    """Warn (once a process) when *actx* has an ``allocator`` that is not a pool."""
    global _WARNED_POOL
    if _WARNED_POOL or not hasattr(actx, "allocator") or not unpooled(actx.allocator):
        return
    _WARNED_POOL = True
    warnings.warn(
        f"{type(actx).__name__} allocates without a memory pool: every call of a compiled "
        "program allocates and frees its output and temporaries, which can take longer "
        "than its kernels; pass allocator=pyopencl.tools.MemoryPool("
        "pyopencl.tools.ImmediateAllocator(queue)) (or use_memory_pool=True), or use "
        "feinsum.arraycontext's contexts, which pool by default",
        PerformanceWarning, stacklevel=3)
