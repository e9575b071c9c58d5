"""The Python API: score a DataFrame or a corpus from a notebook or a script.

import evalpipe as ep
questions = {"helpful": ep.Noul("Does the review help a shopper decide?")}
service = ep.Service("https://evals.example.com", model="model-1.13.0")
df = ep.score(reviews, id="review_id", state="text", questions=questions, service=service)
"""

from evalpipe.api.calibrate import calibrate as calibrate
from evalpipe.api.columns import answer_column as answer_column, answer_dtype as answer_dtype
from evalpipe.api.infer import infer as infer, label_sample as label_sample
from evalpipe.api.questions import (
    Choice as Choice,
    Noul as Noul,
    Score as Score,
    Service as Service,
)
from evalpipe.api.reading import read as read
from evalpipe.api.run import (
    EvalpipeWarning as EvalpipeWarning,
    Job as Job,
    ascore as ascore,
    plan as plan,
    score as score,
)
from evalpipe.api.sampled import estimate as estimate
from evalpipe.engine import ProgressSnapshot as ProgressSnapshot
from evalpipe.lazy import lazy_exports

__all__, __getattr__ = lazy_exports(__name__)
