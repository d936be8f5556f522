"""What the user of a campaign sees: a progress bar per job and per worker while it runs,
the table of every job at the end."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feinsum.campaigns.run import CampaignResult


class CampaignProgress:
    """Live rich progress bars (a no-op when *enabled* is false): one per assignment (a job
    on a device identity), one per worker."""

    def __init__(self, enabled: bool, console: Any = None) -> None:
        self.enabled = enabled
        self._bar: Any = None
        self._jobs: dict[int, Any] = {}
        self._workers: dict[str, Any] = {}
        self._counts: dict[str, int] = {}
        self._best: dict[int, float] = {}
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(bar_width=24),
                MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
                console=console, transient=False)
            self._bar.start()

    def add_job(self, index: int, label: str, total: int | None) -> None:
        if self._bar is not None:
            self._jobs[index] = self._bar.add_task(f"job {label}", total=total, note="queued")

    def started(self, index: int, worker: str) -> None:
        self._note(index, f"on {_short(worker)}")
        if self._bar is not None and worker not in self._workers:
            self._workers[worker] = self._bar.add_task(
                f"[bold]worker {_short(worker)}", total=None, note="")
        self._worker_note(worker, f"job {index + 1}")

    def measured(self, index: int, worker: str, gflops: float | None) -> None:
        self._counts[worker] = self._counts.get(worker, 0) + 1
        if gflops is not None and gflops > self._best.get(index, 0.0):
            self._best[index] = gflops
        if self._bar is None:
            return
        self._bar.advance(self._jobs[index])
        best = self._best.get(index)
        self._note(index, f"on {_short(worker)}"
                   + (f", best {best:.2f} GFLOP/s" if best is not None else ""))
        if worker in self._workers:
            self._bar.update(self._workers[worker], completed=self._counts[worker])

    def finished(self, index: int, note: str, worker: str | None) -> None:
        if self._bar is not None:
            task = self._jobs[index]
            total = self._bar.tasks[task].total
            if total is not None:
                self._bar.update(task, completed=total)
        self._note(index, note)
        if worker is not None:
            self._worker_note(worker, "idle")

    def _note(self, index: int, note: str) -> None:
        if self._bar is not None and index in self._jobs:
            self._bar.update(self._jobs[index], note=note)

    def _worker_note(self, worker: str, note: str) -> None:
        if self._bar is not None and worker in self._workers:
            self._bar.update(self._workers[worker], note=note)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _short(address: str) -> str:
    return address.split("://", 1)[-1]


def campaign_table(result: CampaignResult) -> Any:
    """A rich Table of every job: its device, the best recipe and time, the speed-up over
    the fastest peer, the measurements it took."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=f"campaign: {len(result.jobs)} jobs, {len(result.failed)} failed, "
                    f"{result.elapsed:.0f} s")
    for col in ("line", "einsum", "device", "status", "best recipe", "min ms", "GFLOP/s",
                "vs peer", "measured", "worker"):
        t.add_column(col, justify="right" if col in ("line", "min ms", "GFLOP/s", "vs peer",
                                                     "measured") else "left")
    for j in result.jobs:
        s = j.seconds
        ratio = j.speedup_over_peer
        t.add_row(
            str(j.line), Text(j.label), Text(j.device), Text(j.status if j.ok else
                                                             f"{j.status}: {j.message}"),
            Text(j.best_recipe or "-"), "-" if s is None else f"{s * 1e3:.4g}",
            "-" if j.gflops is None else f"{j.gflops:.2f}",
            "-" if ratio is None else f"{ratio:.2f}x ({j.peer})",
            f"{j.evaluated} (+{j.previous} before)", Text(_short(j.worker or "-")))
    return t
