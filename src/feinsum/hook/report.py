"""What :func:`feinsum.transform_program` did, per statement group: frozen dataclasses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeAlias

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

    @property
    def transformed(self) -> bool:
        return self.action in ("replayed", "tuned", "default")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["params"] = None if self.params is None else dict(self.params)
        d["record_lengths"] = None if self.record_lengths is None else dict(self.record_lengths)
        return d


@dataclass(frozen=True)
class HookReport:
    """The groups found in every kernel, in program order; ``cached``: this answer came from
    the hook's cache (the program, device and database revision were seen before)."""

    device: str
    database: str | None
    groups: tuple[GroupReport, ...] = ()
    cached: bool = False
    seconds: float = 0.0
    kernels: tuple[str, ...] = field(default=())

    @property
    def transformed(self) -> int:
        """How many groups were transformed."""
        return sum(g.transformed for g in self.groups)

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "database": self.database, "cached": self.cached,
                "seconds": self.seconds, "kernels": list(self.kernels),
                "groups": [g.as_dict() for g in self.groups]}

    def __str__(self) -> str:
        head = (f"feinsum hook on {self.device}: {len(self.groups)} einsum groups in "
                f"{len(self.kernels)} kernels, {self.transformed} transformed"
                + (" (cached)" if self.cached else ""))
        lines = [head]
        for g in self.groups:
            what = g.action if g.recipe is None else f"{g.action} {g.recipe}"
            speed = "" if g.expected_gflops is None else f", ~{g.expected_gflops:.3g} GFLOP/s"
            note = f" [{g.note}]" if g.note else ""
            lines.append(f"  {g.kernel}:{'+'.join(g.insn_ids)} {g.einsum}: {what} "
                         f"(rung {g.rung}{speed}){note}")
        return "\n".join(lines)
