"""The package's modules as syntax trees, each parsed once per test process.

Several test modules read the package as Python (test_layout's docstring check, test_one_place,
test_docs_facts): parsing all of it costs about half a CPU-second, which they now pay once
between them, not once each (and once per check, as they did).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def parsed(path: Path) -> ast.Module:
    """The syntax tree of the Python file at `path` (shared: do not change it)."""
    return _parsed(path.resolve())


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))
