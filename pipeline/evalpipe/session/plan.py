"""`evalpipe plan`: a job's figures, measured first on a few real requests when asked.

Without `--calibrate N` nothing is sent (`evalpipe.preflight.plan_figures`). With it, N requests
of the corpus's states measure the service's token count per token of ours, and for `packing.rows:
auto` N rows are asked alone and packed; each is kept for the next plan and run of the service
and model (`evalpipe.planning.Learned`), and the figures are the service's count.
"""

from __future__ import annotations

from typing import Any

from evalpipe.planning import Learned, PreparedJob
from evalpipe.preflight import calibrate_packing, calibrate_tokens, plan_figures


def plan_job(prepared: PreparedJob, calibrate: int | None = None) -> dict[str, Any]:
    """The plan's figures for `prepared`; with `calibrate` N, measured on N requests first."""
    if not calibrate:
        return plan_figures(prepared)
    source = f"plan --calibrate {calibrate}"
    tokens = calibrate_tokens(prepared, calibrate)
    measured = tokens.figures()
    if tokens.ratio is not None:  # the next plan and the next run plan with it too
        Learned.of(prepared).keep_ratio(tokens.ratio, source)
    packed = calibrate_packing(prepared, calibrate)  # agreement packed vs alone, for `auto`
    if packed is not None:
        measured["packing_calibration_requests"] = packed.requests
        measured["packing_calibration_billed_tokens"] = packed.billed_tokens
    return {**measured, **plan_figures(prepared, tokens.ratio, source)}
