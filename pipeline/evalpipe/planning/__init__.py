"""What becomes of each row, decided in one place for `evalpipe plan` and `evalpipe run`:
token counts, splitting into requests, repeats, the answer cache's part, and cost.

    requests.py  Request, Planner: which questions go in which request (one splitting rule)
    counts.py    a batch of text states' token counts in one call, the same as the contract's
    repeats.py   state_key, repeated states and stale committed rows, in one streaming pass
    rows.py      RowClassifier: each row's fate (invalid, over the limit, repeat, cached, send)
    price.py     the user's price per token, and the floor the limits set on a job's duration
    ratios.py    the service's token count per token of ours, kept per service and model
    packing.py   rows packed into one request (`packing.rows`), and what is kept of packing

A Ray worker needs `Request` and `split_refused` alone; the rest (pyarrow under repeats.py, the
config's model under price.py) loads on first use (`evalpipe.lazy`).
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports
from evalpipe.planning.requests import Planner, Request, split_refused

if TYPE_CHECKING:
    from evalpipe.planning.packing import (
        Packer,
        field_prefix,
        keep_packing,
        known_packing,
        packed_question,
    )
    from evalpipe.planning.price import UNKNOWN, Price, minimum_seconds, price_of, shown_usd
    from evalpipe.planning.ratios import MIN_REQUESTS, keep_ratio, known_ratio
    from evalpipe.planning.repeats import repeated_states, state_key, survey
    from evalpipe.planning.rows import CacheHit, Decision, Fate, RowClassifier

__all__ = [
    "MIN_REQUESTS",
    "UNKNOWN",
    "CacheHit",
    "Decision",
    "Fate",
    "Packer",
    "Planner",
    "Price",
    "Request",
    "RowClassifier",
    "field_prefix",
    "keep_packing",
    "keep_ratio",
    "known_packing",
    "known_ratio",
    "minimum_seconds",
    "packed_question",
    "price_of",
    "repeated_states",
    "shown_usd",
    "split_refused",
    "state_key",
    "survey",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "evalpipe.planning.packing": (
            "Packer",
            "field_prefix",
            "keep_packing",
            "known_packing",
            "packed_question",
        ),
        "evalpipe.planning.price": ("UNKNOWN", "Price", "minimum_seconds", "price_of", "shown_usd"),
        "evalpipe.planning.ratios": ("MIN_REQUESTS", "keep_ratio", "known_ratio"),
        "evalpipe.planning.repeats": ("repeated_states", "state_key", "survey"),
        "evalpipe.planning.rows": ("CacheHit", "Decision", "Fate", "RowClassifier"),
    },
)
