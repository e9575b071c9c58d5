"""How the embedded service counts tokens: as the job does, or otherwise, for rehearsals.

The real service counts with a tokenizer of its own, which the job cannot see: a subword
tokenizer gives about 1.3 tokens per English word and several for a long word, a number or a
word in another script. To rehearse a job against such a service (and to test how the job
copes when its own count is low), `evalpipe serve` can count differently from the job:

    --token-rule words      the job's own rule (`evalpipe.contract.tokens`): the default
    --token-rule subword    a word of n characters is ceil(n / 4) tokens (13 letters: 4)
    --token-factor F        every count multiplied by F (rounded up)

The count is what the service bills (`usage.input_tokens`), what its rate limit spends, and
what its context limits are checked against.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal

from evalpipe.contract import TextCounter, count_question, count_text, count_value

TokenRule = Literal["words", "subword"]
TOKEN_RULES: tuple[TokenRule, ...] = ("words", "subword")
SUBWORD_CHARACTERS = 4  # a subword token covers about this many characters

_WORD = re.compile(r"\w+|[^\w\s]")


def count_subwords(text: str) -> int:
    """Tokens of `text` as a subword tokenizer roughly counts them: ceil(len / 4) per word, one
    per punctuation mark."""
    return sum(math.ceil(len(word) / SUBWORD_CHARACTERS) for word in _WORD.findall(text))


class ServiceCounter:
    """The embedded service's token count: a rule and a factor (see the module docstring)."""

    def __init__(self, rule: TokenRule = "words", factor: float = 1.0) -> None:
        self._text: TextCounter = count_subwords if rule == "subword" else count_text
        self._factor = factor

    def _scaled(self, tokens: int) -> int:
        return tokens if self._factor == 1.0 else math.ceil(tokens * self._factor)

    def state(self, state: Any) -> int:
        return self._scaled(count_value(state, self._text))

    def question(self, question: Mapping[str, Any]) -> int:
        return self._scaled(count_question(question, self._text))
