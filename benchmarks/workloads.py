"""The kernel-reduction workloads of ``shared/workloads.md`` as loopy kernels.

``feinsum tune --kernel benchmarks/workloads.py:NAME`` tunes one of them (the records
shipped in ``db/`` are made that way by ``scripts/ship_records.sh``). Each kernel is the
reference kernel of a :func:`feinsum.kernel_reduction` spec; ``M`` and ``N`` stay runtime
lengths (give their values with ``-l M=... -l N=...``), except ``fewrows``, whose 16 rows
(a CPU's few rows, :data:`feinsum.tuning.workloads.FEW_ROWS`) are fixed so that its
records are the few-rows scheme's.
"""

from __future__ import annotations

import numpy as np

import feinsum
from feinsum.reductions.builder import kernel_reduction
from feinsum.tuning.workloads import FEW_ROWS

_G = {"g": 1}


def _kernel(e: feinsum.BatchedEinsum) -> object:
    return feinsum.generate_loopy(e)


gaussian = _kernel(kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
                                    j_vars={"y": 3, "b": 1}, params=_G, dtype=np.float32))
gaussian4 = _kernel(kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
                                     j_vars={"y": 3, "b": 4}, params=_G, dtype=np.float32))
softmin = _kernel(kernel_reduction("b - sqdist(x, y) * g", i_vars={"x": 3},
                                   j_vars={"y": 3, "b": 1}, params=_G, dtype=np.float32,
                                   reduction="logsumexp"))
nearest = _kernel(kernel_reduction("sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3},
                                   dtype=np.float32, reduction="min_argmin"))
fewrows = _kernel(kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
                                   j_vars={"y": 3, "b": 1}, params=_G, dtype=np.float32)
                  .with_lengths({"M": FEW_ROWS["cpu"]}))
