"""The reference workloads of ``shared/workloads.md`` as specs, for tests and benchmarks.

Every workload keeps its long axes symbolic (``E``, ``M``, ``N``; ``R`` and ``C`` for the
matrix-vector stand-ins) so that one build serves any length; :attr:`Workload.lengths`
gives the reference lengths, :attr:`Workload.small` lengths a CPU runs a GPU
configuration at in seconds. The tensor contractions' short axes
are reference-sized in :func:`workloads` and scaled down with ``small=True`` (a 64^5 TTM
is 1e9 flops: too much for a test of a GPU configuration on a CPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The workload families (the recipes that claim each are those whose ``applies`` accepts it).
FAMILIES = ("dg", "contraction", "kernel", "block_sparse", "elementwise", "reduction")
#: The few-rows workload's fixed number of rows (``M``), on CPUs and on GPUs (workloads.md:
#: enough rows for a GPU's row blocks, still too few for the row-parallel schemes).
FEW_ROWS = {"cpu": 16, "gpu": 64}
#: The DG operators' polynomial degree on tetrahedra in workloads.md (35 nodes, 15 a face).
DG_DEGREE = 4


def tetrahedron_nodes(degree: int) -> tuple[int, int]:
    """Nodes of a tetrahedron and of one of its faces for polynomial *degree* (4: 35, 15)."""
    if not isinstance(degree, int) or degree < 1:
        raise ValueError(f"a DG degree is a positive integer, got {degree!r}")
    return (degree + 1) * (degree + 2) * (degree + 3) // 6, (degree + 1) * (degree + 2) // 2


@dataclass(frozen=True)
class Workload:
    """One reference workload: its name, family, spec (long axes symbolic), the reference
    lengths of those symbols and small ones for quick checks."""

    name: str
    family: str
    spec: Any
    lengths: dict[str, int] = field(default_factory=dict)
    small: dict[str, int] = field(default_factory=dict)


def _dg(out: list[Workload], degree: int = DG_DEGREE) -> None:
    from feinsum import array, batched_einsum, einsum

    f64 = "float64"
    n, nf = tetrahedron_nodes(degree)
    D, D3 = array("D", (n, n), f64), array("D", (3, n, n), f64)
    J3, L, Jf = array("J", (3, 3, "E"), f64), array("L", (n, 4, nf), f64), array(
        "J", (4, "E"), f64)
    u = [array(f"u{k}", ("E", n), f64) for k in range(4)]
    u3 = [array(f"u{k}", (3, "E", n), f64) for k in range(4)]
    v = [array(f"v{k}", (4, "E", nf), f64) for k in range(4)]
    tag = "" if degree == DG_DEGREE else f"_p{degree}"
    plain = {"local": ("ij,ej->ei", [D, u]), "divergence": ("xre,rij,xej->ei", [J3, D3, u3]),
             "gradient": ("xre,rij,ej->xei", [J3, D3, u]),
             "face_mass": ("ifj,fe,fej->ei", [L, Jf, v])}
    size, small = {"E": 50_000}, {"E": 261}
    for name, (subs, ops) in plain.items():
        fixed = [o for o in ops if not isinstance(o, list)]
        field_arrays = next(o for o in ops if isinstance(o, list))
        pos = ops.index(field_arrays)
        one = [*fixed[:pos], field_arrays[0], *fixed[pos:]]
        out.append(Workload(name + tag, "dg", einsum(subs, *one), size, small))
        rows = [[*fixed[:pos], w, *fixed[pos:]] for w in field_arrays]
        out.append(Workload(f"{name}_x4{tag}", "dg", batched_einsum(subs, rows), size,
                            small))


def _contractions(out: list[Workload], small: bool) -> None:
    from feinsum import array, einsum

    f32 = "float32"
    t, jk = (16, 16) if small else (64, 64)
    out.append(Workload("gemm", "contraction", einsum(
        "ik,kj->ij", array("A", ("I", "K"), f32), array("B", ("K", "J"), f32)),
        {"I": 1024, "J": 1024, "K": 1024}, {"I": 45, "J": 73, "K": 37}))
    out.append(Workload("ttm", "contraction", einsum(
        "ijkl,mi->mjkl", array("T", (t,) * 4, f32), array("W", (t, t), f32))))
    out.append(Workload("two_index", "contraction", einsum(
        "ijk,jkl->il", array("A", ("I", jk, jk), f32), array("B", (jk, jk, "L"), f32)),
        {"I": 512, "L": 512}, {"I": 37, "L": 45}))


def _kernels(out: list[Workload], gpu: bool) -> None:
    import numpy as np

    from feinsum.reductions.builder import kernel_reduction

    g = {"g": 1}
    gauss = "exp(-sqdist(x, y) * g) * b"
    size, small = {"M": 100_000, "N": 100_000}, {"M": 45, "N": 301}
    specs = {
        "gaussian": kernel_reduction(gauss, i_vars={"x": 3}, j_vars={"y": 3, "b": 1},
                                     params=g, dtype=np.float32),
        "gaussian4": kernel_reduction(gauss, i_vars={"x": 3}, j_vars={"y": 3, "b": 4},
                                      params=g, dtype=np.float32),
        "softmin": kernel_reduction("b - sqdist(x, y) * g", i_vars={"x": 3},
                                    j_vars={"y": 3, "b": 1}, params=g, dtype=np.float32,
                                    reduction="logsumexp"),
        "nearest": kernel_reduction("sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3},
                                    dtype=np.float32, reduction="min_argmin"),
    }
    for name, e in specs.items():
        out.append(Workload(name, "kernel", e, size, small))
    rows = FEW_ROWS["gpu" if gpu else "cpu"]
    out.append(Workload("fewrows", "kernel", specs["gaussian"].with_lengths({"M": rows}),
                        {"N": 1_000_000}, {"N": 301}))


def _block_sparse(out: list[Workload]) -> None:
    import numpy as np

    from feinsum.reductions.builder import kernel_reduction

    e = kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
                         j_vars={"y": 3, "b": 1}, params={"g": 1}, dtype=np.float32,
                         block_sparse=True)
    out.append(Workload("gaussian_block_sparse", "block_sparse", e,
                        {"M": 100_000, "N": 100_000}, {"M": 45, "N": 301}))


def _elementwise(out: list[Workload]) -> None:
    from feinsum import array, einsum

    # not in workloads.md (no reference workload is reduction-free): the elementwise
    # recipe's stand-in, a scaled update of the DG field u
    f64 = "float64"
    out.append(Workload("scale_fields", "elementwise", einsum(
        "e,ej->ej", array("c", ("E",), f64), array("u", ("E", 35), f64)),
        {"E": 50_000}, {"E": 261}))


def _reductions(out: list[Workload]) -> None:
    from feinsum import array, einsum

    # not in workloads.md either: split_reduction's stand-in, the inner product of two DG
    # fields (a squared norm when both are one), a long reduction into one number
    f64 = "float64"
    out.append(Workload("inner", "reduction", einsum(
        "ej,ej->", array("u", ("E", 35), f64), array("v", ("E", 35), f64)),
        {"E": 1_000_000}, {"E": 261}))
    # nor these: a matrix-vector product and the transposed one (A.T @ y), generic's,
    # whose GPU default shares the reduction (feinsum.toolbox.sharing); 512 MB matrices
    A, x, y = array("A", ("R", "C"), f64), array("x", ("C",), f64), array("y", ("R",), f64)
    sizes, small = {"R": 8000, "C": 8000}, {"R": 261, "C": 300}
    out.append(Workload("matvec", "reduction", einsum("ij,j->i", A, x), sizes, small))
    out.append(Workload("matvec_t", "reduction", einsum("ji,j->i", A, y), sizes, small))


def workloads(small: bool = False, families: tuple[str, ...] = FAMILIES, *,
              gpu: bool = False, dg_degree: int = DG_DEGREE) -> dict[str, Workload]:
    """Every reference workload by name (``small``: the contractions' short axes scaled
    down), in the families given; ``gpu``: at workloads.md's GPU sizes where they differ
    (the few-rows workload's ``M``, :data:`FEW_ROWS`); ``dg_degree``: the DG operators at
    another polynomial degree on tetrahedra (:func:`tetrahedron_nodes`; their names end
    ``_pN``: ``local_p6``, ``divergence_x4_p6``)."""
    tetrahedron_nodes(dg_degree)
    out: list[Workload] = []
    builders = {"dg": lambda o: _dg(o, dg_degree),
                "contraction": lambda o: _contractions(o, small),
                "kernel": lambda o: _kernels(o, gpu), "block_sparse": _block_sparse,
                "elementwise": _elementwise, "reduction": _reductions}
    for fam in families:
        builders[fam](out)
    return {w.name: w for w in out}
