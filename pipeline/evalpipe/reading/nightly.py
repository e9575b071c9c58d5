"""Where a nightly series' outputs are: the `dt=*` folders of a location, or the `dt` partitions
of a Delta table.

A scheduler that writes each night's table under a Hive-style `dt=<date>` folder builds a
series (`out/dt=2026-11-23/`, `out/dt=2026-11-24/`, ...), on a local disk or an object store
alike; a Delta table partitioned by `dt` holds one in its partitions. Each night is then read
as any output is (`open_output`: a folder, or `TABLE/dt=...`).
"""

from __future__ import annotations

import pyarrow.fs as pafs

from evalpipe.errors import InputError, first_line
from evalpipe.lake import delta_target
from evalpipe.stores import parse_location, resolve, shown

PREFIX = "dt="


def nights(location: str) -> list[tuple[str, str]]:
    """The (date, output location) of every `dt=*` folder directly in `location`, by date;
    of a Delta table partitioned by `dt`, its partitions (`TABLE/dt=...`, as `open_output`
    reads one)."""
    target = delta_target(location)
    if target is not None and not target.partition:
        base = location.rstrip("/")
        dates = [p["dt"] for p in target.nights() if "dt" in p]
        return [(date, f"{base}/{PREFIX}{date}") for date in dates]
    fs, root = resolve(parse_location(location), InputError, "OUTPUT")
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except OSError as exc:
        raise InputError(f"'{shown(location)}' cannot be listed: {first_line(exc)}") from None
    found = sorted(
        i.base_name for i in infos
        if i.type == pafs.FileType.Directory and i.base_name.startswith(PREFIX)
    )  # fmt: skip
    base = location.rstrip("/")
    return [(name[len(PREFIX) :], f"{base}/{name}") for name in found]
