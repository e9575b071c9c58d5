"""95% intervals by the bootstrap, in one place, so `diff` and `agree` compute them alike.

`scipy.stats.bootstrap` does the work (BCa intervals for means, percentile intervals for
statistics computed per resample such as kappa; a fixed seed so a figure does not move
between two runs of the command, resamples batched so memory stays bounded on large tables).
Degenerate data — one category only, every difference the same, fewer than two rows — has no
spread to resample: the interval is then the estimate itself, or None when there is nothing.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000  # for a vectorized statistic (a mean); 1000 for one computed per resample
SEED = 20261125
_BATCH_CELLS = 5_000_000  # resampled values held at once: bounded memory on large tables

Statistic = Callable[..., Any]


def interval(
    samples: tuple[np.ndarray, ...],
    statistic: Statistic,
    paired: bool = True,
    vectorized: bool = False,
    per_resample: bool | None = None,
) -> tuple[float, float] | None:
    """The 95% bootstrap interval of `statistic` over `samples` (rows resampled together when
    `paired`), or None when there are fewer than two rows. A `vectorized` statistic takes
    `axis` (scipy's convention). A statistic that is `per_resample` (by default, one that is
    not vectorized) gets the percentile interval of 1000 resamples, others BCa over 2000."""
    per_resample = not vectorized if per_resample is None else per_resample
    n = len(samples[0])
    if n < 2:
        return None
    if all(np.ptp(s) == 0 for s in samples) or _constant(samples, statistic):
        value = float(statistic(*samples))
        return (value, value)
    options = {
        "paired": paired,
        "vectorized": vectorized,
        "n_resamples": RESAMPLES // 2 if per_resample else RESAMPLES,
        "confidence_level": CONFIDENCE,
        "random_state": SEED,
        "batch": max(1, _BATCH_CELLS // (n * len(samples))),
    }
    # BCa for a vectorized statistic (cheap); a statistic computed per resample takes the
    # percentile method, since BCa's jackknife would cost one more evaluation per row
    low, high = _bootstrap(samples, statistic, "percentile" if per_resample else "BCa", options)
    if np.isnan(low) or np.isnan(high):  # BCa undefined (e.g. a statistic that barely moves)
        low, high = _bootstrap(samples, statistic, "percentile", options)
    return (low, high)


def _constant(samples: tuple[np.ndarray, ...], statistic: Statistic) -> bool:
    """Paired samples whose differences are all the same (a shift): nothing to resample."""
    if len(samples) != 2:
        return False
    differences = samples[1] - samples[0]
    return bool(np.ptp(differences) == 0) and samples[0].dtype.kind == "f"


def _bootstrap(
    samples: tuple[np.ndarray, ...], statistic: Statistic, method: str, options: dict[str, Any]
) -> tuple[float, float]:
    from scipy import stats  # here: a second to import, which `evalpipe report` need not pay

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples: BCa gives NaN, handled above
        result = stats.bootstrap(samples, statistic, method=method, **options)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def mean_change(a: np.ndarray, b: np.ndarray) -> tuple[float, tuple[float, float] | None]:
    """The change in mean from `a` to `b` over paired rows, with its 95% interval."""

    def change(x: np.ndarray, y: np.ndarray, axis: int = -1) -> Any:
        return np.mean(y, axis=axis) - np.mean(x, axis=axis)

    return float(change(a, b)), interval((a, b), change, vectorized=True)
