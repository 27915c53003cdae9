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

import dataclasses
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd

from dragonfarm_core.data.codegen import literal
from dragonfarm_core.rewards import Reward, RewardErrors, assign_names, reward_names, score
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import Run
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs
from dragonfarm_core.trainers.config import extra_args
from dragonfarm_core.training import start_training

DEFAULT_LORA, DEFAULT_HARDWARE = Lora(), Hardware()
# The manual's defaults for GRPO: a small learning rate, one pass, a checkpoint every 20 steps.
DEFAULT_ARGS = TrainArgs(learning_rate=1e-5, epochs=1, batch_size=4, grad_accum=1, save_steps=20)


def _meta(label: str, help: str, min: float, max: float, step: float | None) -> dict[str, Any]:
    return {"label": label, "help": help, "min": min, "max": max, "choices": None, "step": step}


@dataclass(frozen=True)
class ReinforceArgs:
    """GRPO's own settings: config.json's method_args besides the rewards.

    TrainArgs.batch_size counts prompts: each optimizer step samples batch_size x grad_accum
    prompts, and group_size completions of each.
    """

    group_size: int = field(
        default=4,
        metadata=_meta(
            "Group size",
            "Completions sampled per prompt; each is judged against its group's "
            "average, so at least 2. More gives a steadier signal and costs more.",
            2,
            64,
            1,
        ),
    )
    beta: float = field(
        default=0.04,
        metadata=_meta(
            "KL penalty (beta)",
            "How strongly the model is held near the one it started from; 0 lets it drift freely.",
            0.0,
            10.0,
            0.01,
        ),
    )
    temperature: float = field(
        default=1.0,
        metadata=_meta(
            "Temperature",
            "Sampling temperature of the completions; above 0, or every completion "
            "of a group is the same.",
            0.05,
            5.0,
            0.05,
        ),
    )
    max_new_tokens: int = field(default=128, metadata=_meta(
        "Max new tokens", "Longest completion; longer ones are cut and scored as they are.",
        1, 8192, 1))  # fmt: skip

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, meta = getattr(self, f.name), f.metadata
            whole = f.type == "int"
            if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
                kind = "a whole number" if whole else "a number"
                raise SettingsError(f"{f.name} must be {kind}, got {value!r}.")
            if not math.isfinite(value) or not meta["min"] <= value <= meta["max"]:
                raise SettingsError(
                    f"{f.name} = {value} is out of range; use a value between "
                    f"{meta['min']} and {meta['max']}."
                )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_rewards(rewards: Any) -> list[Reward]:
    """The rewards as a named list; one Reward alone is accepted as a list of one."""
    if isinstance(rewards, Reward):
        rewards = [rewards]
    if not isinstance(rewards, list | tuple) or not rewards:
        raise ValueError(
            "rewards must be a non-empty list of dragon.reward(...), e.g. "
            '[dragon.reward("numeric"), dragon.reward("length", max_chars=300)].'
        )
    for i, r in enumerate(rewards):
        if not isinstance(r, Reward):
            raise TypeError(
                f"rewards[{i}] is a {type(r).__name__}, not a reward; build it with "
                'dragon.reward(type, ...), e.g. dragon.reward("regex", pattern=r"T-\\d{4}").'
            )
    return assign_names(list(rewards))


def _needing_reference(rewards: list[Reward]) -> list[str]:
    return [name for r, name in zip(rewards, reward_names(rewards), strict=True)
            if r.needs_reference]  # fmt: skip


def check_prompts_dataset(dataset: Any, rewards: list[Reward]) -> None:
    """Refuse a dataset that is not mapped as prompts, or has no reference a reward needs."""
    mapping = getattr(dataset, "mapping", None)
    if not callable(getattr(dataset, "split_records", None)):
        raise TypeError(
            f"dataset must be a dragon.dataset(...) mapped with .map_prompts(prompt=..., "
            f"reference=...), got {type(dataset).__name__}."
        )
    if mapping is None or mapping.kind != "prompts":
        got = "not mapped" if mapping is None else f"mapped as {mapping.kind!r}"
        raise ValueError(
            f"reinforce() practises on prompts: map dataset {dataset.name!r} with "
            f".map_prompts(prompt=..., reference=...); it is {got}."
        )
    needing = _needing_reference(rewards)
    if needing and mapping.reference is None:
        raise ValueError(
            f"Reward(s) {', '.join(map(repr, needing))} compare completions with a reference "
            f"answer, but dataset {dataset.name!r} maps no reference column. Map one with "
            ".map_prompts(prompt=..., reference='answer'), or use rewards that need none "
            "(regex, length, json, keyword, command, custom)."
        )


def _store_rewards(run_dir: Path, rewards: list[Reward]) -> None:
    """Copy custom reward files into the run and record the copies in config.json."""
    copies = [r.copy_into(run_dir) for r in rewards]
    config = files.read_config(run_dir)
    config["method_args"]["rewards"] = [r.to_dict(run_dir) for r in copies]
    files.write_config(run_dir, config)


def reinforce(
    dataset: Any,
    model: Any,
    rewards: list[Reward] | Reward,
    group_size: int = 4,
    beta: float = 0.04,
    temperature: float = 1.0,
    max_new_tokens: int = 128,
    lora: Lora = DEFAULT_LORA,
    args: TrainArgs = DEFAULT_ARGS,
    hardware: Hardware = DEFAULT_HARDWARE,
    name: str | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    n_samples: int = 10,
    revision: str | None = None,
    trust_remote_code: bool = False,
    wait: bool = False,
) -> Run:
    """GRPO: the model writes `group_size` completions per prompt, the rewards score them
    (summed by weight), and it is pushed towards those that beat their group's average, with a
    KL penalty (`beta`) against the model it started from.

    `dataset` is mapped with .map_prompts(); `model` is usually a finished run to continue from
    (train(), then prefer(), then this). args.batch_size counts prompts per micro-batch. At the
    end, eval.json holds the mean reward (total and per reward) on the held-out prompts, with
    greedy replies. Returns the Run at once; with wait=True, blocks until it ends.
    """
    named = check_rewards(rewards)
    settings = ReinforceArgs(group_size, beta, temperature, max_new_tokens)
    check_prompts_dataset(dataset, named)
    if isinstance(args, TrainArgs):
        extra_args(args.extra)  # an unknown key is refused now, not in the trainer's log
        if args.max_seq_len <= max_new_tokens:
            raise SettingsError(
                f"TrainArgs.max_seq_len ({args.max_seq_len}) must leave room for the prompt "
                f"besides max_new_tokens ({max_new_tokens}); raise it or lower max_new_tokens."
            )
    return start_training(
        "grpo",
        dataset,
        model,
        lora=lora,
        args=args,
        hardware=hardware,
        name=name,
        run_dir=run_dir,
        runs_dir=runs_dir,
        n_samples=n_samples,
        revision=revision,
        trust_remote_code=trust_remote_code,
        method_args={"rewards": [r.to_dict() for r in named], **settings.to_dict()},
        prepare=lambda path: _store_rewards(path, named),
        wait=wait,
    )


def _prompt_items(prompts: Any, rewards: list[Reward], max_prompts: int) -> list[dict[str, Any]]:
    """Records in the prompts format, from a list of str or a prompts-mapped Dataset."""
    if isinstance(prompts, str):
        prompts = [prompts]
    if isinstance(prompts, list | tuple):
        if not prompts or not all(isinstance(p, str) and p.strip() for p in prompts):
            raise TypeError("prompts must be a non-empty list of non-empty str, or a Dataset "
                            "mapped with .map_prompts().")  # fmt: skip
        needing = _needing_reference(rewards)
        if needing:
            raise ValueError(
                f"Reward(s) {', '.join(map(repr, needing))} compare with a reference answer, "
                "which plain str prompts lack; pass a Dataset mapped with "
                ".map_prompts(prompt=..., reference=...)."
            )
        return [{"prompt": [{"role": "user", "content": p}], "reference": None, "fields": {}}
                for p in prompts]  # fmt: skip
    check_prompts_dataset(prompts, rewards)
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
    max_new_tokens: int = 128,
    temperature: float = 1.0,
    max_prompts: int = 8,
    backend: Any = None,
) -> pd.DataFrame:
    """Dry-run the rewards: sample `n` completions per prompt from `x` and score them.

    x: a Run, a run directory or a model (as for dragon.generate). prompts: a list of str, or a
    Dataset mapped with .map_prompts() (its first `max_prompts` rows, references and other
    columns included, as the trainer scores them). Returns one row per completion: prompt,
    completion, one column per reward, total. A reward that fails on a completion scores 0
    there and a warning quotes its first error. It samples like reinforce(): the same
    temperature, top_p 1 (a backend's own defaults, such as a model's repetition penalty in
    the local worker, may still apply).
    """
    from dragonfarm_core.generation import target_for
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
                   [r.get("fields") or {} for r in rows], errors)  # fmt: skip
    _warn_failures(errors)
    return pd.DataFrame({"prompt": texts, "completion": list(completions),
                         **scores.per_reward, "total": scores.total})  # fmt: skip


test_rewards.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def _given_names(stored: list[dict[str, Any]]) -> set[int]:
    """Indexes of the rewards whose name must be written: those that `assign_names` would not
    give them again (names of the others are left out of the code)."""
    keep: set[int] = set()
    while True:
        shapes = [SimpleNamespace(type=d["type"], name=d.get("name") if i in keep else None)
                  for i, d in enumerate(stored)]  # fmt: skip
        automatic = reward_names(shapes)  # type: ignore[arg-type]
        wrong = {i for i, d in enumerate(stored) if automatic[i] != d.get("name")} - keep
        if not wrong:
            return keep
        keep |= wrong


def rewards_code(stored: list[dict[str, Any]], run_dir: str | os.PathLike[str]) -> str:
    """The `[dragon.reward(...), ...]` source that rebuilds config.json's rewards.

    Only fields that differ from the defaults are written, names only where they were chosen,
    a custom file as the absolute path of the run's copy. Built from the stored dicts without
    validating them again (a command's program may be missing on this machine).
    """
    defaults = {f.name: f.default for f in dataclasses.fields(Reward)}
    named = _given_names(stored)
    calls = []
    for i, d in enumerate(stored):
        parts = [literal(d["type"])]
        for key, value in d.items():
            if key == "type" or value == defaults.get(key) or (key == "name" and i not in named):
                continue
            if key == "file" and value and not os.path.isabs(value):
                value = str(Path(run_dir) / value)
            parts.append(f"{key}={literal(value) if isinstance(value, str) else repr(value)}")
        calls.append(f"dragon.reward({', '.join(parts)})")
    if len(calls) == 1:
        return f"[{calls[0]}]"
    return "[\n" + "".join(f"        {c},\n" for c in calls) + "    ]"  # one per line in code()
