"""`evalpipe browse OUTPUT`: the results browser, served on loopback until Ctrl-C.

Thin over `evalpipe.browser`: it opens the output (an `InputError` line and exit 2 when it is not
one, before anything is served), prints the address with its token, and serves until Ctrl-C or
SIGTERM.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import click

from evalpipe.cli.options import file_flag, reports_errors


@click.command()
@click.argument("output")
@click.option(
    "--vs", default=None, metavar="OTHER",
    help="Compare with this output of the same corpus (after; OUTPUT is before): the rows "
    "whose answers changed, and per question the counts `evalpipe diff` gives.",
)  # fmt: skip
@file_flag(
    "--labels",
    help="Write labels to this CSV file (one line per label, the format `evalpipe agree` "
    "reads, with _reviewer, _labelled_at, _design and _inclusion_prob); made if missing, "
    "appended to if it exists. Without it, the page labels nothing.",
)
@click.option(
    "--input", "corpus", default=None, metavar="CORPUS",
    help="The corpus OUTPUT scored (Parquet: a file, a folder or an object-store URI), to show "
    "each row's state and search its text.",
)  # fmt: skip
@click.option("--reviewer", default=None, metavar="NAME",
              help="The name labels carry [the login name].")  # fmt: skip
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to serve on (loopback: this machine only).")  # fmt: skip
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="The port (0: a free one).")  # fmt: skip
@reports_errors
def browse(output: str, labels: Path | None, **options: Any) -> None:
    """Browse the rows of the job output in OUTPUT (a directory, an object-store URI or a Delta
    table: TABLE, TABLE@VERSION, TABLE/dt=...) in a web page: page through millions of rows,
    filter, sort, open a row, compare with another run (--vs) and label rows (--labels).

    The page is served on 127.0.0.1 with a random token in its address (printed here; a
    request without it gets nothing), until Ctrl-C. Labels are written to --labels only;
    the output is only read.
    """
    from evalpipe.browser import Browsed, Browser

    browsed = Browsed(
        output, vs=options["vs"], labels=labels, corpus=options["corpus"],
        reviewer=options["reviewer"],
    )  # fmt: skip
    server = Browser(browsed, options["host"], options["port"])
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    click.echo(f"evalpipe browse: {browsed.output.shown} ({browsed.rows.total:,} rows)", err=True)
    click.echo(server.url)
    sys.stdout.flush()
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
