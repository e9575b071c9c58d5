"""Where a nightly series' outputs are: the `dt=*` folders of a location, or the `dt` partitions
of a table.

A scheduler that writes each night's table under a Hive-style `dt=<date>` folder builds a
series (`out/dt=2026-11-23/`, `out/dt=2026-11-24/`, ...), on a local disk or an object store
alike; a Delta table partitioned by `dt` holds one in its partitions. Which it is, the output's
door says (`evalpipe.output.stored_at`: each format lists its own nights); each night is then read
as any output is (`open_output`: a folder, or `TABLE/dt=...`).
"""

from __future__ import annotations

from evalpipe.output import stored_at


def nights(location: str) -> list[tuple[str, str]]:
    """The (date, output location) of every night in `location`, by date: its `dt=*` folders,
    or of a table partitioned by `dt`, its partitions (`TABLE/dt=...`, as `open_output` reads
    one)."""
    return stored_at(location).nights()
