"""GRPO with verifiable rewards on TRL's GRPOTrainer: what a run with method "grpo" executes.

    python -m dragonfarm_core.trainers.grpo RUN_DIR

(skips the queue; the launcher runs `python -m dragonfarm_core.trainers RUN_DIR`). Each step
samples `group_size` completions of each prompt (adapter on), scores them with the rewards
(TRL reward functions weighted by each reward's weight), turns the totals into advantages
relative to each group (scaled as `scale_rewards` says) and takes one gradient step on TRL's
`loss_type`, with beta x KL against the model the run started from: the same weights with the
LoRA adapter switched off, so there is no second copy. Then the held-out prompts are answered
greedily and scored, by the adapter and by the model it started from (eval.json, samples.json).

Reads top to bottom: config and rewards, prompts (rendered with the chat template and cut to
the token budget here, truncation counted), the model with its adapter, `GRPOConfig` from the
spec, `GRPOTrainer` with our rollouts (`Rollouts`: the batched decode the Chat tab's worker
uses) and log-probabilities that skip the head at prompt positions and read a group's prompt
once where nothing drops out (`trainer_class`), train (resuming from a complete checkpoint),
adapter, held-out rewards and samples.
TrainArgs.batch_size counts prompts; TRL's batch counts completions (batch x group_size).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core.chat_template import stop_ids
from dragonfarm_core.rewards import Reward, RewardErrors, reward_names
from dragonfarm_core.rundir import allocator, files
from dragonfarm_core.rundir.train_config import load_config
from dragonfarm_core.trainers import grpo_rollout as rl
from dragonfarm_core.trainers import lifecycle, modeling, trl_run
from dragonfarm_core.trainers.common import reported_run
from dragonfarm_core.trainers.placement import processes_note, resolve_placement
from dragonfarm_core.training.reinforcement import ReinforceArgs


@dataclass
class Task:
    """What every step needs besides the model: prompts, rewards, sampling settings."""

    prompts: list[rl.Prompt]
    texts: list[str]  # each prompt rendered with the chat template, ready for the reply
    ids: list[list[int]]  # its tokens, cut to the budget
    rewards: list[Reward]
    settings: ReinforceArgs
    tokenizer: Any
    stop: list[int]
    errors: RewardErrors

    def rollout(self, model: Any, rows: list[int], group: int, temperature: float) -> tuple:
        """Sample and score: (Rollout, Scores) for these prompt rows, `group` completions each."""
        ids, n_new = [self.ids[i] for i in rows], self.settings.max_new_tokens
        rollout = rl.generate_rollout(
            model, self.tokenizer, ids, group, n_new, temperature, self.stop
        )
        prompts = [self.prompts[i] for i in rows for _ in range(group)]
        return rollout, rl.score_completions(self.rewards, prompts, rollout.texts, self.errors)


class Rollouts:
    """GRPOTrainer's `rollout_func`: the prompts' completions from our batched decode
    (grpo_rollout.generate_rollout) instead of transformers' `generate`, which has no stop on
    the end-of-turn token alone and was measured slower on a CPU (bench/grpo_throughput.py).
    The prompts arrive rendered (the dataset's "prompt" text, each `num_generations` times);
    their ids are those encode_prompts cut to the token budget."""

    def __init__(self, task: Task, callback: trl_run.RunCallback) -> None:
        self.task, self.callback = task, callback
        self.ids = dict(zip(task.texts, task.ids, strict=True))

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        s, ids = self.task.settings, [self.ids[p] for p in prompts]
        model = trainer.accelerator.unwrap_model(trainer.model)
        rollout = rl.generate_rollout(model, self.task.tokenizer, ids, 1, s.max_new_tokens,
                                      s.temperature, self.task.stop)  # fmt: skip
        lengths = rollout.completion_mask.sum(1).tolist()
        self.callback.add_tokens(rollout.n_tokens, rollout.completion_mask.numel())
        return {
            "prompt_ids": ids,
            "completion_ids": [
                r[:n] for r, n in zip(rollout.completion_ids.tolist(), lengths, strict=True)
            ],  # fmt: skip
            "logprobs": None,  # on-policy: TRL scores the tokens itself
            "completion_text": rollout.texts,  # to the rewards: stop token cut, stripped
        }


def trainer_class() -> type:
    """TRL's GRPOTrainer, counted (trl_run.counted), whose log-probabilities come from
    grpo_rollout.shared_prompt_logps (the same numbers: the LM head only where a completion
    token is scored, and each distinct prompt read once where nothing drops out) where one
    process trains a model that allows it; TRL's own forward elsewhere (several processes:
    each forward goes through the DistributedDataParallel wrapper once).
    bench/grpo_throughput.py, ours over TRL: 1.69-1.85x completion tokens/s with LoRA dropout
    0.05 (1.18-1.49x with TRL's forward), 1.57-2.10x with dropout 0."""
    from trl import GRPOTrainer

    class SharedPromptGRPOTrainer(GRPOTrainer):
        def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any,
                                               attention_mask: Any, logits_to_keep: int,
                                               batch_size: int | None = None,
                                               compute_entropy: bool = False,
                                               compute_aux_loss: bool = False,
                                               **inputs: Any) -> tuple:  # fmt: skip
            def trl_own() -> tuple:
                return super(SharedPromptGRPOTrainer, self)._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size,
                    compute_entropy, compute_aux_loss, **inputs,
                )  # fmt: skip

            if compute_aux_loss or any(v is not None for v in inputs.values()):
                return trl_own()  # images, or a mixture of experts' router loss
            if self.accelerator.num_processes > 1:
                return trl_own()
            size, parts = batch_size or len(input_ids), []
            with self.accelerator.autocast():
                for i in range(0, len(input_ids), size):
                    part = rl.shared_prompt_logps(model, input_ids[i : i + size],
                                                  attention_mask[i : i + size],
                                                  logits_to_keep)  # fmt: skip
                    if part is None:
                        return trl_own()
                    parts.append(part)
            import torch

            logps = torch.cat([p[0] for p in parts])
            entropies = [e for _, e in parts if e is not None]  # TRL's fused head made them
            return logps, torch.cat(entropies) if compute_entropy else None, None

    return trl_run.counted(SharedPromptGRPOTrainer)


def reward_function(reward: Reward, name: str, task: Task) -> Callable[..., list[float]]:
    """One of our rewards as a TRL reward function, named so that TRL logs it as
    rewards/<name>/mean. It scores what the rewards score everywhere (rl.score_completions:
    the last user turn, the completion, the reference, the row's columns); a reward failing
    too often stops the run with its first traceback (RewardErrors.check)."""

    def score(completions: list[str], row: list[int], completion_text: list[str],
              **_: Any) -> list[float]:  # fmt: skip
        prompts = [task.prompts[i] for i in row]
        scores = rl.score_completions([reward], prompts, completion_text, task.errors)
        task.errors.check()
        return next(iter(scores.per_reward.values()))

    score.__name__ = score.__qualname__ = name
    return score


def as_dataset(task: Task) -> Any:
    """GRPOTrainer's prompts: each rendered (so TRL treats them as text and hands them to
    Rollouts unchanged) with its row, by which the rewards find its reference and columns."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": task.texts, "row": list(range(len(task.texts)))})


def options(settings: ReinforceArgs, rewards: list[Reward], batch_size: int,
            total_steps: int) -> dict[str, Any]:  # fmt: skip
    """GRPOConfig's own options from the run's settings (TRL's batch counts completions)."""
    completions = batch_size * settings.group_size
    return {
        "per_device_train_batch_size": completions,
        "per_device_eval_batch_size": completions,
        "max_steps": total_steps,  # the plan's, from TrainArgs' epochs counted in prompts
        "num_generations": settings.group_size,
        "max_completion_length": settings.max_new_tokens,
        "temperature": settings.temperature,
        "beta": settings.beta,
        "loss_type": settings.loss_type,
        "scale_rewards": settings.scale_rewards,
        "reward_weights": [r.weight for r in rewards],
    }


def columns(rewards: list[Reward]) -> tuple[str, ...]:
    """The GRPO columns of progress.jsonl, in every row."""
    return ("reward", "kl", "completion_tokens", *(f"reward_{n}" for n in reward_names(rewards)))


def training_columns(names: list[str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """TRL's logged GRPO metrics -> progress.jsonl's names (kl is logged only when beta > 0)."""

    def pick(logs: dict[str, Any]) -> dict[str, Any]:
        row = {"reward": logs.get("reward"), "kl": logs.get("kl"),
               "completion_tokens": logs.get("completions/mean_length")}  # fmt: skip
        return row | {f"reward_{n}": logs.get(f"rewards/{n}/mean") for n in names}

    return pick


def evaluate(model: Any, task: Task, batch_size: int, n_samples: int, split: str) -> tuple:
    """(eval.json, samples.json rows): greedy replies to every prompt of `task`, scored.

    Greedy, so two evaluations of the same weights agree."""
    names, n = reward_names(task.rewards), len(task.ids)
    texts: list[str] = []
    totals: list[float] = []
    per: dict[str, list[float]] = defaultdict(list)
    for start in range(0, n, batch_size):
        rows = list(range(start, min(start + batch_size, n)))
        rollout, scores = task.rollout(model, rows, 1, 0.0)
        texts, totals = texts + rollout.texts, totals + scores.total
        for name in names:
            per[name] += scores.per_reward[name]
    results = {"reward": sum(totals) / n if n else None, "eval_prompts": n}
    results |= {f"reward_{k}": sum(per[k]) / n if n else None for k in names}
    samples = [
        {
            "prompt": p.text,
            "reference": p.reference,
            "generated": texts[i],
            "split": split,
            "reward": totals[i],
            **{f"reward_{k}": per[k][i] for k in names},
        }
        for i, p in enumerate(task.prompts[:n_samples])
    ]
    return results, samples


def write_results(run_dir: Path, model: Any, task: Task, held_out: Task, batch: int,
                  n_samples: int, step: int) -> dict:  # fmt: skip
    """eval.json on the held-out prompts and samples.json; without held-out prompts the
    samples come from the first training prompts and eval.json's rewards are null.

    eval.json also holds the same scores of the model the run started from (adapter off) as
    start_reward and start_reward_<name>, so it says by itself whether training helped."""
    if held_out.ids:
        results, samples = evaluate(model, held_out, batch, n_samples, "eval")
        with model.disable_adapter():
            start, _ = evaluate(model, held_out, batch, 0, "eval")
        results |= {f"start_{k}": v for k, v in start.items() if k.startswith("reward")}
    else:
        first = dataclasses.replace(task, prompts=task.prompts[:n_samples],
                                    texts=task.texts[:n_samples], ids=task.ids[:n_samples],
                                    errors=RewardErrors())  # fmt: skip
        results, samples = evaluate(model, first, batch, n_samples, "train")
        results = {k: None for k in results if k.startswith("reward")} | {"eval_prompts": 0}
    files.write_eval(run_dir, results | {"step": step})
    files.write_samples(run_dir, samples)
    return results


def main(run_dir: str | os.PathLike[str]) -> str:
    """Train the GRPO run in `run_dir`; returns "succeeded" or "cancelled".

    On any error status.json says failed (with reason, error and log tail) and the exception
    propagates. A complete checkpoint in the run directory is resumed from.
    """
    run_dir = Path(run_dir)
    # Each step's tensors reuse the pages of the step before (1.2-1.3x a step on a CPU).
    allocator.keep_freed_memory()
    with reported_run(run_dir) as report:
        config = load_config(run_dir)
        args, placement = config.args, resolve_placement(config.hardware, config.model.base)
        method_args = dict(config.method_args)
        rewards = [Reward.from_dict(d, run_dir=run_dir) for d in method_args.pop("rewards")]
        names = reward_names(rewards)
        settings = ReinforceArgs(**method_args)

        tokenizer = modeling.load_tokenizer(config.model)
        budget = max(1, args.max_seq_len - settings.max_new_tokens)
        train_rows, eval_rows = rl.read_prompts(run_dir, "train"), rl.read_prompts(run_dir, "eval")
        train_texts, train_ids, cut_train = rl.encode_prompts(tokenizer, train_rows, budget)
        eval_texts, eval_ids, cut_eval = rl.encode_prompts(tokenizer, eval_rows, budget)

        from transformers import PrinterCallback
        from trl import GRPOConfig

        model, plan, trainable, total = lifecycle.model_and_plan(
            report, config, placement, len(train_rows), cut_train + cut_eval
        )
        stop = stop_ids(model, tokenizer)
        task = Task(train_rows, train_texts, train_ids, rewards, settings, tokenizer, stop,
                    RewardErrors())  # fmt: skip
        callback = trl_run.RunCallback(run_dir, report, config, None, columns(rewards),
                                       training_columns(names))  # fmt: skip
        own = options(settings, rewards, args.batch_size, plan.total_steps)
        grpo_args = trl_run.arguments(GRPOConfig, config, placement, run_dir, **own)
        trainer = trainer_class()(
            model=model,
            reward_funcs=[reward_function(r, n, task) for r, n in zip(rewards, names, strict=True)],
            args=grpo_args,
            train_dataset=as_dataset(task),
            processing_class=tokenizer,
            callbacks=[callback],
            rollout_func=Rollouts(task, callback),
        )
        # As in dpo.py: TRL's "ref" copy of a given adapter is the base model here (the adapter
        # is new); without it the reference is the adapter switched off.
        model.delete_adapter("ref")
        trainer.remove_callback(PrinterCallback)  # progress.jsonl has the rows
        if report.writes:
            processes = processes_note()
            print(f"GRPO on {config.model.name} ({placement.device}, {placement.dtype_name}"
                  f"{processes}): {len(train_rows)} prompts x {settings.group_size} completions, "
                  f"{plan.total_steps} steps, rewards {', '.join(names)}; {trainable:,} of "
                  f"{total:,} parameters trainable.", flush=True)  # fmt: skip

        cancelled = trl_run.train(trainer, run_dir, callback)
        if not report.writes:  # one of several processes: rank 0 writes the results
            return "cancelled" if cancelled else "succeeded"
        state = callback.state
        metrics = lifecycle.stop(run_dir, report, model, state, cancelled)
        if metrics is None:
            return "cancelled"
        held_out = Task(eval_rows, eval_texts, eval_ids, rewards, settings, tokenizer, stop,
                        RewardErrors())  # fmt: skip
        batch = args.batch_size * settings.group_size  # as many replies as a training rollout
        results = write_results(run_dir, model, task, held_out, batch, config.n_samples, state.step)
        report.finish("succeeded", metrics=metrics | results)
        print(f"Done: held-out reward {results.get('start_reward')} -> {results['reward']}.",
              flush=True)  # fmt: skip
        return "succeeded"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m dragonfarm_core.trainers.grpo RUN_DIR")
    main(sys.argv[1])
