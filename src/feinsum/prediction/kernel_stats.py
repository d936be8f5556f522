"""What the performance model reads of a transformed kernel: each device kernel's launch,
statements and memory accesses (:mod:`feinsum.prediction.kernels` reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from feinsum.prediction.accesses import Access


@dataclass(frozen=True)
class Statement:
    """One statement of a device kernel, at the lengths given."""

    id: str
    #: executions by warps (whole launch), by work-items, and by one warp (its loop trips)
    warp_runs: float
    item_runs: float
    serial_runs: float
    #: the rolled loops around it, and their iterations per warp
    loop: frozenset[str]
    loop_serial: float
    #: per work-item execution
    fp: float
    flops: float
    sfu: float
    other: float
    itemsize: int
    #: whether it reads what it writes (an accumulation: its executions form a chain)
    chain: bool
    #: independent copies of it in one loop body (unrolled loops whose copies write
    #: other places): a warp issues them back to back
    ilp: float = 1.0


@dataclass(frozen=True)
class DeviceKernel:
    """One device kernel: its launch and its statements."""

    name: str
    groups: int
    group_size: int
    local_bytes: int
    registers: int
    stack_bytes: int
    statements: tuple[Statement, ...]
    #: every memory access, the same address loaded in the same loop body counted once (as
    #: the compiler loads it once)
    accesses: tuple[Access, ...]
    #: barriers one work-group passes; iterations of rolled loops, all warps together
    barriers: float
    loop_iterations: float
    #: warp instructions of checks: a statement's predicates (once per predicate and loop
    #: body: the predicate's expression and a branch), the domain of each copy of an
    #: unrolled loop (:mod:`feinsum.prediction.guards`: a comparison and a branch); and
    #: local-array pointers advanced per rolled-loop iteration (all warps)
    check_instructions: float = 0.0
    pointer_increments: float = 0.0
    #: bytes of DRAM traffic: every global array its statements read, and every one they
    #: write, once (a later launch reads from DRAM what an earlier one wrote)
    dram_bytes: float = 0.0


@dataclass(frozen=True)
class KernelStats:
    """Every device kernel of a translation unit, its DRAM footprint, and what was not
    counted exactly (notes)."""

    kernels: tuple[DeviceKernel, ...]
    dram_bytes: float
    notes: tuple[str, ...]
