"""The `dragonfarm` command line: a thin layer over the public API."""

from dragonfarm_core.cli.commands import main

__all__ = ["main"]
