"""Draws kernel-reductions-clusters.png (docs/kernel-reductions.rst); run from the repository
root."""

import numpy as np

from feinsum.reductions import ranges as R


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    n = 20_000
    t = (0.15 + rng.random(n)) * 4 * np.pi
    x = np.stack([t * np.cos(t), t * np.sin(t)], 1) / (4 * np.pi)
    x = x + 0.01 * rng.standard_normal((n, 2))
    y = 0.25 * rng.standard_normal((n, 2))
    x, lx = R.sort_clusters(x, R.grid_cluster(x, 0.1))
    y, ly = R.sort_clusters(y, R.grid_cluster(y, 0.1))
    rx, cx, _ = R.cluster_ranges_centroids(x, lx)
    ry, cy, _ = R.cluster_ranges_centroids(y, ly)
    ci, cj = R.pairs_within(cx, cy, 0.3)
    keep = np.zeros((len(rx), len(ry)), bool)
    keep[ci, cj] = True
    fig, ax = plt.subplots(1, 2, figsize=(10, 4.6))
    ax[0].scatter(x[:, 0], x[:, 1], c=lx % 17, s=1, cmap="tab20")
    ax[0].scatter(y[:, 0], y[:, 1], c=ly % 17, s=1, cmap="tab20b", alpha=0.4)
    ax[0].set_title(f"{len(rx)} spiral and {len(ry)} blob clusters")
    ax[0].set_aspect("equal")
    ax[1].imshow(keep, cmap="Greys", interpolation="nearest", aspect="auto")
    ax[1].set_title(f"coarse mask (centroids < 0.3 apart): {keep.mean():.1%} kept")
    ax[1].set_xlabel("cluster of y (j)")
    ax[1].set_ylabel("cluster of x (i)")
    fig.tight_layout()
    fig.savefig("docs/_static/kernel-reductions-clusters.png", dpi=80)


if __name__ == "__main__":
    main()
