"""The ``feinsum`` command line. Subcommands import what they need when they run."""

from feinsum.cli.main import main

__all__ = ["main"]
