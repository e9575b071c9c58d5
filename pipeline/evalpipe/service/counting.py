"""How the embedded service counts tokens: as the job does, or otherwise, for rehearsals.

The real service counts with a tokenizer of its own, which the job cannot see: a subword
tokenizer gives about 1.3 tokens per English word and several for a long word, a number or a
word in another script, and it counts what the model reads, JSON's punctuation included. To
rehearse a job against such a service (and to test how the job copes when its own count is
low), `evalpipe serve` can count differently from the job:

    --token-rule words      the job's own rule (`evalpipe.contract.tokens`): the default
    --token-rule subword    a word of n characters is ceil(n / 4) tokens (13 letters: 4)
    --token-rule json       a state, and each question's instructions and criteria, as a BPE
                            tokenizer counts the JSON the model reads (`count_json`)
    --token-factor F        every count multiplied by F (rounded up)

The count is what the service bills (`usage.input_tokens`), what its rate limit spends, and
what its context limits are checked against.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal

from evalpipe.contract import TextCounter, count_question, count_text, count_value, dumps

TokenRule = Literal["words", "subword", "json"]
TOKEN_RULES: tuple[TokenRule, ...] = ("words", "subword", "json")
SUBWORD_CHARACTERS = 4  # a subword token covers about this many characters

_WORD = re.compile(r"\w+|[^\w\s]")
# In JSON text: an escape (`\n`, `\"`, `\u0007`) is a token, a word is one, and so is every
# other mark (a quote, a bracket, a brace, a colon, a comma, a backtick).
_JSON_TOKEN = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|\w+|[^\w\s]")


def count_subwords(text: str) -> int:
    """Tokens of `text` as a subword tokenizer roughly counts them: ceil(len / 4) per word, one
    per punctuation mark."""
    return sum(math.ceil(len(word) / SUBWORD_CHARACTERS) for word in _WORD.findall(text))


def count_json(value: Any) -> int:
    """Tokens of a value as a BPE tokenizer counts what the model reads: a string is its text
    (a word or a punctuation mark is a token, as evalpipe counts); anything else is its
    compact JSON, in which every quote, bracket, brace, colon and comma is a token too, and
    every escape (a string's newline is `\\n` there). So an object whose fields hold strings
    costs more than those strings alone: their keys, their quotes, the escapes of their
    newlines and quotes, and the punctuation between."""
    if isinstance(value, str):
        return count_text(value)
    return len(_JSON_TOKEN.findall(dumps(value).decode()))


class ServiceCounter:
    """The embedded service's token count: a rule and a factor (see the module docstring)."""

    def __init__(self, rule: TokenRule = "words", factor: float = 1.0) -> None:
        self._text: TextCounter = count_subwords if rule == "subword" else count_text
        self._json = rule == "json"
        self._factor = factor

    def _scaled(self, tokens: int) -> int:
        return tokens if self._factor == 1.0 else math.ceil(tokens * self._factor)

    def state(self, state: Any) -> int:
        if self._json:
            return self._scaled(count_json(state))
        return self._scaled(count_value(state, self._text))

    def question(self, question: Mapping[str, Any]) -> int:
        value = count_json if self._json else None
        return self._scaled(count_question(question, self._text, value))
