"""What runs before a run, or instead of one: `evalpipe plan`'s figures, the measurement of the
service's token count (`plan --calibrate N`), the choice of how many rows go in one request
(`packing.rows`, measured first for `auto`), and the canary asked before the corpus.

Each sends nothing or a bounded, billed sample, and hands the run what it decided as a value
(`evalpipe.planning.PackingChoice`, a kept ratio): the engine imports nothing from here.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.preflight.canary import (
        check_canary as check_canary,
        read_canary as read_canary,
    )
    from evalpipe.preflight.choice import (
        calibrate_packing as calibrate_packing,
        choose_packing as choose_packing,
    )
    from evalpipe.preflight.figures import format_plan as format_plan, plan_figures as plan_figures
    from evalpipe.preflight.measure import Measurement as Measurement
    from evalpipe.preflight.tokens import (
        TokenCalibration as TokenCalibration,
        calibrate_tokens as calibrate_tokens,
    )

__all__, __getattr__ = lazy_exports(__name__)
