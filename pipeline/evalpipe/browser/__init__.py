"""The results browser: a local web page over any output, to look at its rows and label them.

    views.py     the rows of an output as pages of a view (filter, sort) over millions of rows
    order.py     a sorted view's page without sorting the view (linear time)
    labels.py    the labels file: one durable CSV line per label, the format `agree` reads
    compare.py   two runs side by side, with `evalpipe diff`'s counts
    state.py     what the browser is open on, and its answers to the page, as JSON documents
    app.py       the web application: page, assets, JSON, behind the token; the CSP
    server.py    serving it on loopback on a thread of its own; `browse` and its handle
    assets/      the page, its script and its style sheet (no build step, nothing fetched)

A front door on the top floor: it reads outputs through `evalpipe.reading` and answers with
`evalpipe.analysis` (diff's comparison, the sampler of rows to label), and never imports the
run (import-linter's contracts in pyproject.toml).
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.browser.labels import LabelsFile as LabelsFile
    from evalpipe.browser.server import Browser as Browser, browse as browse
    from evalpipe.browser.state import Browsed as Browsed

__all__, __getattr__ = lazy_exports(__name__)
