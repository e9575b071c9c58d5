"""What becomes of each row, decided in one place for `evalpipe plan` and `evalpipe run`:
token counts, splitting into requests, repeats, the answer cache's part, and cost.

    requests.py  Request, Planner: which questions go in which request (one splitting rule)
    counts.py    a batch of text states' token counts in one call, the same as the contract's
    repeats.py   state_key, repeated states and stale committed rows, in one streaming pass
    rows.py      RowClassifier: each row's fate (invalid, over the limit, repeat, cached, send)
    price.py     the user's price per token, and the floor the limits set on a job's duration
    ratios.py    the service's token count per token of ours, kept per service and model
    packing.py   rows packed into one request (`packing.rows`), and what is kept of packing
    learned.py   Learned: what is learned per service and model, read and kept in one place
    prepared.py  PreparedJob: a job checked and ready, every check that needs no service
    trusted.py   a job's calibration file, held to the job's judge, its abstention chosen
    abstain.py   the abstention threshold: Clopper-Pearson over the candidate thresholds
    choice.py    PackingChoice: rows per request, the value a run's engine is handed

A Ray worker needs `Request` and `split_refused` alone; the rest (pyarrow under repeats.py, the
config's model under price.py) loads on first use (`evalpipe.lazy`).
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports
from evalpipe.planning.requests import (
    Planner as Planner,
    Request as Request,
    split_refused as split_refused,
)

if TYPE_CHECKING:
    from evalpipe.planning.abstain import (
        choose_threshold as choose_threshold,
        clopper_pearson as clopper_pearson,
    )
    from evalpipe.planning.choice import (
        Answered as Answered,
        PackingChoice as PackingChoice,
        Sampled as Sampled,
    )
    from evalpipe.planning.learned import Learned as Learned
    from evalpipe.planning.packing import Packer as Packer, packed_question as packed_question
    from evalpipe.planning.prepared import PreparedJob as PreparedJob, prepare as prepare
    from evalpipe.planning.price import (
        UNKNOWN as UNKNOWN,
        Price as Price,
        minimum_seconds as minimum_seconds,
        price_of as price_of,
        shown_usd as shown_usd,
    )
    from evalpipe.planning.repeats import (
        repeated_states as repeated_states,
        state_key as state_key,
        survey as survey,
    )
    from evalpipe.planning.rows import (
        CacheHit as CacheHit,
        Decision as Decision,
        Fate as Fate,
        RowClassifier as RowClassifier,
    )

__all__, __getattr__ = lazy_exports(__name__)
