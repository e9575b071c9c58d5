"""`ep.browse`: the results browser from Python or Jupyter, started when called (the web server
and the queries are `evalpipe.browser`'s, imported then, so that `import evalpipe` stays light)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evalpipe.browser import Browser


def browse(
    output: str, *, vs: str | None = None, labels: str | None = None, input: str | None = None,
    reviewer: str | None = None, host: str = "127.0.0.1", port: int = 0,
) -> Browser:  # fmt: skip
    """Open the results browser over `output` (a folder of Parquet parts, an object-store URI or
    a Delta table), as `evalpipe browse` does, and return at once.

    `vs`: another output of the same corpus, to compare with (the rows whose answers changed,
    and `evalpipe diff`'s counts); `labels`: the CSV file labels are written to (the format
    `evalpipe agree` reads); `input`: the corpus, for the states; `reviewer`: the name labels
    carry (the login name by default); `host`, `port`: where to listen (loopback, a free port).

    The returned handle's `url` is the page's address with its random token; `stop()` ends the
    server. In Jupyter, the handle shows the page inline (an IFrame of that address)."""
    from evalpipe.browser import browse as start

    return start(output, vs=vs, labels=labels, input=input, reviewer=reviewer, host=host,
                 port=port)  # fmt: skip
