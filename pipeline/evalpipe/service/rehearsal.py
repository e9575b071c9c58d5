"""What the embedded service can be told, to rehearse a judge that cannot be trusted as it is.

Two settings (`evalpipe serve --overconfidence T --drift SHARE`, `ServiceSettings`, and at run
time `POST /_admin/faults`, `EmbeddedService.set_faults`), each known exactly, so that a test or
a how-to knows the truth it should find:

- `overconfidence` T: a known miscalibration. The reference evaluator's own answer is the
  truth (what the service says with T = 1: labels drawn from it are what people would say);
  the service reports the same answer sharpened, every log-odds of a yes/no answer times T
  (p' = sigmoid(T * logit(p))), every distribution raised to the power T and normalised
  (p'_k = p_k^T / sum_j p_j^T). T > 1 is overconfident (its 0.9 means less), T < 1
  underconfident. The choice and the most probable level never change; the score and the
  confidence are those of the reported distribution. So the truth is p = sigmoid(logit(p') / T)
  (yes/no) and p_k = p'_k^(1/T) normalised.
- `drift` SHARE (with `drift_seed`): a share of states answered anew under the same model ID,
  as a newer version would (`evaluator.revised`: p(yes) becomes p(no); a distribution moves one
  option or level on, so the choice and the most probable level change). Which states is drawn
  by a hash of the state's canonical JSON and the seed, so a night's canary meets the same
  changed rows as the corpus; another seed changes another share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

from evalpipe.contract import dumps

_CLIP = 1e-12  # p kept inside (0, 1) for its log-odds


@dataclass(frozen=True, slots=True)
class Rehearsal:
    """The service's rehearsal settings (module docstring); the defaults change nothing."""

    overconfidence: float = 1.0
    drift: float = 0.0
    drift_seed: int = 0

    @property
    def changes_nothing(self) -> bool:
        return self.overconfidence == 1.0 and self.drift <= 0

    def drifts(self, state: Any) -> bool:
        """Does the service answer this state anew (a share `drift` of states)?"""
        if self.drift <= 0:
            return False
        text = b"drift\n%d\n" % self.drift_seed + dumps(state)
        drawn = int.from_bytes(blake2b(text, digest_size=8).digest(), "big") / 2**64
        return drawn < self.drift

    def reported(self, answers: dict[str, Any]) -> dict[str, Any]:
        """Answers as the miscalibrated service reports them (`overconfidence`)."""
        if self.overconfidence == 1.0:
            return answers
        return {key: self._sharpened(answer) for key, answer in answers.items()}

    def _sharpened(self, answer: dict[str, Any]) -> dict[str, Any]:
        power = self.overconfidence
        if answer["type"] == "noul":
            p = min(1 - _CLIP, max(_CLIP, float(answer["noul"])))
            logit = min(500.0, max(-500.0, power * math.log(p / (1 - p))))
            return {**answer, "noul": 1.0 / (1.0 + math.exp(-logit))}
        keys = list(answer["probabilities"])
        logs = [power * math.log(max(_CLIP, answer["probabilities"][k])) for k in keys]
        top = max(logs)
        weights = [math.exp(x - top) for x in logs]
        total = math.fsum(weights)
        probs = [w / total for w in weights]
        sharpened = dict(answer, probabilities=dict(zip(keys, probs, strict=True)))
        sharpened["confidence"] = _concentration(max(probs), len(probs))
        if answer["type"] == "score":
            sharpened["score"] = math.fsum(i * p for i, p in enumerate(probs))
        return sharpened


def _concentration(p_max: float, n: int) -> float:
    """The answer's `confidence`, as the service derives it: (n * p_max - 1) / (n - 1)."""
    return 1.0 if n <= 1 else min(1.0, max(0.0, (n * p_max - 1) / (n - 1)))
