"""The Python API: score a DataFrame or a corpus from a notebook or a script.

import evalpipe as ep
questions = {"helpful": ep.Noul("Does the review help a shopper decide?")}
service = ep.Service("https://evals.example.com", model="model-1.13.0")
df = ep.score(reviews, id="review_id", state="text", questions=questions, service=service)
"""

from evalpipe.api.columns import answer_column, answer_dtype
from evalpipe.api.questions import Choice, Noul, Score, Service
from evalpipe.api.reading import read
from evalpipe.api.run import EvalpipeWarning, Job, ascore, plan, score
from evalpipe.api.sampled import estimate
from evalpipe.engine import ProgressSnapshot

__all__ = [
    "Choice",
    "EvalpipeWarning",
    "Job",
    "Noul",
    "ProgressSnapshot",
    "Score",
    "Service",
    "answer_column",
    "answer_dtype",
    "ascore",
    "estimate",
    "plan",
    "read",
    "score",
]
