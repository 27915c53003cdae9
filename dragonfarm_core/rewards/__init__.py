"""Verifiable rewards for GRPO (`dragon.reward`, `dragon.reinforce(rewards=[...])`).

    import dragonfarm_core as dragon
    rewards = [dragon.reward("numeric"), dragon.reward("length", max_chars=300, weight=0.2)]

`spec` holds the `Reward` settings object, `builtin`, `command` and `custom` score one
completion, and `scoring` scores batches for the trainer and counts failures.
"""

from dragonfarm_core.rewards.errors import RewardError, RewardTimeout
from dragonfarm_core.rewards.scoring import RewardErrors, Scores, completion_text, score, score_one
from dragonfarm_core.rewards.spec import (
    NEEDS_REFERENCE,
    TYPES,
    Reward,
    assign_names,
    reward,
    reward_names,
)

__all__ = [
    "NEEDS_REFERENCE",
    "TYPES",
    "Reward",
    "RewardError",
    "RewardErrors",
    "RewardTimeout",
    "Scores",
    "assign_names",
    "completion_text",
    "reward",
    "reward_names",
    "score",
    "score_one",
]
