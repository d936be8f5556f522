"""The transformation steps recipes compose (:mod:`.core`, :mod:`.dense`, :mod:`.transposed`,
:mod:`.tiles`, :mod:`.vec`, :mod:`.cvec`) and the parameter spaces they declare
(:mod:`.parameters`)."""
