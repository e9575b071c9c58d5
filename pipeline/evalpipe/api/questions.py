"""The questions and the service of a job, as Python objects for notebooks and scripts.

Each question is checked when it is made, by the same code (`evalpipe.contract`) and with the
same messages as a YAML config's (`ConfigError`), so a question the service would refuse is
refused in the cell that wrote it, before any request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalpipe.contract import validate_questions
from evalpipe.errors import ConfigError, ContractError


def _checked(kind: str, instructions: str, criteria: Any) -> dict[str, Any]:
    question: dict[str, Any] = {"type": kind, "instructions": instructions}
    if criteria is not None:
        question["criteria"] = criteria
    try:
        validate_questions({"question": question})
    except ContractError as exc:
        raise ConfigError(exc.message.replace("questions.question.", "", 1)) from None
    return question


@dataclass(frozen=True)
class Noul:
    """A yes/no question: the answer is the probability of yes, in the column `<key>__p_true`
    (from 0 to 1; above 0.5 reads as yes). `true` and `false` say what each answer means
    (optional)."""

    instructions: str
    true: str | None = None
    false: str | None = None

    def __post_init__(self) -> None:
        self.as_dict()

    def as_dict(self) -> dict[str, Any]:
        """The question as the service (and a YAML config) takes it."""
        criteria = {"true": self.true, "false": self.false}
        given = {k: v for k, v in criteria.items() if v is not None}
        return _checked("noul", self.instructions, given or None)


@dataclass(frozen=True)
class Choice:
    """One option of several: the columns `<key>__choice` (the most probable option, as
    written), `<key>__confidence` and `<key>__p__<option>` (one probability per option, named by
    the option made safe for SQL). `options` is a list of names, or a mapping of names to what
    each means."""

    instructions: str
    options: Sequence[str] | Mapping[str, str | None]

    def __post_init__(self) -> None:
        self.as_dict()

    def as_dict(self) -> dict[str, Any]:
        options = self.options
        criteria = dict(options) if isinstance(options, Mapping) else dict.fromkeys(options)
        return _checked("choice", self.instructions, criteria)


@dataclass(frozen=True)
class Score:
    """A level on an ordered scale (`levels`, lowest first): the columns `<key>__score` (the
    probability-weighted level, 0 for the first), `<key>__confidence` and `<key>__p__<level>`
    (one probability per level, named by its label made safe for SQL)."""

    instructions: str
    levels: Sequence[str]

    def __post_init__(self) -> None:
        self.as_dict()

    def as_dict(self) -> dict[str, Any]:
        return _checked("score", self.instructions, list(self.levels))


Question = Noul | Choice | Score


@dataclass(frozen=True)
class Service:
    """Who answers, and how: its URL (or "embedded", the reference service's made-up answers),
    the variable that holds the key (never the key itself), the versioned model, and the
    account's limits and price (optional; see the config reference).

    `packing`: rows per request, as the config's `packing.rows` (1, the default: one row per
    request; a number N; or "auto", which measures agreement and cost first), or the whole
    `packing` section as a mapping (`{"rows": "auto", "min_agreement": 0.95}`). It belongs to
    the service because what packing costs and how far answers agree depend on the service
    that answers; `ep.score(..., service=ep.Service(..., packing="auto"))`."""

    base_url: str
    model: str
    key_env: str = "EVAL_API_KEY"
    limits: Mapping[str, Any] = field(default_factory=dict)
    pricing: Mapping[str, Any] = field(default_factory=dict)
    packing: int | str | Mapping[str, Any] = 1

    def config(self) -> dict[str, Any]:
        """The config sections this service makes (`service`, `model`, `limits`, `pricing`)."""
        sections: dict[str, Any] = {
            "service": {"base_url": self.base_url, "api_key_env": self.key_env},
            "model": self.model,
        }
        if self.limits:
            sections["limits"] = dict(self.limits)
        if self.pricing:
            sections["pricing"] = dict(self.pricing)
        if isinstance(self.packing, Mapping):
            sections["packing"] = dict(self.packing)
        elif self.packing != 1:
            sections["packing"] = {"rows": self.packing}
        return sections


def question_dicts(questions: Mapping[str, Question | Mapping[str, Any]]) -> dict[str, Any]:
    """`questions` as a config's `questions` section (objects or plain dicts alike)."""
    return {
        key: q.as_dict() if isinstance(q, Noul | Choice | Score) else dict(q)
        for key, q in questions.items()
    }
