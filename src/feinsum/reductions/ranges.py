"""Block-sparse *ranges* in KeOps' format, computed with numpy.

A block-sparse kernel reduction ``a_i = Red_{j : (c(i), c(j)) kept} F(x_i, y_j)`` restricts
the reduction to pairs of *clusters* of the two point clouds. KeOps describes the
restriction with a 6-tuple of integer arrays, and so does feinsum (the same arrays, so
code written for ``pykeops`` ports unchanged)::

    ranges_i, slices_i, redranges_j, ranges_j, slices_j, redranges_i

* ``ranges_i`` ``(Ci, 2)``: cluster ``k`` of the output points is rows
  ``ranges_i[k, 0] <= i < ranges_i[k, 1]`` (the points sorted by cluster, see
  :func:`sort_clusters`);
* ``slices_i`` ``(Ci,)``: cumulative counts; the reduction ranges of cluster ``k`` are
  ``redranges_j[slices_i[k-1]:slices_i[k]]`` (``slices_i[-1]`` read as 0 for ``k = 0``);
* ``redranges_j`` ``(P, 2)``: ``[start, end)`` of the reduction points each kept pair
  reads, so ``P`` is the number of kept cluster pairs;
* ``ranges_j, slices_j, redranges_i``: the same for the transposed reduction (over
  ``i``, producing one value per ``j``).

A reduction over ``j`` uses the first three arrays; a reduction over ``i`` uses the last
three (:func:`swap_axes` exchanges the halves). pykeops 2.3 produces ``int64`` arrays;
every function here accepts ``int32`` and ``int64`` and returns the dtype asked for
(``int64`` by default).

Typical use (a Gaussian kernel truncated where clusters are far apart)::

    lab_x = grid_cluster(x, 0.1);  x_s, lab_x = sort_clusters(x, lab_x)
    lab_y = grid_cluster(y, 0.1);  y_s, lab_y = sort_clusters(y, lab_y)
    rx, cx, _ = cluster_ranges_centroids(x_s, lab_x)
    ry, cy, _ = cluster_ranges_centroids(y_s, lab_y)
    ci, cj = pairs_within(cx, cy, cutoff)          # sparse: linear in kept pairs
    ranges = from_pairs(rx, ry, ci, cj)            # or from_matrix(rx, ry, keep)

Everything is linear in the number of points plus the number of kept cluster pairs
(the dense ``(Ci, Cj)`` mask of :func:`from_matrix` is read once when given dense;
a ``scipy.sparse`` mask or a pair list never makes a dense grid).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import pymbolic.primitives as prim

from feinsum.errors import ShapeError

#: names of the extra inputs, in argument order, and of their lengths
RANGE_ARGS = ("ranges_i", "slices_i", "redranges_j")
RANGE_LENGTHS = ("nranges_i", "nredranges_j")
RANGE_DTYPE = np.dtype(np.int32)

Ranges: TypeAlias = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def _index_dtype(dtype: Any) -> np.dtype[Any]:
    dt = np.dtype(dtype)
    if dt not in _INDEX_DTYPES:
        raise TypeError(f"ranges are int32 or int64, not {dt}")
    return dt


def _as_labels(lab: Any) -> np.ndarray:
    lab = np.asarray(lab).ravel()
    if lab.dtype.kind not in "iu":
        raise TypeError(f"labels must be integers, got {lab.dtype}")
    if lab.size and lab.min() < 0:
        raise ValueError("labels must be >= 0")
    return lab.astype(np.int64, copy=False)


def _as_points(x: Any) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise ShapeError(f"points are an (M, D) array, got shape {x.shape}")
    return x


def _as_ranges(r: Any, what: str) -> np.ndarray:
    r = np.asarray(r)
    if r.ndim != 2 or r.shape[1] != 2:
        raise ShapeError(f"{what} must have shape (C, 2), got {r.shape}")
    if r.dtype.kind not in "iu":
        raise TypeError(f"{what} must be an integer array, got {r.dtype}")
    return r


# {{{ clustering


def grid_cluster(x: Any, size: float | Sequence[float] | np.ndarray) -> np.ndarray:
    """Label each point of ``x`` (``(M, D)``, any ``D``) by the voxel of side ``size`` it lies in.

    ``size`` is a number or one number per dimension. Labels are ``0 .. C-1`` with ``C``
    the number of non-empty voxels, numbered in lexicographic order of the voxel
    coordinates. Runs in ``O(M log M)``.

    >>> grid_cluster(np.array([[0.05], [0.95], [0.1], [2.5]]), 1.0)
    array([0, 0, 0, 1])
    """
    x = _as_points(x)
    size_a = np.broadcast_to(np.asarray(size, dtype=np.float64), (x.shape[1],))
    if np.any(size_a <= 0):
        raise ValueError("voxel sizes must be > 0")
    if x.shape[0] == 0:
        return np.zeros(0, np.int64)
    cells = np.floor(x / size_a).astype(np.int64)
    cells -= cells.min(axis=0)
    extent = cells.max(axis=0) + 1
    # one integer key per voxel when it fits, else lexicographic rows
    if float(np.prod(extent.astype(np.float64))) < 2.0**62:
        strides = np.cumprod(np.concatenate(([1], extent[::-1][:-1])))[::-1]
        keys = cells @ strides
        _, lab = np.unique(keys, return_inverse=True)
    else:
        _, lab = np.unique(cells, axis=0, return_inverse=True)
    return lab.ravel().astype(np.int64)


def sort_clusters(x: Any, lab: Any) -> tuple[Any, np.ndarray]:
    """Sort points (an array, or a tuple/list of arrays sharing the first axis) by label,
    so that every cluster is contiguous. Stable: points of one cluster keep their order.

    Returns the sorted point cloud(s) and the sorted labels.

    >>> x = np.array([[0.], [5.], [.4], [.3], [2.]])
    >>> xs, ls = sort_clusters(x, np.array([0, 2, 0, 0, 1]))
    >>> xs.ravel().tolist(), ls.tolist()
    ([0.0, 0.4, 0.3, 2.0, 5.0], [0, 0, 0, 1, 2])
    """
    lab = _as_labels(lab)
    perm = np.argsort(lab, kind="stable")
    if isinstance(x, tuple):
        return tuple(np.asarray(a)[perm] for a in x), lab[perm]
    if isinstance(x, list):
        return [np.asarray(a)[perm] for a in x], lab[perm]
    return np.asarray(x)[perm], lab[perm]


def cluster_ranges(lab: Any, nlab: Any = None, *, dtype: Any = np.int64) -> np.ndarray:
    """``[start, end)`` of each cluster ``0 .. C-1`` in a point cloud sorted by label.

    ``nlab``: the number of points per cluster, if already known (``np.bincount(lab)``).

    >>> cluster_ranges(np.array([0, 0, 0, 1, 2])).tolist()
    [[0, 3], [3, 4], [4, 5]]
    """
    if nlab is None:
        nlab = np.bincount(_as_labels(lab))
    nlab = np.asarray(nlab).astype(np.int64)
    pivots = np.concatenate(([0], np.cumsum(nlab)))
    return np.stack((pivots[:-1], pivots[1:]), axis=1).astype(_index_dtype(dtype))


def cluster_centroids(
    x: Any, lab: Any, nlab: Any = None, weights: Any = None, weights_c: Any = None
) -> np.ndarray:
    """The (weighted) barycenter of each cluster: ``c_k = sum_{l_i=k} w_i x_i / sum w_i``.

    Empty clusters (labels that no point carries) get NaN centroids.

    >>> cluster_centroids(np.array([[0.], [1.], [4.], [5.], [6.]]), np.array([0, 0, 1, 1, 1]),
    ...                   weights=np.array([.5, .5, 2., 1., 1.])).ravel().tolist()
    [0.5, 4.75]
    """
    x = _as_points(x)
    lab = _as_labels(lab)
    if lab.shape[0] != x.shape[0]:
        raise ShapeError(f"{x.shape[0]} points but {lab.shape[0]} labels")
    ncl = int(lab.max()) + 1 if lab.size else 0
    w_c: Any
    if weights is None:
        w_c = np.bincount(lab, minlength=ncl).astype(np.float64) if nlab is None else (
            np.asarray(nlab, np.float64))
        w = None
    else:
        w = np.asarray(weights, np.float64).ravel()
        w_c = np.bincount(lab, weights=w, minlength=ncl) if weights_c is None else (
            np.asarray(weights_c, np.float64).ravel())
    out_dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    c = np.empty((w_c.shape[0], x.shape[1]), dtype=out_dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        for d in range(x.shape[1]):
            xd = x[:, d].astype(np.float64)
            num = np.bincount(lab, weights=xd if w is None else xd * w, minlength=w_c.shape[0])
            c[:, d] = num / w_c
    return c


def cluster_ranges_centroids(
    x: Any, lab: Any, weights: Any = None, *, dtype: Any = np.int64
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ranges (see :func:`cluster_ranges`), centroids and total weight of every cluster.

    ``x`` and ``lab`` must be sorted by label (:func:`sort_clusters`) for the ranges to
    describe the clusters. Without ``weights`` the total weight is the point count.

    >>> r, c, w = cluster_ranges_centroids(np.array([[0.], [.5], [1.], [2.], [3.]]),
    ...                                    np.array([0, 0, 1, 1, 1]))
    >>> r.tolist(), c.ravel().tolist(), w.tolist()
    ([[0, 2], [2, 5]], [0.25, 2.0], [2.0, 3.0])
    """
    lab = _as_labels(lab)
    nlab = np.bincount(lab)
    w_c: Any
    if weights is None:
        w_c = nlab.astype(np.float64)
        cent = cluster_centroids(x, lab, nlab=w_c)
    else:
        w_c = np.bincount(lab, weights=np.asarray(weights, np.float64).ravel(),
                          minlength=nlab.shape[0])
        cent = cluster_centroids(x, lab, weights=weights, weights_c=w_c)
    return cluster_ranges(lab, nlab, dtype=dtype), cent, w_c


# }}}


# {{{ coarse masks -> ranges


def _pairs_from_mask(keep: Any, ci: int, cj: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of the true entries of a dense or scipy.sparse boolean mask, row-major."""
    if hasattr(keep, "tocoo") and not isinstance(keep, np.ndarray):  # scipy.sparse
        if tuple(keep.shape) != (ci, cj):
            raise ShapeError(f"the mask has shape {tuple(keep.shape)}, expected {(ci, cj)}")
        csr = keep.tocsr()
        csr.sum_duplicates()
        data = np.asarray(csr.data)
        counts = np.diff(np.asarray(csr.indptr))
        rows = np.repeat(np.arange(ci, dtype=np.int64), counts)
        cols = np.asarray(csr.indices).astype(np.int64)
        nz = data != 0
        return rows[nz], cols[nz]
    keep = np.asarray(keep)
    if keep.shape != (ci, cj):
        raise ShapeError(f"the mask has shape {keep.shape}, expected {(ci, cj)}")
    rows, cols = np.nonzero(keep)
    return rows.astype(np.int64), cols.astype(np.int64)


def from_pairs(
    ranges_i: Any, ranges_j: Any, ci: Any, cj: Any, *, dtype: Any = np.int64
) -> Ranges:
    """KeOps' 6-tuple from the kept cluster pairs ``(ci[p], cj[p])``, in time linear in
    the number of pairs and clusters (radix sorts, no ``(Ci, Cj)`` grid).

    Pairs may come in any order; within one output cluster, the reduction ranges are
    listed in increasing cluster order. Repeated pairs are kept (and reduced twice, as
    KeOps would), so pass each pair once.
    """
    dt = _index_dtype(dtype)
    ranges_i = _as_ranges(ranges_i, "ranges_i")
    ranges_j = _as_ranges(ranges_j, "ranges_j")
    n_i, n_j = ranges_i.shape[0], ranges_j.shape[0]
    ci = np.asarray(ci).ravel().astype(np.int64, copy=False)
    cj = np.asarray(cj).ravel().astype(np.int64, copy=False)
    if ci.shape != cj.shape:
        raise ShapeError(f"{ci.shape[0]} row clusters but {cj.shape[0]} column clusters")
    if ci.size and (ci.min() < 0 or ci.max() >= n_i or cj.min() < 0 or cj.max() >= n_j):
        raise ValueError("a cluster pair names a cluster outside the ranges")

    # pairs in (ci, cj) order: masks give them so; else two stable radix passes
    ordered = np.all(ci[1:] >= ci[:-1]) and np.all((ci[1:] > ci[:-1]) | (cj[1:] >= cj[:-1]))
    if ci.size and not ordered:
        order = _stable_argsort(cj, n_j)
        order = order[_stable_argsort(ci[order], n_i)]
        ci, cj = ci[order], cj[order]
    slices_i = np.cumsum(np.bincount(ci, minlength=n_i)).astype(dt)
    redranges_j = np.ascontiguousarray(ranges_j.astype(dt)[cj]).reshape(-1, 2)
    # (cj, ci) order: one stable pass by cj keeps ci increasing within each cj
    order = _stable_argsort(cj, n_j)
    slices_j = np.cumsum(np.bincount(cj, minlength=n_j)).astype(dt)
    redranges_i = np.ascontiguousarray(ranges_i.astype(dt)[ci[order]]).reshape(-1, 2)
    return (ranges_i.astype(dt), slices_i, redranges_j,
            ranges_j.astype(dt), slices_j, redranges_i)


def _stable_argsort(keys: np.ndarray, nkeys: int) -> np.ndarray:
    """Stable argsort of integer keys in ``[0, nkeys)``: numpy's radix sort (linear time)
    when the keys fit 16 bits, its stable merge sort otherwise."""
    if nkeys <= 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    return np.argsort(keys, kind="stable")


def from_matrix(ranges_i: Any, ranges_j: Any, keep: Any, *, dtype: Any = np.int64) -> Ranges:
    """KeOps' 6-tuple from a coarse boolean ``(Ci, Cj)`` cluster-to-cluster mask.

    ``keep`` is a dense numpy array or any ``scipy.sparse`` matrix/array; ``keep[k, l]``
    true means every pair of a point of cluster ``k`` of the output cloud with a point of
    cluster ``l`` of the reduction cloud takes part in the reduction. The same result as
    ``pykeops.numpy.cluster.from_matrix``, in time linear in the kept pairs (a sparse
    mask never becomes dense).

    >>> r = np.array([[0, 2], [2, 3]])
    >>> out = from_matrix(r, r, np.array([[True, False], [True, True]]))
    >>> [a.tolist() for a in out[:3]]
    [[[0, 2], [2, 3]], [1, 3], [[0, 2], [0, 2], [2, 3]]]
    """
    ranges_i = _as_ranges(ranges_i, "ranges_i")
    ranges_j = _as_ranges(ranges_j, "ranges_j")
    ci, cj = _pairs_from_mask(keep, ranges_i.shape[0], ranges_j.shape[0])
    return from_pairs(ranges_i, ranges_j, ci, cj, dtype=dtype)


def pairs_within(
    centroids_i: Any, centroids_j: Any, cutoff: float
) -> tuple[np.ndarray, np.ndarray]:
    """Cluster pairs whose centroids are closer than ``cutoff`` (Euclidean, any dimension).

    Buckets the ``j`` centroids on a grid of cell ``cutoff`` and only compares neighbouring
    cells, so the work is linear in the number of clusters and pairs (for bounded
    densities), never ``Ci x Cj``. Returns ``(ci, cj)`` in row-major order, ready for
    :func:`from_pairs`.
    """
    a = _as_points(centroids_i).astype(np.float64)
    b = _as_points(centroids_j).astype(np.float64)
    if a.shape[1] != b.shape[1]:
        raise ShapeError(f"centroids in {a.shape[1]} and {b.shape[1]} dimensions")
    if cutoff <= 0 or a.shape[0] == 0 or b.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    dim = a.shape[1]
    ok_a = np.all(np.isfinite(a), axis=1)
    ok_b = np.all(np.isfinite(b), axis=1)
    origin = np.minimum(a[ok_a].min(axis=0, initial=np.inf), b[ok_b].min(axis=0, initial=np.inf))
    if not np.all(np.isfinite(origin)):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cell_a = np.floor((a - origin) / cutoff).astype(np.int64)
    cell_b = np.floor((b - origin) / cutoff).astype(np.int64)
    cell_a[~ok_a] = -(1 << 40)
    cell_b[~ok_b] = -(1 << 40)
    # hash the cells of b: sort b by cell key, look up each neighbour cell of each a
    extent = np.maximum(cell_a[ok_a].max(axis=0, initial=0),
                        cell_b[ok_b].max(axis=0, initial=0)) + 3
    strides = np.cumprod(np.concatenate(([1], extent[::-1][:-1])))[::-1].astype(np.int64)
    key_b = (cell_b + 1) @ strides
    key_b[~ok_b] = -1
    order_b = np.argsort(key_b, kind="stable")
    sorted_keys = key_b[order_b]
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    offsets = np.stack(np.meshgrid(*([np.array([-1, 0, 1])] * dim), indexing="ij"),
                       -1).reshape(-1, dim)
    idx_a = np.nonzero(ok_a)[0]
    base = (cell_a[idx_a] + 1) @ strides
    cut2 = cutoff * cutoff
    for off in offsets:
        key = base + off @ strides
        lo = np.searchsorted(sorted_keys, key, side="left")
        hi = np.searchsorted(sorted_keys, key, side="right")
        cnt = hi - lo
        if not cnt.any():
            continue
        r = np.repeat(idx_a, cnt)
        # positions lo..hi-1 for each a, flattened
        starts = np.repeat(lo - np.concatenate(([0], np.cumsum(cnt)[:-1])), cnt)
        c = order_b[starts + np.arange(r.size)]
        d2 = np.sum((a[r] - b[c]) ** 2, axis=1)
        sel = d2 < cut2
        rows.append(r[sel])
        cols.append(c[sel])
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    order = np.lexsort((c, r))
    return r[order], c[order]


def swap_axes(ranges: Ranges | None) -> Ranges | None:
    """Exchange the ``i`` and ``j`` halves of a 6-tuple (for a reduction over the other
    axis); ``None`` stays ``None``."""
    if ranges is None:
        return None
    return (*ranges[3:6], *ranges[0:3])  # type: ignore[return-value]


def check_ranges(ranges_i: Any, slices_i: Any, redranges_j: Any, m: int, n: int) -> None:
    """Raise ``ValueError`` unless the three arrays describe a valid restriction of an
    ``m``-by-``n`` reduction (bounds inside the clouds, slices non-decreasing and ending
    at the number of reduction ranges)."""
    ri = _as_ranges(ranges_i, "ranges_i")
    rj = _as_ranges(redranges_j, "redranges_j")
    sl = np.asarray(slices_i).ravel()
    if sl.shape[0] != ri.shape[0]:
        raise ShapeError(f"slices_i has {sl.shape[0]} entries but ranges_i {ri.shape[0]} rows")
    if ri.size and (ri.min() < 0 or ri[:, 1].max() > m or np.any(ri[:, 0] > ri[:, 1])):
        raise ValueError(f"ranges_i must hold 0 <= start <= end <= {m}")
    if rj.size and (rj.min() < 0 or rj[:, 1].max() > n or np.any(rj[:, 0] > rj[:, 1])):
        raise ValueError(f"redranges_j must hold 0 <= start <= end <= {n}")
    if sl.size and (np.any(np.diff(sl) < 0) or sl[0] < 0 or sl[-1] != rj.shape[0]):
        raise ValueError("slices_i must be non-decreasing and end at len(redranges_j)")


# }}}


# {{{ the ranges as kernel arguments


def range_args() -> list[Any]:
    """The kernel arguments of the ranges (int32) and their lengths."""
    import loopy as lp

    n_i, n_red = (prim.Variable(n) for n in RANGE_LENGTHS)
    return [
        lp.GlobalArg("ranges_i", RANGE_DTYPE, shape=(n_i, 2)),
        lp.GlobalArg("slices_i", RANGE_DTYPE, shape=(n_i,)),
        lp.GlobalArg("redranges_j", RANGE_DTYPE, shape=(n_red, 2)),
        *(lp.ValueArg(n, RANGE_DTYPE) for n in RANGE_LENGTHS),
    ]


def launch_table(ranges_i: Any, slices_i: Any, m: int, rows: int) -> np.ndarray:
    """The launch table of block-sparse recipes: ``(nblocks, 3)`` int32 rows
    ``(cluster, first row, end row)`` cutting every output range into blocks of at most
    ``rows`` rows, plus blocks with cluster ``-1`` over the rows no range covers (they
    get the neutral value). Every row ``0 <= i < m`` is in exactly one block."""
    r = np.asarray(ranges_i, np.int64).reshape(-1, 2)
    keep = r[:, 1] > r[:, 0]
    k = np.nonzero(keep)[0]
    order = k[np.argsort(r[k, 0], kind="stable")]
    starts, ends = r[order, 0], r[order, 1]
    if starts.size and (np.any(starts[1:] < ends[:-1]) or starts[0] < 0 or ends[-1] > m):
        raise ValueError("output ranges overlap or leave [0, M)")
    # gaps: [0, first), between ranges, [last, m)
    gap_lo = np.concatenate(([0], ends))
    gap_hi = np.concatenate((starts, [m]))
    g = gap_hi > gap_lo
    seg_k = np.concatenate((order, np.full(int(g.sum()), -1)))
    seg_lo = np.concatenate((starts, gap_lo[g]))
    seg_hi = np.concatenate((ends, gap_hi[g]))
    nb = -(-(seg_hi - seg_lo) // rows)
    blk = np.repeat(np.arange(seg_k.size), nb)
    offset = np.arange(blk.size) - np.repeat(np.cumsum(nb) - nb, nb)
    lo = seg_lo[blk] + offset * rows
    hi = np.minimum(lo + rows, seg_hi[blk])
    table = np.stack((seg_k[blk], lo, hi), axis=1)
    table = table[np.argsort(table[:, 1], kind="stable")]
    return np.ascontiguousarray(table, dtype=RANGE_DTYPE)

# }}}

# vim: foldmethod=marker
