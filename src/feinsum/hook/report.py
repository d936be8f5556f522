"""What :func:`feinsum.transform_program` did, per statement group: frozen dataclasses, and
the clock that times its phases."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    from feinsum.hook.launches import Launches, LazyLaunches

#: What the hook did with one statement group.
Action: TypeAlias = Literal["replayed", "tuned", "default", "untransformed", "skipped", "failed"]


@dataclass(frozen=True)
class GroupReport:
    """One group of statements (a batched einsum) of one kernel.

    ``action``: ``"replayed"`` (a database record's configuration), ``"tuned"`` (tuned now,
    then replayed), ``"default"`` (no record: the preferred applicable recipe's heuristic
    default), ``"untransformed"`` (the record says the untransformed kernel is fastest),
    ``"skipped"`` (left as it was: ``on_miss="skip"``, or nothing applies) or ``"failed"``
    (every candidate raised; the statements are untouched and ``note`` says why).
    ``rung`` is the fallback-chain rung of the record (``"default"`` when none was used);
    ``expected_gflops`` the record's GFLOP/s (at ``record_lengths``), None without one.
    ``fused``: the operand expressions its kernel evaluates in its loads and the epilogues
    it applies in its stores (:mod:`feinsum.spec.fused`); ``not_fused``: what could have
    been and why not (the statements then run as they were, in kernels of their own).
    """

    kernel: str
    insn_ids: tuple[str, ...]
    outputs: tuple[str, ...]
    einsum: str
    canonical_key: str
    action: Action
    rung: str
    recipe: str | None = None
    recipe_version: str | None = None
    params: Mapping[str, Any] | None = None
    expected_gflops: float | None = None
    record_id: str | None = None
    record_lengths: Mapping[str, int] | None = None
    note: str = ""
    #: the elementwise work computed in the einsum's loads and stores (kernel names)
    fused: tuple[str, ...] = ()
    #: elementwise work that could have been fused and was not, and why
    not_fused: tuple[str, ...] = ()

    @property
    def transformed(self) -> bool:
        return self.action in ("replayed", "tuned", "default")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["params"] = None if self.params is None else dict(self.params)
        d["record_lengths"] = None if self.record_lengths is None else dict(self.record_lengths)
        d["fused"], d["not_fused"] = list(self.fused), list(self.not_fused)
        return d


@dataclass(frozen=True)
class KernelReport:
    """One kernel of the program.

    ``prepared``: the rewrites :func:`feinsum.matching.prepare_kernel` made before matching
    (constant loop bounds, loops that run once, reductions moved out of elementwise
    expressions...); ``rejected``: statement id -> why a statement with a reduction is
    not an einsum feinsum can hold (it is left as it was); ``scheduled``: how many units
    of other statements got the default parallel schedule; ``action``: ``"transformed"``
    (einsums transformed), ``"scheduled"`` (no einsum, every statement given the default
    schedule: ``schedule_all=True``), ``"unchanged"`` or ``"reverted"`` (the assembled
    kernel failed a check: the kernel is kept as it was, ``note`` says why).
    """

    name: str
    action: Literal["transformed", "scheduled", "unchanged", "reverted"]
    prepared: tuple[str, ...] = ()
    rejected: Mapping[str, str] = field(default_factory=dict)
    scheduled: int = 0
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rejected"] = dict(self.rejected)
        d["prepared"] = list(self.prepared)
        return d


class HookWarning(UserWarning):
    """The hook could not transform a program and left it as it was (the warning says
    why)."""


#: The phases of :func:`feinsum.transform_program` that ``HookReport.timings`` times.
PHASES = ("cache", "wait", "setup", "matching", "lookup", "transformation", "scheduling",
          "checks")


@dataclass(frozen=True)
class HookReport:
    """The groups found in every kernel, in program order.

    ``cached``: this answer came from one of the hook's caches, ``cache`` says which
    (``"memory"``: this process saw the program before; ``"disk"``: the persistent cache of
    transformed programs; None: transformed now). ``timings``: seconds per phase of this
    call (:data:`PHASES`: looking up and writing the caches; waiting for another process
    transforming the same program (:func:`feinsum.transform_program`); opening the device, the
    database and the recipes; matching; database lookups; building and assembling the
    transformed einsums; the default schedule of the other statements; the whole-program
    check, loopy's linearization and code generation, which the call then reuses).
    ``mode``: ``"transform"``, or ``"schedule"`` for a program that runs once (only the
    default schedule). ``before``/``after``: the size of the changed kernels (statements,
    statements once unrolled, global barriers) untransformed and as returned.

    :attr:`launches` and :attr:`untransformed_launches` list the device kernels of the
    program after and before the hook (:mod:`feinsum.hook.launches`: launch grids, the
    global temporaries each writes and their bytes), so that what the hook added shows;
    they are computed when first asked for (a linearization of each program).
    """

    device: str
    database: str | None
    groups: tuple[GroupReport, ...] = ()
    cached: bool = False
    seconds: float = 0.0
    kernels: tuple[str, ...] = field(default=())
    kernel_reports: tuple[KernelReport, ...] = field(default=())
    note: str = ""
    cache: str | None = None
    timings: Mapping[str, float] = field(default_factory=dict)
    mode: str = "transform"
    before: Mapping[str, int] = field(default_factory=dict)
    after: Mapping[str, int] = field(default_factory=dict)
    programs: LazyLaunches | None = field(default=None, compare=False, repr=False)

    @property
    def launches(self) -> Launches | None:
        """The device kernels of the transformed program (None: not known)."""
        return None if self.programs is None else self.programs.get()[1]

    @property
    def untransformed_launches(self) -> Launches | None:
        """The device kernels of the program the hook was given."""
        return None if self.programs is None else self.programs.get()[0]

    @property
    def transformed(self) -> int:
        """How many groups were transformed."""
        return sum(g.transformed for g in self.groups)

    @property
    def changed(self) -> bool:
        """Whether any kernel was changed (an einsum transformed, or statements given the
        default schedule)."""
        return any(k.action in ("transformed", "scheduled") for k in self.kernel_reports)

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "database": self.database, "cached": self.cached,
                "cache": self.cache, "note": self.note, "mode": self.mode,
                "seconds": self.seconds, "timings": dict(self.timings),
                "before": dict(self.before), "after": dict(self.after),
                "kernels": list(self.kernels),
                "groups": [g.as_dict() for g in self.groups],
                "kernel_reports": [k.as_dict() for k in self.kernel_reports],
                "launches": None if self.launches is None else self.launches.as_dict(),
                "untransformed_launches": None if self.untransformed_launches is None
                else self.untransformed_launches.as_dict()}

    def __str__(self) -> str:
        head = (f"feinsum hook on {self.device}: {len(self.groups)} einsum groups in "
                f"{len(self.kernels)} kernels, {self.transformed} transformed"
                + (f" (from the {self.cache} cache)" if self.cached and self.cache
                   else " (cached)" if self.cached else "")
                + (" [runs once: default schedule only]" if self.mode == "schedule" else ""))
        lines = [head] + ([f"  {self.note}"] if self.note else [])
        if self.timings:
            lines.append(f"  {self.seconds:.3f} s: " + ", ".join(
                f"{k} {v:.3f}" for k, v in self.timings.items() if v >= 0.0005))
        if self.before and self.after:
            lines.append("  size: " + ", ".join(
                f"{k} {self.before.get(k, 0)} -> {self.after.get(k, 0)}" for k in self.after))
        for g in self.groups:
            what = g.action if g.recipe is None else f"{g.action} {g.recipe}"
            speed = "" if g.expected_gflops is None else f", ~{g.expected_gflops:.3g} GFLOP/s"
            note = f" [{g.note}]" if g.note else ""
            lines.append(f"  {g.kernel}:{'+'.join(g.insn_ids)} {g.einsum}: {what} "
                         f"(rung {g.rung}{speed}){note}")
            lines += [f"    fused: {f}" for f in g.fused]
            lines += [f"    {f}" for f in g.not_fused]
        for k in self.kernel_reports:
            if k.action == "reverted":
                lines.append(f"  kernel {k.name}: reverted to the untransformed kernel "
                             f"[{k.note}]")
            if k.scheduled:
                lines.append(f"  kernel {k.name}: {k.scheduled} units of other statements "
                             "given the default parallel schedule")
            for insn_id, why in k.rejected.items():
                lines.append(f"  kernel {k.name}: statement {insn_id} not an einsum: {why}")
        lines += self.launch_lines()
        return "\n".join(lines)

    def launch_lines(self) -> list[str]:
        """The device kernels before and after, as :meth:`__str__` prints them."""
        after, before = self.launches, self.untransformed_launches
        if after is None or before is None:
            return []
        lines = [f"  device kernels: {after.summary()} (untransformed: {before.summary()})"]
        lines += after.lines() + ([f"    [{after.note}]"] if after.note else [])
        lines += ["  untransformed:", *before.lines()]
        return lines + ([f"    [{before.note}]"] if before.note else [])


class Clock:
    """Seconds per phase (:data:`PHASES`); phases nest: an inner phase's time is not
    counted in the outer one."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._stack: list[str] = []
        self._since = time.perf_counter()

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        self._switch()
        self._stack.append(phase)
        try:
            yield
        finally:
            self._switch()
            self._stack.pop()

    def _switch(self) -> None:
        now = time.perf_counter()
        if self._stack:
            self.seconds[self._stack[-1]] += now - self._since
        self._since = now

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 6) for k, v in self.seconds.items()}
