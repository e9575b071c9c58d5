"""What the client tests share: a request, the answer a good service gives it, a recording Pacer."""

from __future__ import annotations

from typing import Any

from evalpipe.contract.resources import validate_questions

KEY = "sk-test-7f3a9c1e5b2d4068"

QUESTIONS = {
    "helpful": {
        "type": "noul",
        "instructions": "Does the review help a buyer decide?",
        "criteria": {"true": "it gives concrete reasons", "false": "it is vague"},
    },
    "sentiment": {
        "type": "choice",
        "instructions": "What is the overall sentiment?",
        "criteria": {"positive": None, "negative": "complaints dominate", "neutral": None},
    },
    "quality": {
        "type": "score",
        "instructions": "How well written is the review?",
        "criteria": ["poor", "fair", "good"],
    },
}
PARSED = validate_questions(QUESTIONS)
PAYLOAD = {
    "state": "The kettle boils fast and looks good, but the lid broke after a week.",
    "model": "model-1.13.0",
    "questions": QUESTIONS,
}


def good_answer() -> dict[str, Any]:
    return {
        "model": "model-1.13.0",
        "answers": {
            "helpful": {"type": "noul", "noul": 0.8},
            "sentiment": {
                "type": "choice",
                "choice": "negative",
                "probabilities": {"positive": 0.2, "negative": 0.5, "neutral": 0.3},
                "confidence": 0.25,
            },
            "quality": {
                "type": "score",
                "score": 1.1,
                "legend": {"0": "poor", "1": "fair", "2": "good"},
                "probabilities": {"0": 0.2, "1": 0.5, "2": 0.3},
                "confidence": 0.25,
            },
        },
        "usage": {"input_tokens": 57, "output_tokens": 0},
    }


class RecordingPacer:
    """A Pacer that lets everything through and remembers what it was told."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.acquired: list[int] = []
        self.successes: list[tuple[int, int]] = []
        self.rate_limited = 0
        self._fail_with = fail_with

    async def acquire(self, tokens: int) -> None:
        if self._fail_with is not None:
            raise self._fail_with
        self.acquired.append(tokens)

    def on_success(self, estimated_tokens: int, input_tokens: int) -> None:
        self.successes.append((estimated_tokens, input_tokens))

    def on_rate_limited(self) -> None:
        self.rate_limited += 1
