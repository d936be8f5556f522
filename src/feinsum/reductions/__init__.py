"""Kernel reductions: the Genred-style builder (:mod:`.builder`), a spec seen as a kernel
reduction (:mod:`.analysis`), the kernel templates, block-sparse restrictions and KeOps
ranges."""

# registers the block-sparse lowering with feinsum.lowering (which sits below this package)
import feinsum.reductions.block_sparse  # noqa: F401
