"""What the embedded service keeps between requests: prepared questions and its counters.

A batch job sends the same questions map with every row, so the service counts and compiles a
map once (`QuestionCache`); `Stats` are the counters `GET /_admin/stats` shows (what was
accepted, answered and billed, the faults injected, what is in flight).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalpipe.contract import dumps
from evalpipe.service.counting import ServiceCounter
from evalpipe.service.evaluator import Compiled, compile_questions
from evalpipe.service.faults import Fault


@dataclass(frozen=True, slots=True)
class PreparedQuestions:
    """A questions map's token counts and compiled form, worked out once."""

    tokens: dict[str, int]  # per question key, as the service counts (`ServiceCounter`)
    compiled: Compiled


class QuestionCache:
    """Prepared questions maps by their JSON. A batch job sends the same questions with every
    row; counting and compiling them anew was over a quarter of the cost of a small request."""

    def __init__(self, counter: ServiceCounter, size: int = 1024) -> None:
        self._counter = counter
        self._size = size
        self._items: dict[bytes, PreparedQuestions] = {}

    def prepare(self, questions: dict[str, Any]) -> PreparedQuestions:
        key = dumps(questions)  # in order: the order of the questions is that of the answers
        found = self._items.get(key)
        if found is None:
            if len(self._items) >= self._size:
                self._items.clear()  # another job's questions: start over, no recency to track
            tokens = {k: self._counter.question(q) for k, q in questions.items()}
            found = PreparedQuestions(tokens, compile_questions(questions))
            self._items[key] = found
        return found


class Stats:
    """Counters for `GET /_admin/stats`; touched only on the service's event loop."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.responses: Counter[int] = Counter()
        self.faults: Counter[str] = Counter()
        self.accepted = 0
        self.answered = 0  # evaluate requests answered whole: what the account is billed for
        self.tokens = 0
        self.inflight = 0
        self.peak_inflight = 0

    def enter(self) -> None:
        self.inflight += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)

    def snapshot(self, limits: Mapping[str, float]) -> dict[str, Any]:
        return {
            "responses": {str(code): n for code, n in sorted(self.responses.items())},
            "requests_accepted": self.accepted,
            "requests_answered": self.answered,
            "tokens_accepted": self.tokens,
            "rate_limited": self.responses[429],
            "overloaded": self.responses[529],
            "faults_injected": sum(self.faults.values()),
            "faults": {fault.value: self.faults[fault.value] for fault in Fault},
            "limits": dict(limits),
            "inflight": self.inflight,
            "peak_inflight": self.peak_inflight,
            "uptime_seconds": round(time.monotonic() - self.started, 3),
        }
