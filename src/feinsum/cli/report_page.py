"""The HTML page of ``feinsum report``: self-contained (the figure as a ``data:`` URI, inline
style and script, nothing fetched from anywhere) with a table sortable by every column."""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feinsum.cli.report_data import Panel, Point

#: (header, short header for terminals, value of a point, sorts as a number) of every
#: column of the tables.
COLUMNS: Sequence[tuple[str, str, Callable[[Point], Any], bool]] = (
    ("device", "device", lambda p: p.device_name, False),
    ("dtype", "dtype", lambda p: p.dtype, False),
    ("einsum", "einsum", lambda p: p.einsum, False),
    ("lengths", "lengths", lambda p: p.lengths, False),
    ("recipe", "recipe", lambda p: p.recipe, False),
    ("GFLOP/s", "GFLOP/s", lambda p: p.gflops, True),
    ("% of roof", "roof", lambda p: None if p.fraction is None else 100 * p.fraction, True),
    ("untransformed GFLOP/s", "untransf.", lambda p: p.untransformed_gflops, True),
    ("speed-up", "speed-up", lambda p: p.speedup, True),
    ("fastest peer", "peer", lambda p: p.peer, False),
    ("vs peer", "vs peer", lambda p: p.vs_peer, True),
    ("measured (UTC)", "measured", lambda p: p.measured_at.strftime("%Y-%m-%d %H:%M"), False),
    ("record", "record", lambda p: p.record, False),
    ("note", "note", lambda p: None if p.above_roof is None
     else f"above its roof: {p.above_roof[1]}", False),
)

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em 2em;
color:#222}
h1{font-size:1.4em;margin-bottom:.2em}p.meta{color:#666;margin-top:0}
img.roofline{max-width:100%;height:auto;border:1px solid #ddd}
div.table{overflow-x:auto;margin-top:1.2em}
table{border-collapse:collapse;font-size:.85em}
th,td{border-bottom:1px solid #e2e2e2;padding:.3em .55em;text-align:left;white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums}
th{cursor:pointer;user-select:none;background:#f4f4f4;position:sticky;top:0}
th:hover{background:#e8e8ee}
th[aria-sort=ascending]::after{content:" \\25B2"}
th[aria-sort=descending]::after{content:" \\25BC"}
tr.latest td:first-child{border-left:3px solid #333}
tr.above td{color:#c0392b}p.warning{color:#c0392b;font-weight:600;margin:.3em 0}
"""

# Sort by a header's column on click (again: reverse); numbers by their data-value, empty
# cells last.
_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var ascending = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var numeric = th.dataset.type === "num";
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var cell = row.cells[col];
        return numeric ? cell.dataset.value : cell.textContent;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === "" || x === undefined) { return y === "" || y === undefined ? 0 : 1; }
        if (y === "" || y === undefined) { return -1; }
        var c = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
        return ascending ? c : -c;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def cell_text(value: Any) -> str:
    """A table cell: numbers to three significant digits, None as a dash."""
    from feinsum.cli.common import fmt_rate

    if value is None or isinstance(value, float):
        return fmt_rate(value)
    return str(value)


def page(title: str, meta: str, panels: list[Panel], image: bytes | None,
         warnings: Sequence[str] = (), image_type: str = "image/png") -> str:
    """The HTML text of a report; *warnings*: what is wrong in it, one line each."""
    esc = html.escape
    heads = "".join(f'<th data-type="{"num" if num else "text"}" scope="col">{esc(h)}</th>'
                    for h, _, _, num in COLUMNS)
    rows = []
    for p in (p for panel in panels for p in panel.points):
        cells = []
        for _, _, get, num in COLUMNS:
            v = get(p)
            if num:
                value = "" if v is None else repr(float(v))
                cells.append(f'<td class="num" data-value="{value}">{esc(cell_text(v))}</td>')
            else:
                cells.append(f"<td>{esc(cell_text(v))}</td>")
        cls = " ".join(c for c, on in (("latest", p.latest), ("above", p.above_roof))
                       if on)
        cls = f' class="{cls}"' if cls else ""
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    figure = ""
    if image is not None:
        data = base64.b64encode(image).decode("ascii")
        figure = (f'<img class="roofline" alt="rooflines of {esc(title)}" '
                  f'src="data:{image_type};base64,{data}">')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>feinsum report</h1><p class=\"meta\">{esc(meta)}</p>"
        + "".join(f'<p class="warning">{esc(w)}</p>' for w in warnings) + f"{figure}"
        f'<div class="table"><table class="sortable"><thead><tr>{heads}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
        f"<script>{_SCRIPT}</script></body></html>\n"
    )
