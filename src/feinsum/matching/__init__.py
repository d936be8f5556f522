"""Matching loopy kernels to batched einsums, and replaying recipes on them.

* :func:`find_einsums` / :func:`match_einsum`: a loopy kernel -> :class:`Match` (the
  :class:`~feinsum.BatchedEinsum` in the kernel's names, the statements, the name maps
  to the canonical specification);
* :func:`apply_transform`: a recipe written for the canonical specification, applied
  to the user's kernel;
* :func:`prepare_kernel`: exact rewrites of what array compilers emit into what the
  matcher reads (used by the hook before matching); :func:`survey_einsums`: the einsums
  and why each other reduction is not one.

See ``docs/compiler-guide.rst``.
"""

import feinsum.lowering.loopy_setup  # noqa: F401  (loopy must never prompt for input)
from feinsum.matching.match import Match, Survey, find_einsums, match_einsum, survey_einsums
from feinsum.matching.prepare import Prepared, prepare_kernel
from feinsum.matching.replay import apply_transform

__all__ = ["Match", "Prepared", "Survey", "apply_transform", "find_einsums", "match_einsum",
           "prepare_kernel", "survey_einsums"]
