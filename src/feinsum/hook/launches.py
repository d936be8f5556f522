"""What a loopy program runs on the device: its launches (device kernels), each with its
launch grid and the global temporaries it writes, from loopy's linearization.

A global temporary is allocated at every call of the program (from the context's
allocator) and written by one launch, read by later ones: what the hook adds to a program
shows as launches and temporaries the untransformed program did not have.
:class:`~feinsum.hook.HookReport` holds the :class:`Launches` of the program before and
after the hook, computed when first asked for from the linearization the call makes
(:func:`feinsum.hook.check.linearized`: the transformed program's is in loopy's caches
once the hook has checked it; the untransformed program's costs one linearization).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Launch:
    """One device kernel of a program: the loopy kernel it belongs to, its name, its launch
    grid (work-groups and work-items per group, per axis; text where a length is only known
    at the call), the global temporaries it writes (name, bytes or None) and its statements."""

    kernel: str
    name: str
    groups: tuple[int | str, ...]
    work_items: tuple[int | str, ...]
    writes: tuple[tuple[str, int | None], ...]
    statements: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "name": self.name, "groups": list(self.groups),
                "work_items": list(self.work_items),
                "writes": [{"temporary": n, "bytes": b} for n, b in self.writes],
                "statements": list(self.statements)}


@dataclass(frozen=True)
class Launches:
    """The launches of a program, in order, and the global temporaries it allocates per call
    (name -> bytes, None where a length is only known at the call); *note*: why the list is
    empty or approximate."""

    launches: tuple[Launch, ...] = ()
    temporaries: tuple[tuple[str, int | None], ...] = ()
    note: str = ""

    @property
    def temporary_bytes(self) -> int | None:
        sizes = [b for _, b in self.temporaries]
        return None if any(b is None for b in sizes) else sum(b for b in sizes if b)

    def summary(self) -> str:
        total = self.temporary_bytes
        size = "" if total is None or not self.temporaries else f", {_size(total)}"
        return (f"{len(self.launches)} launch{'es' if len(self.launches) != 1 else ''}, "
                f"{len(self.temporaries)} global temporar"
                f"{'ies' if len(self.temporaries) != 1 else 'y'}{size}")

    def lines(self, indent: str = "    ") -> list[str]:
        out = []
        for launch in self.launches:
            grid = "x".join(map(str, launch.groups or (1,)))
            items = "x".join(map(str, launch.work_items or (1,)))
            writes = ", ".join(f"{n} ({_size(b)})" for n, b in launch.writes) or "none"
            out.append(f"{indent}{launch.name}: {grid} groups of {items}; global temporaries "
                       f"written: {writes}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"launches": [x.as_dict() for x in self.launches],
                "temporaries": [{"temporary": n, "bytes": b} for n, b in self.temporaries],
                "note": self.note}


def _size(nbytes: int | None) -> str:
    if nbytes is None:
        return "size known at the call"
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 100_000 else f"{nbytes} B"


def program_launches(t_unit: Any) -> Launches:
    """The launches of every kernel of *t_unit* (see the module docstring); a program
    loopy cannot linearize gets none and a note saying why."""
    from loopy.kernel.function_interface import CallableKernel

    from feinsum.hook.check import linearized

    try:
        prog = linearized(t_unit)
    except Exception as exc:  # any loopy failure: no listing, say why
        return Launches(note=f"loopy cannot linearize it ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''})"[:300])
    if prog is None:
        return Launches(note="the program's types are only known at the call")
    launches: list[Launch] = []
    temps: dict[str, int | None] = {}
    for name, clbl in prog.callables_table.items():
        if not isinstance(clbl, CallableKernel) or name not in prog.entrypoints:
            continue
        knl = clbl.subkernel
        found = _kernel_launches(knl, prog.callables_table)
        launches += found
        for launch in found:
            temps.update(launch.writes)
    return Launches(tuple(launches), tuple(sorted(temps.items())))


def _kernel_launches(knl: Any, callables: Any) -> list[Launch]:
    from loopy.kernel.data import AddressSpace
    from loopy.schedule import CallKernel, get_insn_ids_for_block_at

    glob = {n: tv for n, tv in knl.temporary_variables.items()
            if tv.address_space == AddressSpace.GLOBAL}
    out = []
    lin = knl.linearization or []
    for k, item in enumerate(lin):
        if not isinstance(item, CallKernel):
            continue
        ids = get_insn_ids_for_block_at(lin, k)
        groups, items = knl.get_grid_sizes_for_insn_ids_as_exprs(ids, callables)
        written = sorted({v for i in ids for v in knl.id_to_insn[i].assignee_var_names()
                          if v in glob})
        out.append(Launch(knl.name, item.kernel_name, _exprs(groups), _exprs(items),
                          tuple((v, _bytes(glob[v])) for v in written),
                          tuple(sorted(ids))))
    return out


def _exprs(sizes: Any) -> tuple[int | str, ...]:
    out: list[int | str] = []
    for s in sizes:
        try:
            out.append(int(s))
        except (TypeError, ValueError):
            out.append(str(s))
    return tuple(out)


def _bytes(tv: Any) -> int | None:
    shape = tv.shape if isinstance(tv.shape, tuple) else ()
    if not all(isinstance(n, int) for n in shape) or tv.dtype is None:
        return None
    try:
        return math.prod(shape) * int(tv.dtype.numpy_dtype.itemsize)
    except AttributeError:  # no dtype inferred
        return None


class LazyLaunches:
    """The launches of a program before and after the hook, computed on first use (once,
    whatever thread asks)."""

    def __init__(self, before: Any, after: Any) -> None:
        self._programs: tuple[Any, Any] | None = (before, after)
        self._value: tuple[Launches, Launches] | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {"programs": self._programs, "value": self._value}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._programs, self._value = state["programs"], state["value"]
        self._lock = threading.Lock()

    def get(self) -> tuple[Launches, Launches]:
        with self._lock:
            if self._value is None:
                before, after = self._programs or (None, None)
                self._value = (program_launches(before), program_launches(after))
                self._programs = None
            return self._value
