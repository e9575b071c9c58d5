"""What runs before a run, or instead of one: `evalpipe plan`'s figures, the measurement of the
service's token count (`plan --calibrate N`), and the choice of how many rows go in one request
(`packing.rows`, measured first for `auto`).

Each sends nothing or a bounded, billed sample, and hands the run what it decided as a value
(`evalpipe.planning.PackingChoice`, a kept ratio): the engine imports nothing from here.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.preflight.choice import choose_packing
    from evalpipe.preflight.figures import format_plan, plan_figures
    from evalpipe.preflight.measure import Measurement, calibrate_packing
    from evalpipe.preflight.tokens import TokenCalibration, calibrate_tokens

__all__ = [
    "Measurement",
    "TokenCalibration",
    "calibrate_packing",
    "calibrate_tokens",
    "choose_packing",
    "format_plan",
    "plan_figures",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "evalpipe.preflight.choice": ("choose_packing",),
        "evalpipe.preflight.figures": ("format_plan", "plan_figures"),
        "evalpipe.preflight.measure": ("Measurement", "calibrate_packing"),
        "evalpipe.preflight.tokens": ("TokenCalibration", "calibrate_tokens"),
    },
)
