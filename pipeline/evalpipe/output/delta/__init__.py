"""The Delta format (`output.format: delta`): one Delta Lake table for every night, written
exactly once and read as a reader names it; the only rooms that talk to delta-rs (`deltalake`).

    format.py   `DELTA`, the format as `evalpipe.output.formats` registers it: a run's partition
                opened for writing (`open_delta`), a table found for reading, its version
    schema.py   evalpipe's own schema inside a table (descriptions as `comment`, the question
                layout on the fields) and what a table can take
    commit.py   `DeltaCommitter`: an output sink's batches as Delta transactions, exactly once
    target.py   `DeltaTarget`: a table as a reader names it (`TABLE@VERSION`, `TABLE/dt=...`)
    table.py    open, write and read a table; its log (the log folder is named there only),
                commits, runs and the manifest made from its commit info

It was `evalpipe.lake`, a room below `output`: its only importers were the output's door and the
one reader, which now asks the door, so a format's writing and reading live in one place.
"""

from evalpipe.output.delta.format import DELTA

__all__ = ["DELTA"]
