"""The :class:`Match`: a group of statements of a loopy kernel that computes a batched
einsum, in the kernel's names, with the name maps to the canonical specification."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feinsum.spec.canonical import Isomorphism
    from feinsum.spec.model import BatchedEinsum


# {{{ the Match


@dataclass(frozen=True, eq=False)
class Match:
    """A group of statements of a loopy kernel that computes a batched einsum.

    :attr einsum: the :class:`~feinsum.BatchedEinsum`, named as in the kernel
        (indices = inames, arrays = kernel arrays, length symbols = the kernel's length
        parameters, formulas = substitution rules), rows in kernel statement order.
    :attr kernel_name: the loopy kernel the statements belong to.
    :attr insn_ids: per row, the ids of the statements that compute it (one, or the
        ``acc = 0`` / ``acc = acc + ...`` / ``out = acc`` statements of an
        accumulation).
    :attr outputs: per row, the output array (and, for argmin/argmax, the index
        output).
    :attr formula_sources: formula name -> the substitution rule it is (``None`` for a
        formula the matcher made from an inline expression or a constant).
    :attr arg_names: the kernel's argument names, in order.
    :attr squeezed: kernel array -> its length-1 axes, which the einsum leaves out (the
        kernel reads them at index 0).

    The name maps to the canonical specification (computed on first use):
    :attr:`canonical`, :attr:`isomorphism`, :attr:`to_canonical`,
    :attr:`from_canonical`, :attr:`canonical_key`.
    """

    einsum: BatchedEinsum
    kernel_name: str
    insn_ids: tuple[tuple[str, ...], ...]
    outputs: tuple[tuple[str, ...], ...]
    formula_sources: Mapping[str, str | None] = field(default_factory=dict)
    arg_names: tuple[str, ...] = ()
    #: kernel array -> the axes of length 1 the einsum does not see (an ``(E, 1)`` array
    #: read as ``g[e, 0]`` is the einsum's ``(E,)`` array ``g``)
    squeezed: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: per row, the position in the kernel's statement list of the statement that
    #: writes the output (used by replay to keep the program's order)
    _positions: tuple[int, ...] = ()

    def __repr__(self) -> str:
        ids = ", ".join("+".join(r) for r in self.insn_ids)
        return f"Match({self.kernel_name}: [{ids}] -> {self.einsum})"

    @property
    def all_insn_ids(self) -> tuple[str, ...]:
        """Every statement id of the match, row after row."""
        return tuple(i for row in self.insn_ids for i in row)

    @property
    def nrows(self) -> int:
        return self.einsum.nrows

    # {{{ canonical side (lazy: canonicalisation is not needed to find einsums)

    @cached_property
    def canonical(self) -> BatchedEinsum:
        """The canonical specification (``feinsum.canonicalize(self.einsum)``)."""
        from feinsum.spec.canonical import canonicalize

        return canonicalize(self.einsum)

    @cached_property
    def isomorphism(self) -> Isomorphism:
        """kernel names -> canonical names (``feinsum.isomorphism(einsum, canonical)``)."""
        from feinsum.spec.canonical import isomorphism

        # isomorphism() needs equal lengths: give the canonical symbols the kernel's values
        return isomorphism(self.einsum, self.canonical.with_lengths(self.canonical_lengths))

    @cached_property
    def canonical_key(self) -> str:
        from feinsum.spec.canonical import canonical_key

        return canonical_key(self.einsum)

    @cached_property
    def canonical_lengths(self) -> dict[str, int]:
        """Values of the canonical length symbols the kernel fixes (long fixed loops)."""
        from feinsum.spec.canonical import canonical_lengths

        return dict(canonical_lengths(self.einsum))

    @cached_property
    def output_map(self) -> dict[str, str]:
        """kernel output name -> canonical output name (``out{r}``, ``out{r}_index``)."""
        rows = self.isomorphism.rows
        result: dict[str, str] = {}
        for r, names in enumerate(self.outputs):
            result[names[0]] = f"out{rows[r]}"
            if len(names) > 1:
                result[names[1]] = f"out{rows[r]}_index"
        return result

    @cached_property
    def to_canonical(self) -> dict[str, str]:
        """Every kernel name the match involves -> its canonical name: inames, arrays,
        formulas (substitution rules), length parameters and outputs."""
        iso = self.isomorphism
        result: dict[str, str] = {}
        for part in (iso.indices, iso.arrays, iso.formulas, iso.lengths):
            result.update(part)
        result.update(self.output_map)
        return result

    @cached_property
    def from_canonical(self) -> dict[str, str]:
        """The inverse of :attr:`to_canonical`."""
        return {v: k for k, v in self.to_canonical.items()}

    def canonical_arrays(self, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """Rename a dict of kernel-named inputs (and length parameters) to canonical names,
        e.g. to call ``feinsum.evaluate(match.canonical, ...)``; names the match does not
        know are dropped."""
        m = self.to_canonical
        return {m[k]: v for k, v in arrays.items() if k in m}

    def kernel_arrays(self, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """Rename canonically named arrays/outputs back to the kernel's names."""
        m = self.from_canonical
        return {m.get(k, k): v for k, v in arrays.items()}

    # }}}


# }}}

# vim: foldmethod=marker
