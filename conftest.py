"""Settings for every test and doctest (tests/, docs/, src/)."""

import os

# Tests see only the records they make: the timings shipped in db/ would otherwise answer
# queries (the fallback chain finds them by structure) in every test and its subprocesses.
# The shipped-records tests unset this themselves.
os.environ["FEINSUM_SHIPPED"] = "none"


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """The skipped tests counted by reason (.ci/run's log shows it): a skip must say what
    this machine lacks (no PostgreSQL, no browser, no GPU, no arraycontext wheels...)."""
    import collections

    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: collections.Counter[str] = collections.Counter()
    for report in skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    terminalreporter.write_sep("=", f"{len(skipped)} skipped, by reason")
    for reason, n in reasons.most_common():
        terminalreporter.write_line(f"{n:6d}  {reason}")
