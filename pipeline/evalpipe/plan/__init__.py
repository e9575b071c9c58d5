"""What becomes of each row, decided in one place for `evalpipe plan` and `evalpipe run`:
token counts, splitting into requests, repeats, the answer cache's part, and cost.

    requests.py  Request, Planner: which questions go in which request (one splitting rule)
    repeats.py   state_key, repeated states and stale committed rows, in one streaming pass
    rows.py      RowClassifier: each row's fate (invalid, over the limit, repeat, cached, send)
    cost.py      dollars per token, and the floor the limits set on a job's duration
"""

from evalpipe.plan.price import PRICE_PER_MILLION_INPUT_TOKENS, cost, minimum_seconds
from evalpipe.plan.repeats import repeated_states, state_key, survey
from evalpipe.plan.requests import Planner, Request, split_refused
from evalpipe.plan.rows import CacheHit, Decision, Fate, RowClassifier

__all__ = [
    "PRICE_PER_MILLION_INPUT_TOKENS",
    "CacheHit",
    "Decision",
    "Fate",
    "Planner",
    "Request",
    "RowClassifier",
    "cost",
    "minimum_seconds",
    "repeated_states",
    "split_refused",
    "state_key",
    "survey",
]
