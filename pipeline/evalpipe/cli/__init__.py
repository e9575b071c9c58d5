"""The `evalpipe` command line."""

from evalpipe.cli.main import main

__all__ = ["main"]
