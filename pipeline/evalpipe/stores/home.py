"""Where evalpipe keeps its local files on this machine.

Apart from the Parquet and object-store code (pyarrow) so that the account's Budget actor,
which keeps its schedule file there, finds the folder without importing pyarrow.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    """Where evalpipe keeps its local files (the answer cache, object-store outputs' staging,
    the accounts' schedules): `$XDG_CACHE_HOME/evalpipe`, else `~/.cache/evalpipe` (a relative
    XDG path is ignored, as the XDG spec says)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "evalpipe"
