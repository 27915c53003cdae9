"""LoRA Odds Ratio Preference Optimization: what a run with method "orpo" executes.

    python -m dragonfarm_core.trainers.orpo RUN_DIR

(That skips the queue; the launcher runs `python -m dragonfarm_core.trainers RUN_DIR`.)
ORPO (Hong et al., 2024) needs no reference model, so it works from a base model that has not
been fine-tuned: per pair, the loss is the supervised loss on the chosen reply plus beta times
an odds-ratio penalty that pushes the odds of the chosen reply above those of the rejected one,

    loss = -mean log p(chosen) - beta * log sigmoid(log odds(chosen) - log odds(rejected)),
    odds(y) = p(y) / (1 - p(y)),   p(y) = exp(mean log-probability of y's tokens).

The implicit reward of a reply is beta x its mean token log-probability (as in TRL), so
pref_acc is how often the chosen reply is the likelier one. The training run itself is the
DPO trainer's (`dpo.train_preference`) with this score; everything it writes is the same.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
import torch.nn.functional as F

from dragonfarm_core.trainers.dpo import train_preference
from dragonfarm_core.trainers.pref_data import PairScores, reply_logps

# p(y) = 1 would make log(1 - p) infinite; a reply's mean log-probability never reaches 0 in
# practice, and this keeps one that rounds to it finite.
MAX_MEAN_LOGP = -1e-6


def log1m_exp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, accurate near 0 where 1 - exp(x) loses every digit."""
    return torch.log(-torch.expm1(x.clamp(max=MAX_MEAN_LOGP)))


def orpo_loss(chosen: torch.Tensor, rejected: torch.Tensor, beta: float) -> PairScores:
    """ORPO from the mean token log-probabilities of the chosen and rejected replies."""
    log_odds = (chosen - rejected) - (log1m_exp(chosen) - log1m_exp(rejected))
    loss = -chosen - beta * F.logsigmoid(log_odds)
    return PairScores(loss=loss, chosen=beta * chosen, rejected=beta * rejected)


def orpo_score(model: Any, batch: dict[str, torch.Tensor], n: int, beta: float) -> PairScores:
    """Score a batch whose rows 0..n-1 are chosen replies and n..2n-1 the rejected ones."""
    logps, counts = reply_logps(model, batch)
    mean = logps / counts.clamp(min=1)
    return orpo_loss(mean[:n], mean[n:], beta)


def main(run_dir: str | os.PathLike[str]) -> str:
    """Train the ORPO run in `run_dir`; returns "succeeded" or "cancelled"."""
    return train_preference(run_dir, orpo_score)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m dragonfarm_core.trainers.orpo RUN_DIR")
    main(sys.argv[1])
