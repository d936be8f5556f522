"""From a spec to loopy and numpy: the reference kernel (:mod:`.kernel`), feinsum's loopy
reductions and settings, the bounded-memory evaluation (:mod:`.reference`) and the validation
inputs and tolerances every result is checked with (:mod:`.validation`)."""
