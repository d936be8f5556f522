"""``feinsum.compile``: an einsum or kernel reduction called directly on numpy or pyopencl
arrays (:mod:`.executor`), with its input checks (:mod:`.inputs`)."""
