"""The figure of ``feinsum report``: one roofline per device and dtype (matplotlib, Agg).

Each panel: the memory roof up to the ridge, the compute roof from it, the ridge marked;
every einsum and lengths a numbered point (its fastest record), the untransformed kernel
(hollow circle, drawn just left of it) and the fastest peer (hollow diamond, just right),
each with an arrow to the point labelled with the speed-up; the user's latest records
ringed; axes fitted to the data; the legend outside, right of the plot. Labels are placed
where they overlap no other label or marker, where the plot leaves such a place.
"""

from __future__ import annotations

import io
import itertools
import math
from typing import TYPE_CHECKING, Any

from feinsum.cli.common import fmt_rate
from feinsum.errors import FeinsumError

if TYPE_CHECKING:
    from feinsum.cli.report_data import Panel, Point

#: How far left (untransformed) and right (peer) of a point its references are drawn, in
#: points on the page (the intensity is the same: the same computation).
_BESIDE = 11.0
_PANEL_HEIGHT = 4.8
_LABEL_CHARS = 60
_TIMES = "\N{MULTIPLICATION SIGN}"
#: The colour of what is wrong: a suspicious roofline, a point above its roof.
_WARN = "#c0392b"


def _wrap(text: str, width: int = 70) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise FeinsumError("the roofline plot needs matplotlib: pip install 'feinsum[plot]' "
                           "(or pass --no-plot)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def render(panels: list[Panel], title: str, fmt: str, dpi: int = 130) -> bytes:
    """The figure of *panels* as *fmt* (``png`` or ``svg``) bytes."""
    plt = _pyplot()
    n = max(len(panels), 1)
    height = 0.8 + _PANEL_HEIGHT * n
    fig, axes = plt.subplots(n, 1, figsize=(13.0, height), squeeze=False)
    fig.subplots_adjust(left=0.07, right=0.57, top=1 - 0.75 / height, bottom=0.45 / height,
                        hspace=0.38 * 4.8 / _PANEL_HEIGHT)
    fig.suptitle(title, x=0.07, y=1 - 0.18 / height, ha="left", va="top", fontsize=14,
                 fontweight="bold")
    for ax, panel in zip(axes[:, 0], panels, strict=False):
        _draw(ax, panel)
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no records", ha="center", va="center",
                        transform=axes[0, 0].transAxes)
        axes[0, 0].set_axis_off()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight", pad_inches=0.25,
                metadata={"Date": None} if fmt == "svg" else None)
    plt.close(fig)
    return buf.getvalue()


# {{{ labels that do not overlap


class _Labels:
    """Greedy placement of text labels in display space: each label takes the first of its
    candidate offsets whose box meets no box placed before (markers, other labels)."""

    def __init__(self, ax: Any) -> None:
        self.ax = ax
        self.px = ax.figure.dpi / 72.0
        self.boxes: list[tuple[float, float, float, float]] = []

    def block(self, x: float, y: float, radius: float = 5.0) -> None:
        """A marker of *radius* points at data (x, y)."""
        cx, cy = self.ax.transData.transform((x, y))
        r = radius * self.px
        self.boxes.append((cx - r, cy - r, cx + r, cy + r))

    def block_line(self, points: list[tuple[float, float]], width: float = 2.5) -> None:
        """A line through data *points*, as boxes along it."""
        xy = self.ax.transData.transform(points)
        w = width * self.px
        for (x0, y0), (x1, y1) in itertools.pairwise(xy):
            steps = max(1, int(math.hypot(x1 - x0, y1 - y0) / (4 * w)))
            for k in range(steps + 1):
                x, y = x0 + (x1 - x0) * k / steps, y0 + (y1 - y0) * k / steps
                self.boxes.append((x - w, y - w, x + w, y + w))

    def _box(self, anchor: Any, dx: float, dy: float, ha: str, va: str, text: str,
             size: float) -> tuple[float, float, float, float]:
        w, h = 0.6 * size * len(text) * self.px, 1.25 * size * self.px
        x, y = anchor[0] + dx * self.px, anchor[1] + dy * self.px
        x0 = {"left": x, "right": x - w, "center": x - w / 2}[ha]
        y0 = {"bottom": y, "top": y - h, "center": y - h / 2}[va]
        return x0, y0, x0 + w, y0 + h

    def place(self, text: str, xy: tuple[float, float],
              candidates: list[tuple[float, float, str, str]], size: float = 8.0,
              **kw: Any) -> None:
        anchor = self.ax.transData.transform(xy)
        left, bottom, right, top = self.ax.bbox.extents

        def cost(candidate: tuple[float, float, str, str]) -> float:
            box = self._box(anchor, *candidate, text, size)
            outside = not (box[0] >= left and box[2] <= right and box[1] >= bottom
                           and box[3] <= top)
            return 1e12 * outside + sum(_overlap(box, b) for b in self.boxes)

        # the first candidate that overlaps nothing, else the one that overlaps least
        costs = [cost(c) for c in candidates]
        free = [c for c, k in zip(candidates, costs, strict=True) if k == 0]
        dx, dy, ha, va = free[0] if free else candidates[costs.index(min(costs))]
        self.boxes.append(self._box(anchor, dx, dy, ha, va, text, size))
        self.ax.annotate(text, xy, xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                         fontsize=size, **kw)


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]
             ) -> float:
    """The area two boxes share."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3])
                                                            - max(a[1], b[1]))


_AROUND = [(6, 5, "left", "bottom"), (6, -5, "left", "top"), (-6, 5, "right", "bottom"),
           (-6, -5, "right", "top"), (0, 8, "center", "bottom"), (0, -8, "center", "top"),
           (10, 0, "left", "center"), (-10, 0, "right", "center"),
           (12, 12, "left", "bottom"), (-12, 12, "right", "bottom"),
           (12, -12, "left", "top"), (-12, -12, "right", "top")]


# }}}


def _limits(panel: Panel) -> tuple[float, float, float, float]:
    pts = [p for p in panel.points if p.intensity and p.gflops]
    xs = [p.intensity for p in pts if p.intensity]
    ys = [y for p in pts for y in (p.gflops, p.untransformed_gflops, p.peer_gflops) if y]
    peak, bw = panel.peak, panel.bandwidth
    if peak and bw:
        xs.append(peak / bw)
        ys.append(peak)
    xs = xs or [1.0]
    ys = ys or [1.0]
    xspan = max(2.5, math.sqrt(30 * min(xs) / max(xs)))  # at least a decade and a half
    return min(xs) / xspan, max(xs) * xspan, min(ys) / 3, max(ys) * 2.5


def _log_axis(axis: Any, lo: float, hi: float) -> None:
    """Plain numbers at the decades, and at 2 and 5 when the axis spans few decades."""
    from matplotlib import ticker

    def plain(v: float, _: Any) -> str:
        return f"{v:,.0f}" if v >= 1 else f"{v:.3g}"

    axis.set_major_formatter(ticker.FuncFormatter(plain))
    if math.log10(hi / lo) <= 2.5:
        axis.set_minor_locator(ticker.LogLocator(subs=(2.0, 5.0)))
        axis.set_minor_formatter(ticker.FuncFormatter(plain))
    else:
        axis.set_minor_formatter(ticker.NullFormatter())


def _draw(ax: Any, panel: Panel) -> None:
    from matplotlib.lines import Line2D

    xlo, xhi, ylo, yhi = _limits(panel)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(xlo, xhi)
    ax.set_ylim(ylo, yhi)
    _log_axis(ax.xaxis, xlo, xhi)
    _log_axis(ax.yaxis, ylo, yhi)
    ax.tick_params(which="both", labelsize=8.5)
    ax.grid(True, which="major", lw=0.6, color="#d4d4d4")
    ax.grid(True, which="minor", lw=0.3, color="#ececec")
    ax.set_axisbelow(True)
    ax.set_xlabel("arithmetic intensity (flop per byte of the arrays' footprint)")
    ax.set_ylabel("GFLOP/s (cheapest contraction order)")
    head = f"{panel.device_name}  \N{MIDDLE DOT}  {panel.dtype}"
    labels = _Labels(ax)
    handles: list[Any] = []
    pts = [p for p in panel.points if p.intensity and p.gflops]
    for p in pts:  # markers first: labels keep off them
        labels.block(p.intensity, p.gflops, 6)  # type: ignore[arg-type]
        for ref in (p.untransformed_gflops, p.peer_gflops):
            if ref:
                labels.block(p.intensity, ref, 6 + _BESIDE)  # type: ignore[arg-type]
    suspicious = bool(panel.problems)
    if panel.peak and panel.bandwidth:
        _roof(ax, labels, panel.peak, panel.bandwidth, xlo, xhi, ylo, suspicious)
        handles.append(Line2D([], [], color=_WARN if suspicious else "black", lw=2,
                              ls="--" if suspicious else "-",
                              label=f"roofline: {fmt_rate(panel.bandwidth)} GB/s memory, "
                              f"{fmt_rate(panel.peak)} GFLOP/s {panel.dtype} peak"))
    else:
        head += "  (no roofline measured: `feinsum devices --roofline` measures it)"
    if suspicious:
        head += "  \N{WARNING SIGN} suspicious roofline"
        handles.append(Line2D([], [], ls="", label=_wrap(
            "\N{WARNING SIGN} suspicious roofline: " + "; ".join(panel.problems))))
    ax.set_title(head, loc="left", fontsize=11.5, color=_WARN if suspicious else "black")
    grey = "#555555"
    handles += [
        Line2D([], [], ls="", marker="o", ms=8, color=grey,
               label="feinsum's fastest record, numbered as below"),
        Line2D([], [], ls="", marker="o", ms=7, mfc="white", mew=1.4, color=grey,
               label=f"untransformed kernel (beside it, left); arrow: speed-up {_TIMES}"),
    ]
    if any(p.peer_seconds for p in pts):
        handles.append(Line2D([], [], ls="", marker="D", ms=6, mfc="white", mew=1.4,
                              color=grey, label="fastest peer: numpy, torch... (right)"))
    if any(p.latest for p in pts):
        handles.append(Line2D([], [], ls="", marker="o", ms=13, mfc="none", mew=1.6,
                              color="black", label="your latest records"))
    if any(p.above_roof for p in pts):
        handles.append(Line2D([], [], ls="", marker="^", ms=15, mfc="none", mew=1.6,
                              color=_WARN, label="above its roof (why: after its name)"))
    colors = _colors(len(panel.points))
    mixed = len({p.source for p in panel.points}) > 1
    numbered = []
    for k, (p, c) in enumerate(zip(panel.points, colors, strict=True), 1):
        if not (p.intensity and p.gflops):
            continue
        numbered.append((k, p, c))
        _point(ax, labels, p, c)
        label = p.einsum + ("" if p.lengths == "-" else f"  {p.lengths}")
        if len(label) > _LABEL_CHARS:
            label = label[: _LABEL_CHARS - 1] + "\N{HORIZONTAL ELLIPSIS}"
        suffix = " (shipped)" if mixed and p.source == "shipped" else ""
        if p.above_roof is not None:
            suffix += f"  \N{WARNING SIGN} above its roof: {p.above_roof[0]}"
        handles.append(Line2D([], [], ls="", marker="o", ms=8, color=c,
                              label=f"{k:>2}  {label}  [{p.recipe}]{suffix}"))
    for k, p, _ in numbered:
        labels.place(str(k), (p.intensity, p.gflops), _AROUND,  # type: ignore[arg-type]
                     size=8.5, fontweight="bold", color="#222222", zorder=6)
    for _, p, c in numbered:
        _speedups(labels, p, c)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0.0, fontsize=8.3, frameon=False, handletextpad=0.5,
              labelspacing=0.55)


def _roof(ax: Any, labels: _Labels, peak: float, bw: float, xlo: float, xhi: float,
          ylo: float, suspicious: bool = False) -> None:
    ridge = peak / bw
    x0 = max(xlo, ylo / bw)
    ax.plot([x0, ridge, xhi], [x0 * bw, peak, peak], color=_WARN if suspicious else "black",
            lw=2, ls="--" if suspicious else "-", solid_joinstyle="miter", zorder=2)
    ax.plot([ridge, ridge], [ylo, peak], color="#888888", lw=1, ls=":", zorder=1)
    labels.block_line([(x0, x0 * bw), (ridge, peak), (xhi, peak)])
    labels.place(f"ridge {ridge:.3g} flop/B", (ridge, ylo),
                 [(4, 4, "left", "bottom"), (-4, 4, "right", "bottom")], size=7.5,
                 color="#666666")
    labels.place(f"peak {fmt_rate(peak)} GFLOP/s", (xhi, peak),
                 [(-6, 4, "right", "bottom"), (-6, -4, "right", "top")], size=8.5)
    # the memory roof's label along it, at its angle on the page, where it fits
    text = f"memory {fmt_rate(bw)} GB/s"
    xm = x0 * 1.4
    (ax0, ay0), (ax1, ay1) = ax.transData.transform([(xm, xm * bw), (ridge, peak)])
    room = math.hypot(ax1 - ax0, ay1 - ay0) / labels.px  # points
    if room > 0.62 * 8.5 * len(text) + 6:
        angle = math.degrees(math.atan2(ay1 - ay0, ax1 - ax0))
        ax.annotate(text, (xm, xm * bw), xytext=(0, 4), textcoords="offset points",
                    rotation=angle, rotation_mode="anchor", fontsize=8.5, ha="left",
                    va="bottom")


def _beside(ax: Any, side: float) -> Any:
    from matplotlib.transforms import offset_copy

    return offset_copy(ax.transData, fig=ax.figure, x=side * _BESIDE, y=0.0, units="points")


def _point(ax: Any, labels: _Labels, p: Point, color: Any) -> None:
    x, y = p.intensity, p.gflops
    if not (x and y):
        return
    for ref, side, marker in ((p.untransformed_gflops, -1.0, "o"), (p.peer_gflops, 1.0, "D")):
        if not ref:
            continue
        where = _beside(ax, side)
        ax.plot([x], [ref], ls="", marker=marker, ms=7 if marker == "o" else 6, mfc="white",
                mec=color, mew=1.4, zorder=3, transform=where)
        ax.annotate("", (x, y), (x, ref), textcoords=where, zorder=2,
                    arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1.1,
                                "shrinkA": 4, "shrinkB": 5, "mutation_scale": 9})
        labels.block_line([(x, ref), (x, y)], width=2.0)
    ax.plot([x], [y], ls="", marker="o", ms=8, color=color, mec="white", mew=0.8, zorder=4)
    if p.above_roof is not None:
        ax.plot([x], [y], ls="", marker="^", ms=15, mfc="none", mec=_WARN, mew=1.6, zorder=4)
    if p.latest:
        ax.plot([x], [y], ls="", marker="o", ms=13, mfc="none", mec="black", mew=1.6,
                zorder=4)


def _speedups(labels: _Labels, p: Point, color: Any) -> None:
    """The speed-up over each reference, written on its arrow."""
    x, y = p.intensity, p.gflops
    if not (x and y):
        return
    for ref, side in ((p.untransformed_gflops, -1.0), (p.peer_gflops, 1.0)):
        if not ref:
            continue
        ratio = y / ref
        text = (f"{ratio:.2g}" if ratio < 10 else f"{ratio:.0f}") + _TIMES
        at = (x, math.sqrt(y * ref))
        arrow = side * _BESIDE / 2  # the arrow's middle, from the point's x (points)
        outward = (arrow + side * 4, "right" if side < 0 else "left")
        inward = (arrow - side * 4, "left" if side < 0 else "right")
        steps = (0.0, 9.0, -9.0, 18.0, -18.0, 27.0, -27.0, 36.0, -36.0)
        cands = [(dx, dy, ha, "center") for dx, ha in (outward, inward) for dy in steps]
        labels.place(text, at, cands, size=7.5, color=color, fontweight="bold", zorder=6)


def _colors(n: int) -> list[Any]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


# vim: foldmethod=marker
