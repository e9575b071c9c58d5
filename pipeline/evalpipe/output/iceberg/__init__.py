"""The Iceberg format (`output.format: iceberg`): one Apache Iceberg table for every night, through
pyiceberg and the catalog the job names, written exactly once and read as a reader names it; the
only rooms that talk to pyiceberg.

    format.py   `ICEBERG`, the format as `evalpipe.output.formats` registers it: a run's night
                opened for writing (`open_iceberg`), a table found for reading, its version
    commit.py   `IcebergCommitter`: an output sink's batches as catalog commits, exactly once
    table.py    the catalog, evalpipe's schema in the table, the pointer a reader finds the table
                by, the rows of a night and the runs its snapshots recorded

pyiceberg is the Iceberg project's own Python library: it writes data and metadata through
pyarrow and commits through every catalog (SQL on SQLite or PostgreSQL, REST, Glue, S3 Tables),
so evalpipe writes none of Iceberg's metadata itself.
"""

from evalpipe.output.iceberg.format import ICEBERG

__all__ = ["ICEBERG"]
