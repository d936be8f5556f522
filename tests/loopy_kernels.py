"""Helpers the matching and replay tests use to write loopy kernels by hand."""

from __future__ import annotations

import warnings
from typing import Any

import loopy as lp
import numpy as np

F32, F64 = np.float32, np.float64


def knl(domain: str, insns: str, args: list[Any], **kw: Any) -> Any:
    """``lp.make_kernel`` with the language version set and its warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lp.make_kernel(domain, insns, args, lang_version=(2018, 2), **kw)


def g(names: str, dtype: Any = F64, shape: Any = lp.auto, **kw: Any) -> Any:
    """Global arguments *names* (comma-separated) of one dtype."""
    return lp.GlobalArg(names, dtype, shape=shape, **kw)
