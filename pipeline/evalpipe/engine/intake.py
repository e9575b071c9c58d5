"""How the corpus's rows enter a job: whether Ray is needed at once, and what a batch costs.

A run the answer cache answers whole is a notebook's rerun of a scored cell, and should take seconds
(bench k in bench/RESULTS.md: 100,000 rows). Two things decide that here. `sends_soon` asks the
cache about a few first states before Ray is started: a run that will send starts Ray at once (its
start-up overlaps the scans), a run the cache answers whole never starts it. `gc_paused` holds
Python's cyclic garbage collector while one batch is read and classified: a batch makes some hundred
thousand small objects that live until the sink has them, and each time they crossed the collector's
thresholds it walked the whole heap (polars', pyarrow's, Ray's modules and all): 12-13 full
collections per 100,000 cached rows, a quarter of the driver's CPU time. Paused per batch, the
collector runs between batches (the garbage it waits for is one batch's at most), and never stays
off: it is on again even when the batch raises.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from evalpipe.cache import JobCache
from evalpipe.input import Source
from evalpipe.planning import state_key

SENDS_SOON_STATES = 256  # the corpus's first states asked of the cache before Ray starts


def sends_soon(source: Source, cache: JobCache) -> bool:
    """Whether one of the corpus's first states is one the cache cannot answer whole. Then Ray
    starts at once; otherwise when the first request is due, so a run the cache answers whole
    never starts it. A few states tell: asking about a whole batch cost a cached 100k-row run
    a tenth of its time."""
    if not cache.on:
        return True
    states = next(source.state_batches(), [])[:SENDS_SOON_STATES]
    digests = list({state_key(s) for s in states if s is not None})
    hits = cache.lookup(digests)
    return any(d not in hits or len(hits[d].answers) < len(cache.questions) for d in digests)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector held for the block (see the module docstring); as it was
    before, afterwards (a caller that turned it off keeps it off)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
