"""Settings for every test and doctest (tests/, docs/, src/)."""

import os

# Tests see only the records they make: the timings shipped in db/ would otherwise answer
# queries (the fallback chain finds them by structure) in every test and its subprocesses.
# The shipped-records tests unset this themselves.
os.environ["FEINSUM_SHIPPED"] = "none"
