"""feinsum.reductions.ranges against brute-force constructions."""

from __future__ import annotations

import time

import numpy as np
import pytest

from feinsum.reductions import ranges as R


def brute_from_matrix(ranges_i, ranges_j, keep):  # type: ignore[no-untyped-def]
    """pykeops' construction: a dense grid of cluster pairs."""
    ci, cj = keep.shape
    red_j = [ranges_j[l] for k in range(ci) for l in range(cj) if keep[k, l]]
    red_i = [ranges_i[k] for l in range(cj) for k in range(ci) if keep[k, l]]
    return (ranges_i, np.cumsum(keep.sum(1)), np.array(red_j).reshape(-1, 2),
            ranges_j, np.cumsum(keep.sum(0)), np.array(red_i).reshape(-1, 2))


@pytest.mark.parametrize("dim", [1, 2, 3, 5])
def test_grid_cluster_matches_brute_force(dim, rng):  # type: ignore[no-untyped-def]
    x = rng.random((300, dim)) * 3 - 1
    lab = R.grid_cluster(x, 0.7)
    cells = [tuple(c) for c in np.floor(x / 0.7).astype(int)]
    # same voxel <=> same label, labels 0..C-1 in lexicographic voxel order
    uniq = sorted(set(cells))
    want = np.array([uniq.index(c) for c in cells])
    np.testing.assert_array_equal(lab, want)


def test_sort_ranges_centroids(rng):  # type: ignore[no-untyped-def]
    x = rng.random((200, 2))
    w = rng.random(200) + 0.1
    lab = R.grid_cluster(x, 0.25)
    (xs, ws), ls = R.sort_clusters((x, w), lab)
    assert np.all(np.diff(ls) >= 0)
    r, c, wc = R.cluster_ranges_centroids(xs, ls, weights=ws)
    for k in range(lab.max() + 1):
        a, b = r[k]
        assert np.all(ls[a:b] == k) and b - a == np.sum(lab == k)
        sel = lab == k
        np.testing.assert_allclose(c[k], (x[sel] * w[sel, None]).sum(0) / w[sel].sum())
        np.testing.assert_allclose(wc[k], w[sel].sum())
    r2, _, n2 = R.cluster_ranges_centroids(xs, ls)
    np.testing.assert_array_equal(r2, r)
    np.testing.assert_array_equal(n2, np.bincount(lab))
    assert r.dtype == np.int64 and R.cluster_ranges(ls, dtype=np.int32).dtype == np.int32


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_from_matrix_matches_brute_force(dtype, rng):  # type: ignore[no-untyped-def]
    ci, cj = 13, 9
    ranges_i = R.cluster_ranges(np.repeat(np.arange(ci), rng.integers(1, 5, ci)), dtype=dtype)
    ranges_j = R.cluster_ranges(np.repeat(np.arange(cj), rng.integers(1, 5, cj)), dtype=dtype)
    keep = rng.random((ci, cj)) < 0.3
    keep[3] = False
    keep[:, 4] = False
    got = R.from_matrix(ranges_i, ranges_j, keep, dtype=dtype)
    want = brute_from_matrix(ranges_i, ranges_j, keep)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == np.dtype(dtype)
    # pairs in any order give the same tuple; swap_axes exchanges the halves
    k, l = np.nonzero(keep)
    p = rng.permutation(k.size)
    for g, w in zip(R.from_pairs(ranges_i, ranges_j, k[p], l[p], dtype=dtype), got, strict=True):
        np.testing.assert_array_equal(g, w)
    sw = R.swap_axes(got)
    for g, w in zip(sw, R.from_matrix(ranges_j, ranges_i, keep.T, dtype=dtype), strict=True):
        np.testing.assert_array_equal(g, w)
    assert R.swap_axes(None) is None


def test_from_matrix_scipy_sparse(rng):  # type: ignore[no-untyped-def]
    sp = pytest.importorskip("scipy.sparse")
    ranges = R.cluster_ranges(np.repeat(np.arange(20), rng.integers(1, 4, 20)))
    keep = rng.random((20, 20)) < 0.2
    dense = R.from_matrix(ranges, ranges, keep)
    for fmt in (sp.csr_matrix, sp.coo_matrix, sp.csc_matrix):
        for g, w in zip(R.from_matrix(ranges, ranges, fmt(keep)), dense, strict=True):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dim", [2, 3])
def test_pairs_within_matches_brute_force(dim, rng):  # type: ignore[no-untyped-def]
    a = rng.random((150, dim))
    b = rng.random((170, dim))
    ci, cj = R.pairs_within(a, b, 0.2)
    d2 = ((a[:, None] - b[None]) ** 2).sum(-1)
    k, l = np.nonzero(d2 < 0.04)
    np.testing.assert_array_equal(ci, k)
    np.testing.assert_array_equal(cj, l)


def test_check_ranges_rejects_bad_ranges():  # type: ignore[no-untyped-def]
    r = np.array([[0, 2], [2, 5]])
    R.check_ranges(r, np.array([1, 2]), np.array([[0, 3], [1, 2]]), 5, 3)
    with pytest.raises(ValueError):
        R.check_ranges(r, np.array([1, 2]), np.array([[0, 4], [1, 2]]), 5, 3)
    with pytest.raises(ValueError):
        R.check_ranges(r, np.array([2, 1]), np.array([[0, 3], [1, 2]]), 5, 3)


def test_ranges_linear_in_kept_pairs(rng):  # type: ignore[no-untyped-def]
    """31,602 clusters (pykeops' dense from_matrix: 99 s here): well under a second."""
    c = 31_602
    sizes = rng.integers(1, 6, c)
    ranges = R.cluster_ranges(np.repeat(np.arange(c), sizes))
    ci = np.repeat(np.arange(c), 16)
    cj = (ci + rng.integers(-40, 40, ci.size)) % c
    t0 = time.perf_counter()
    out = R.from_pairs(ranges, ranges, ci, cj)
    elapsed = time.perf_counter() - t0
    assert out[2].shape == (ci.size, 2) and out[1][-1] == ci.size
    assert elapsed < 3.0, f"from_pairs took {elapsed:.2f} s for {ci.size} pairs"
