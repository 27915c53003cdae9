"""Reinforcement learning with verifiable rewards (GRPO): `reinforce()` and `test_rewards()`.

    rewards = [dragon.reward("numeric"), dragon.reward("length", max_chars=300, weight=0.2)]
    dragon.test_rewards(rewards, sft_run, math_prompts, n=4)      # the spread, before training
    rl = dragon.reinforce(math_prompts, sft_run, rewards, group_size=6, wait=True)

reinforce() writes the run directory (the rewards, with a copy of each custom reward's file, go
into config.json's method_args), spawns the trainer (`dragonfarm_core.trainers.grpo`) and returns
at once unless wait=True. test_rewards() samples through the inference layer, so neither
function imports torch in the calling process.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import pandas as pd

from dragonfarm_core.method_args import GrpoArgs, ReinforceArgs, check_rewards
from dragonfarm_core.methods import METHODS
from dragonfarm_core.rewards import Reward, RewardErrors, score
from dragonfarm_core.rundir.run import Run
from dragonfarm_core.settings import Hardware, Lora, TrainArgs
from dragonfarm_core.spec import DEFAULT_HARDWARE, RunSpec, check_dataset
from dragonfarm_core.training.train import start

# ReinforceArgs and check_rewards live in method_args; the GRPO trainer imports them from here.
__all__ = ["ReinforceArgs", "check_rewards", "reinforce", "test_rewards"]


def reinforce(
    dataset: Any,
    model: Any,
    rewards: list[Reward] | Reward,
    group_size: int = ReinforceArgs.group_size,  # the method args' own defaults (method_args.py)
    beta: float = ReinforceArgs.beta,
    temperature: float = ReinforceArgs.temperature,
    max_new_tokens: int = ReinforceArgs.max_new_tokens,
    loss_type: str = ReinforceArgs.loss_type,
    scale_rewards: str = ReinforceArgs.scale_rewards,
    lora: Lora | None = None,
    args: TrainArgs | None = None,
    hardware: Hardware = DEFAULT_HARDWARE,
    name: str | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    n_samples: int = RunSpec.n_samples,
    revision: str | None = None,
    trust_remote_code: bool = False,
    wait: bool = False,
) -> Run:
    """GRPO: the model writes `group_size` completions per prompt, the rewards score them
    (summed by weight), and it is pushed towards those that beat their group's average, with a
    KL penalty (`beta`) against the model it started from. `loss_type` and `scale_rewards`
    are TRL's (GRPOConfig): how token losses are averaged (dapo, grpo, dr_grpo, bnpo) and what
    the advantages are divided by (the group's reward spread, the step's, or none).

    `dataset` is mapped with .map_prompts(); `model` is usually a finished run to continue from
    (train(), then prefer(), then this). args.batch_size counts prompts per micro-batch. At the
    end, eval.json holds the mean reward (total and per reward) on the held-out prompts, with
    greedy replies. Returns the Run at once; with wait=True, blocks until it ends.
    """
    settings = GrpoArgs(rewards=check_rewards(rewards), group_size=group_size, beta=beta,
                        temperature=temperature, max_new_tokens=max_new_tokens,
                        loss_type=loss_type, scale_rewards=scale_rewards)  # fmt: skip
    spec = RunSpec(
        "grpo", dataset, model, lora=lora, args=args, hardware=hardware, method_args=settings,
        name=name, n_samples=n_samples, revision=revision, trust_remote_code=trust_remote_code,
    )  # fmt: skip
    return start(spec, run_dir, runs_dir, wait)


def _prompt_items(prompts: Any, rewards: list[Reward], max_prompts: int) -> list[dict[str, Any]]:
    """Records in the prompts format, from a list of str or a prompts-mapped Dataset."""
    if isinstance(prompts, str):
        prompts = [prompts]
    if isinstance(prompts, list | tuple):
        if not prompts or not all(isinstance(p, str) and p.strip() for p in prompts):
            raise TypeError("prompts must be a non-empty list of non-empty str, or a Dataset "
                            "mapped with .map_prompts().")  # fmt: skip
        needing = GrpoArgs(rewards=rewards).needing_reference
        if needing:
            raise ValueError(
                f"Reward(s) {', '.join(map(repr, needing))} compare with a reference answer, "
                "which plain str prompts lack; pass a Dataset mapped with "
                ".map_prompts(prompt=..., reference=...)."
            )
        return [{"prompt": [{"role": "user", "content": p}], "reference": None, "fields": {}}
                for p in prompts]  # fmt: skip
    check_dataset(METHODS["grpo"], prompts, GrpoArgs(rewards=rewards))
    return prompts.records()[:max_prompts]


def _warn_failures(errors: RewardErrors) -> None:
    for name, tally in errors.tallies.items():
        if tally.errors:
            last = (tally.first_traceback or "").strip().splitlines()[-1:]
            warnings.warn(
                f"Reward {name!r} failed on {tally.errors} of {tally.calls} completions (scored "
                f"0); the first error: {last[0] if last else 'unknown'}",
                stacklevel=3,
            )


def test_rewards(
    rewards: list[Reward] | Reward,
    x: Any,
    prompts: Any,
    n: int = 4,
    max_new_tokens: int = ReinforceArgs.max_new_tokens,
    temperature: float = 1.0,
    max_prompts: int = 8,
    backend: Any = None,
) -> pd.DataFrame:
    """Dry-run the rewards: sample `n` completions per prompt from `x` and score them.

    x: a Run, a run directory or a model (as for dragon.generate). prompts: a list of str, or a
    Dataset mapped with .map_prompts() (its first `max_prompts` rows, references and other
    columns included, as the trainer scores them). Returns one row per completion: prompt,
    completion, one column per reward, total. A reward that fails on a completion scores 0
    there and a warning quotes its first error; one that runs out of time (a regex that
    backtracks without end) raises RewardTimeout, naming the limit, at once. It samples like
    reinforce(): the same temperature, top_p 1 (a backend's own defaults, such as a model's
    repetition penalty in the local worker, may still apply).
    """
    from dragonfarm_core.conversation.generation import target_for
    from dragonfarm_core.inference.default import backend as default_backend
    from dragonfarm_core.inference.protocol import Sampling

    named = check_rewards(rewards)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a whole number >= 1, got {n!r}.")
    items = _prompt_items(prompts, named, max_prompts)
    backend = backend or default_backend()
    target = target_for(x, False, backend)
    rows = [item for item in items for _ in range(n)]
    completions = backend.generate(
        target.spec, [r["prompt"] for r in rows], Sampling(max_new_tokens, temperature, 1.0)
    )
    texts = [next(m["content"] for m in reversed(r["prompt"]) if m["role"] == "user")
             for r in rows]  # fmt: skip
    errors = RewardErrors()
    scores = score(named, texts, completions, [r.get("reference") for r in rows],
                   [r.get("fields") or {} for r in rows], errors,
                   raise_timeouts=True)  # fmt: skip
    _warn_failures(errors)
    return pd.DataFrame({"prompt": texts, "completion": list(completions),
                         **scores.per_reward, "total": scores.total})  # fmt: skip


test_rewards.__test__ = False  # type: ignore[attr-defined]  # not a pytest test
