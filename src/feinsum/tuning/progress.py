"""Progress display of a tuning run (rich): a bar with the best-so-far GFLOP/s, the
failures and the time left; the final table."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feinsum.timing.measurement import Measurement
    from feinsum.tuning.session import TuningResult


class Progress:
    """A live progress bar (a no-op when *enabled* is false)."""

    def __init__(self, enabled: bool, total: int | None, time_limit: float | None,
                 title: str) -> None:
        self.enabled = enabled
        self.total = total
        self.time_limit = time_limit
        self.t0 = time.monotonic()
        self.done = 0
        self.failures = 0
        self.best_gflops: float | None = None
        self._bar: Any = None
        self._task: Any = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("best {task.fields[best]}"),
                TextColumn("failures {task.fields[failures]}"),
                TextColumn("{task.fields[elapsed]} elapsed, {task.fields[left]} left"),
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(title, total=total, best="-", failures=0,
                                            elapsed="0:00", left="?")

    def time_left(self) -> float | None:
        """Seconds left: by the time limit, or estimated from the rate and the budget."""
        elapsed = time.monotonic() - self.t0
        left = None if self.time_limit is None else max(0.0, self.time_limit - elapsed)
        if self.total is not None and self.done:
            est = elapsed / self.done * max(0, self.total - self.done)
            left = est if left is None else min(left, est)
        return left

    def update(self, m: Measurement | None = None, *, previous: int = 0) -> None:
        if m is not None:
            self.done += 1
            if not m.ok:
                self.failures += 1
            elif m.gflops is not None and (self.best_gflops is None or m.gflops > self.best_gflops):
                self.best_gflops = m.gflops
        if self._bar is None:
            return
        left = self.time_left()
        self._bar.update(
            self._task, completed=self.done + previous,
            best="-" if self.best_gflops is None else f"{self.best_gflops:.2f} GFLOP/s",
            failures=self.failures, elapsed=_clock(time.monotonic() - self.t0),
            left="?" if left is None else _clock(left),
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60}:{s % 60:02d}"


def result_table(result: TuningResult) -> Any:
    """A rich Table: the best configuration per recipe, the untransformed kernel and the
    peers, with speed-ups over the untransformed kernel and the fastest peer."""
    from rich.table import Table

    t = Table(title=f"{result.title}  ({result.device_name})")
    for col in ("", "evaluated", "failed", "min ms", "GFLOP/s", "roofline",
                "vs untransformed", "vs fastest peer", "configuration"):
        t.add_column(col, justify="left" if col in ("", "configuration") else "right")
    base = result.baseline.seconds if result.baseline and result.baseline.ok else None
    peer = result.fastest_peer
    peer_s = result.peers[peer] if peer else None

    def ratio(ref: float | None, s: float | None) -> str:
        return "-" if ref is None or s is None or s <= 0 else f"{ref / s:.2f}x"

    for name, stats in sorted(result.recipe_stats.items()):
        m = result.best_per_recipe.get(name)
        s = m.seconds if m else None
        t.add_row(
            name, str(stats["evaluated"]), str(stats["failed"]),
            "-" if s is None else f"{s * 1e3:.3f}",
            "-" if m is None or m.gflops is None else f"{m.gflops:.2f}",
            _percent(m.roofline_fraction if m else None),
            ratio(base, s), ratio(peer_s, s),
            "-" if m is None else _params_text(m.params),
        )
    if result.baseline is not None:
        b = result.baseline
        t.add_row("untransformed", "1", "0" if b.ok else "1",
                  "-" if b.seconds is None else f"{b.seconds * 1e3:.3f}",
                  "-" if b.gflops is None else f"{b.gflops:.2f}",
                  _percent(b.roofline_fraction),
                  "1.00x" if b.ok else "-", ratio(peer_s, b.seconds), b.status if not b.ok else "")
    for name, s in sorted(result.peers.items(), key=lambda kv: kv[1]):
        g = result.flops / s / 1e9 if result.flops and s > 0 else None
        t.add_row(name + " (peer)", "", "", f"{s * 1e3:.3f}", "-" if g is None else f"{g:.2f}",
                  "", ratio(base, s), ratio(peer_s, s), "host wall time")
    if result.roofline is not None and result.roofline.problems:
        t.caption = ("roofline suspicious (`feinsum devices --roofline` measures it again): "
                     + "; ".join(result.roofline.problems))
    return t


def _percent(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _params_text(params: dict[str, Any], limit: int = 60) -> str:
    text = ", ".join(f"{k}={v}" for k, v in params.items())
    return text if len(text) <= limit else text[: limit - 3] + "..."
