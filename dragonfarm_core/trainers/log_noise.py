"""Keep known library noise out of the logs people read (train.log, an evaluation's log).

A trainer's stderr is its run's log, which the Monitor shows as it is. Libraries warn there
about their own internals, e.g. transformers' FutureWarning that `is_gradient_checkpointing`
is deprecated, raised when peft wraps the model: nothing a person can act on, and it reads as
a problem with their run. Only the exact warnings listed are silenced, so any other warning
(a new deprecation, a real problem) still reaches the log.
"""

from __future__ import annotations

import warnings

# (category, start of the message as a regular expression, why it is noise).
KNOWN_NOISE: tuple[tuple[type[Warning], str, str], ...] = (
    (
        FutureWarning,
        r"`is_gradient_checkpointing` is deprecated",
        "transformers 5 deprecates the alias; peft still reads it when it wraps a model",
    ),
    (
        UserWarning,
        r"You are using 'rollout_func', which is an experimental feature",
        "TRL marks GRPOTrainer's rollout_func experimental; the GRPO trainer pins TRL and uses it",
    ),
    (
        Warning,
        r"You are importing from 'trl.experimental'",
        "ORPOTrainer lives in trl.experimental; the ORPO trainer pins TRL and uses it",
    ),
)


def quiet_library_noise() -> None:
    """Ignore the warnings in KNOWN_NOISE for the rest of this process."""
    for category, message, _why in KNOWN_NOISE:
        warnings.filterwarnings("ignore", message=message, category=category)
