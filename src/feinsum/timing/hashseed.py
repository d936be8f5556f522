"""The hash seed of code generation: loopy's code for some kernels depends on the order of
its sets, hence on ``PYTHONHASHSEED``, so every process that generates code to time, to
fingerprint or to predict runs with one seed, :data:`CODE_HASH_SEED`."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
from collections.abc import Iterator

#: The hash seed of every process that generates code to time, to fingerprint or to predict.
CODE_HASH_SEED = "0"

_POOLS: dict[int, concurrent.futures.ProcessPoolExecutor] = {}


def has_code_seed() -> bool:
    """Whether this process generates the code the timing workers do."""
    return os.environ.get("PYTHONHASHSEED") == CODE_HASH_SEED


@contextlib.contextmanager
def code_hash_seed() -> Iterator[None]:
    """Processes started meanwhile run with :data:`CODE_HASH_SEED`."""
    before = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = CODE_HASH_SEED
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = before


def seeded_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of *workers* spawned processes with :data:`CODE_HASH_SEED`, kept for this
    process's lifetime (the next user finds it warm)."""
    if workers not in _POOLS:
        import atexit
        import multiprocessing
        import time

        with code_hash_seed():
            pool = concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn"))
            # every process started now, under the seed (they are spawned on demand)
            concurrent.futures.wait([pool.submit(time.sleep, 0.5) for _ in range(workers)])
        _POOLS[workers] = pool
        atexit.register(pool.shutdown, wait=False, cancel_futures=True)
    return _POOLS[workers]
