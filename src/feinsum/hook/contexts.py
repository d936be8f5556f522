"""Array contexts whose programs feinsum transforms: drop-in subclasses of arraycontext's.

* :class:`FeinsumPytatoPyOpenCLArrayContext` (lazy): every loopy program pytato makes
  (``actx.compile``, ``actx.freeze``) goes through :func:`feinsum.transform_program`:
  its einsums get their best record (or a recipe's default) and every other statement
  the default parallel schedule; programs with no einsum get the default schedule too,
  and so do programs of ``actx.freeze`` (they run once: no einsum is transformed).
* :class:`FeinsumPyOpenCLArrayContext` (eager): ``actx.einsum`` is specialised to the
  sizes, dtypes and layouts of its arguments (arraycontext would cache one program per
  subscripts and call it with any sizes), transformed, and cached per such signature:
  never a kernel specialised to the first call's sizes. Other programs go through the
  hook, and to arraycontext's own transformation when the hook transforms nothing.

``actx.feinsum_last_report`` is the :class:`~feinsum.hook.HookReport` of the last
program either context transformed. Both need arraycontext and pytato (not on the
package index in versions that work with loopy 2025.2: see docs/installation.rst).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from feinsum.errors import FeinsumError, MissingDependencyError
from feinsum.hook import background
from feinsum.hook.mixin import FeinsumTransformMixin

try:
    from arraycontext import PyOpenCLArrayContext, PytatoPyOpenCLArrayContext
except ImportError as exc:  # pragma: no cover - exercised where arraycontext is absent
    raise MissingDependencyError(
        "feinsum.arraycontext needs the packages arraycontext and pytato (the versions on "
        "the package index are too old for loopy 2025.2): install wheels built from their "
        "repositories, as docs/installation.rst says") from exc


class FeinsumPytatoPyOpenCLArrayContext(FeinsumTransformMixin, PytatoPyOpenCLArrayContext):
    """arraycontext's :class:`~arraycontext.PytatoPyOpenCLArrayContext` with every
    program transformed by feinsum (configure as :class:`~feinsum.FeinsumTransformMixin`
    says, e.g. ``feinsum_db=...``, ``feinsum_lengths=...``).

    Unless given an allocator (or ``use_memory_pool=False``), arrays and the global
    temporaries of every call come from a pool of OpenCL buffers, on every device:
    arraycontext's default allocates and frees them per call (on a GPU that cost 50-100
    times the program's kernels), and its shared virtual memory let loopy's invoker
    release temporaries while kernels still ran (a corrupted heap on PoCL)."""

    feinsum_schedule_all = True
    #: transform compiled programs in a background process, running them untransformed
    #: meanwhile (:mod:`feinsum.hook.background`); None: ``$FEINSUM_BACKGROUND`` (on
    #: unless "0")
    feinsum_background: bool | None = None

    def __init__(self, queue: Any, allocator: Any = None, *args: Any,
                 feinsum_background: bool | None = None, **kwargs: Any) -> None:
        if allocator is None and kwargs.get("use_memory_pool") is not False:
            kwargs.pop("use_memory_pool", None)
            allocator = buffer_pool(queue)
        super().__init__(queue, allocator, *args, **kwargs)
        if feinsum_background is not None:
            self.feinsum_background = feinsum_background
        import weakref

        self._feinsum_tiered: weakref.WeakSet[Any] = weakref.WeakSet()
        self._feinsum_new: Any = None
        traced = self._compile_trace_callback

        def trace(what: Any, stage: str, ir: Any) -> None:
            if stage == "post_transform_loopy_program":
                self._feinsum_attach(ir)
            traced(what, stage, ir)

        self._compile_trace_callback = trace

    def transform_loopy_program(self, t_unit: Any) -> Any:
        """:meth:`FeinsumTransformMixin.transform_loopy_program`, except for compiled
        programs quick to run untransformed (unless ``feinsum_background`` is False): they
        run so while the transformed program is made in the background, from the second
        call on
        (:mod:`feinsum.hook.background`: from the hook's caches, else by a worker
        process); the first call after it is ready runs it."""
        import time

        t0 = time.perf_counter()
        once = not self.feinsum_transform_once and self._feinsum_runs_once(t_unit)
        options = self._feinsum_options()
        job_options = (None if once or not background.enabled(self.feinsum_background)
                       else background.worker_options(options))
        if job_options is None or not background.quick_untransformed(t_unit,
                                                                     options["device"]):
            return super().transform_loopy_program(t_unit)
        self._feinsum_new = (t_unit, options, job_options)
        self.feinsum_last_report = background.pending_report(
            t_unit, options["device"].name.strip(), time.perf_counter() - t0)
        return t_unit

    def feinsum_wait(self, timeout: float | None = None) -> bool:
        """Wait at most *timeout* seconds (None: as long as it takes) for the transformed
        programs made in the background (a program's starts at its second call, or here if
        it has run once); whether all are ready (each is in use from its next call)."""
        import time

        end = None if timeout is None else time.monotonic() + timeout
        for tiered in list(self._feinsum_tiered):
            if not tiered.wait(None if end is None else max(0.0, end - time.monotonic())):
                return False
        return True

    def _feinsum_attach(self, bound: Any) -> None:
        """Make the program arraycontext just bound (*bound*) run untransformed until its
        transformed version is ready (:class:`~feinsum.hook.background.TieredExecutor`)."""
        import weakref

        new, self._feinsum_new = self._feinsum_new, None
        executor = getattr(bound, "program", None)
        if new is None or not callable(executor):
            return
        me = weakref.ref(self)

        def switched(report: Any, failure: str | None) -> None:
            actx = me()
            if actx is None:
                return
            if report is not None:
                actx.feinsum_last_report = report
            elif failure is not None and actx.feinsum_last_report is not None:
                from dataclasses import replace

                actx.feinsum_last_report = replace(actx.feinsum_last_report,
                                                   mode="transform", note=failure)

        t_unit, options, job_options = new
        tiered = background.TieredExecutor(executor, (t_unit, self.context, options, job_options),
                                switched)
        self._feinsum_tiered.add(tiered)
        bound.program = tiered


    def _feinsum_runs_once(self, t_unit: Any) -> bool:
        """Programs of ``actx.compile`` carry arraycontext's ``FromArrayContextCompile`` tag
        on their entrypoint; the others (``actx.freeze`` of an expression) run once."""
        from arraycontext.impl.pytato.compile import FromArrayContextCompile

        return not any(t_unit[name].tags_of_type(FromArrayContextCompile)
                       for name in t_unit.entrypoints)


def buffer_pool(queue: Any) -> Any:
    """A memory pool of OpenCL buffers on *queue*: what feinsum's contexts allocate from."""
    import pyopencl.tools as clt

    return clt.MemoryPool(clt.ImmediateAllocator(queue))


class FeinsumPyOpenCLArrayContext(FeinsumTransformMixin, PyOpenCLArrayContext):
    """arraycontext's :class:`~arraycontext.PyOpenCLArrayContext` whose ``einsum`` runs a
    program feinsum transformed for the arguments' sizes, dtypes and layouts; it allocates
    from a pool of OpenCL buffers unless given an allocator (``allocator=False``: none)."""

    def __init__(self, queue: Any, allocator: Any = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(queue, buffer_pool(queue) if allocator is None else allocator,
                         *args, **kwargs)
        self._feinsum_einsums: dict[Any, tuple[Any, Any]] = {}

    def einsum(self, spec: str, *args: Any, arg_names: Sequence[str] | None = None,
               tagged: Any = ()) -> Any:
        """:meth:`arraycontext.ArrayContext.einsum`, transformed by feinsum for exactly
        these argument sizes, dtypes and layouts (one cached program each)."""
        import arraycontext.impl.pyopencl.taggable_cl_array as tga

        names = tuple(arg_names) if arg_names is not None else tuple(
            f"arg{i}" for i in range(len(args)))
        if len(names) != len(args):
            raise FeinsumError(f"einsum {spec!r}: {len(args)} arguments but {len(names)} "
                               "arg_names")
        orders = [_order(a) for a in args]
        if None in orders:  # strided views: arraycontext's program takes any strides
            return super().einsum(spec, *args, arg_names=names, tagged=tagged)
        key = (spec, names, tuple(_signature(a) for a in args), _tag_key(tagged))
        hit = self._feinsum_einsums.get(key)
        if hit is None:
            t_unit = _specialised(self._get_einsum_prg(spec, names, tagged), names, args,
                                  orders)
            from feinsum.hook.program import transform_program

            new, report = transform_program(t_unit, **self._feinsum_options())
            hit = (new.executor(self.context), report)
            self._feinsum_einsums[key] = hit
        executor, self.feinsum_last_report = hit
        _, result = executor(self.queue, allocator=self.allocator,
                             **dict(zip(names, args, strict=True)))
        return self.tag(tagged, tga.to_tagged_cl_array(result["out"]))


def _order(a: Any) -> str | None:
    flags = getattr(a, "flags", None)
    if flags is None or getattr(a, "ndim", 0) <= 1:
        return "C"
    if flags.c_contiguous:
        return "C"
    if flags.f_contiguous:
        return "F"
    return None


def _signature(a: Any) -> tuple[Any, ...]:
    return (tuple(a.shape), str(a.dtype), _order(a))


def _tag_key(tagged: Any) -> Any:
    try:
        hash(tagged)
        return tagged
    except TypeError:
        return repr(tagged)


def _specialised(t_unit: Any, names: Sequence[str], args: Sequence[Any],
                 orders: Sequence[str | None]) -> Any:
    """arraycontext's einsum program with the arguments' dtypes, lengths and layouts."""
    import loopy as lp

    knl = t_unit.default_entrypoint
    t_unit = lp.add_dtypes(t_unit, {n: a.dtype for n, a in zip(names, args, strict=True)})
    lengths: dict[str, int] = {}
    for n, a in zip(names, args, strict=True):
        for dim, size in zip(knl.arg_dict[n].shape, a.shape, strict=True):
            if hasattr(dim, "name") and lengths.setdefault(dim.name, int(size)) != int(size):
                raise FeinsumError(
                    f"einsum {knl.name!r}: index length {dim.name} is "
                    f"{lengths[dim.name]} in one argument and {size} in {n!r}")
    for n, a, order in zip(names, args, orders, strict=True):
        rank = len(a.shape)
        if rank:
            tags = ",".join(f"N{rank - 1 - k}" if order == "C" else f"N{k}"
                            for k in range(rank))
            t_unit = lp.tag_array_axes(t_unit, n, tags)
    out = knl.arg_dict["out"]
    if len(out.shape):
        t_unit = lp.tag_array_axes(
            t_unit, "out", ",".join(f"N{len(out.shape) - 1 - k}" for k in range(len(out.shape))))
    return lp.fix_parameters(t_unit, **lengths)  # type: ignore[arg-type]
