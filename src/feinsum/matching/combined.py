"""The kernel that holds a user's statements and the transformed einsums put in their
place (:mod:`feinsum.matching.assemble`): the union of the user's kernel and the parts'
kernels, with the user's argument list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def combined_kernel(base: Any, placed: Sequence[Any], args: list[Any], insns: list[Any]
                    ) -> Any:
    """The user's kernel *base* holding *insns* (its own and the parts' statements) with
    the argument list *args*: the domains, inames, temporaries, assumptions, loop
    priorities, build options, preambles and silenced warnings of *base* and of the
    parts' kernels *placed*, and the loopy checks the parts relaxed
    (:func:`relaxed_checks`)."""
    import islpy as isl

    assumptions = base.assumptions
    temps = dict(base.temporary_variables)
    inames = dict(base.inames)
    domains = list(base.domains)
    priority = set(base.loop_priority)
    slabs = dict(base.iname_slab_increments)
    opts = list(base.options.build_options or [])
    preambles = list(base.preambles)
    generators = list(base.preamble_generators)
    silenced = set(base.silenced_warnings)
    for tk in placed:
        if not tk.assumptions.is_universe():
            a, b = isl.align_two(assumptions, tk.assumptions)
            assumptions = (a & b).params()
        temps.update(tk.temporary_variables)
        inames.update(tk.inames)
        domains.extend(tk.domains)
        priority |= set(tk.loop_priority)
        slabs.update(dict(tk.iname_slab_increments))
        opts.extend(tk.options.build_options or [])
        preambles.extend(tk.preambles)
        generators.extend(tk.preamble_generators)
        silenced |= set(tk.silenced_warnings)
    return base.copy(
        domains=domains, instructions=insns, args=args, temporary_variables=temps,
        inames=inames, assumptions=assumptions, loop_priority=frozenset(priority),
        iname_slab_increments=type(base.iname_slab_increments)(slabs),
        options=base.options.copy(build_options=list(dict.fromkeys(opts)),
                                  **relaxed_checks(base, placed)),
        preambles=tuple(dict.fromkeys(preambles)),
        preamble_generators=tuple(dict.fromkeys(generators)),
        silenced_warnings=frozenset(silenced))


#: loopy's checks a recipe may relax for the code it generates (a flat copy of a C-order
#: operand reads past the end of a row; accesses ordered by barriers loopy cannot see)
RELAXABLE_CHECKS = ("enforce_array_accesses_within_bounds", "enforce_variable_access_ordered")


def relaxed_checks(base: Any, placed: Sequence[Any]) -> dict[str, Any]:
    """The checks of loopy that the transformed einsums' kernels relaxed, relaxed in the
    kernel they are placed in too (else loopy refuses the code there that it accepted in
    the recipe's kernel): ``"no_check"`` where one of them says so, else ``False`` where
    one says so."""
    out: dict[str, Any] = {}
    for name in RELAXABLE_CHECKS:
        values = [getattr(tk.options, name) for tk in placed]
        if "no_check" in values:
            out[name] = "no_check"
        elif any(v is False for v in values) and getattr(base.options, name) != "no_check":
            out[name] = False
    return out
