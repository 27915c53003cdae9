"""GRPO with verifiable rewards: what a run with method "grpo" executes.

    python -m dragonfarm_core.trainers.grpo RUN_DIR

(skips the queue; the launcher runs `python -m dragonfarm_core.trainers RUN_DIR`). Each step:
sample `group_size` completions of each prompt in one batched call (adapter on), score them with
the rewards, turn the totals into advantages relative to each group, and take one gradient
step on -advantage * log pi + beta * KL, the KL measured against the model the run started from:
the same weights with the LoRA adapter switched off, so there is no second copy. Then the
held-out prompts are answered greedily and scored (eval.json, samples.json).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dragonfarm_core.chat_template import stop_ids
from dragonfarm_core.reinforcement import ReinforceArgs
from dragonfarm_core.rewards import Reward, RewardErrors, reward_names
from dragonfarm_core.rundir import files
from dragonfarm_core.trainers import grpo_rollout as rl
from dragonfarm_core.trainers import lifecycle, modeling
from dragonfarm_core.trainers.batching import grouped_batches
from dragonfarm_core.trainers.common import (
    RunReporter,
    Stopwatch,
    TrainState,
    reported_run,
    resolve_placement,
)
from dragonfarm_core.trainers.config import TrainConfig, load_config
from dragonfarm_core.trainers.optim import Optimization


@dataclass
class Task:
    """What every step needs besides the model: prompts, rewards, sampling settings."""

    prompts: list[rl.Prompt]
    ids: list[list[int]]
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


def grpo_step(model: Any, task: Task, batches: list[list[int]], opt: Optimization) -> dict:
    """One optimizer step over these prompt batches; returns the step's metrics."""
    s = task.settings
    rollouts = [task.rollout(model, rows, s.group_size, s.temperature) for rows in batches]
    task.errors.check()  # a reward failing too often stops the run with its first traceback
    n_tokens = sum(r.n_tokens for r, _ in rollouts)
    loss_total, kl_total = 0.0, 0.0
    for rollout, scores in rollouts:
        advantages = rl.group_advantages(torch.tensor(scores.total), s.group_size)
        per_token = advantages[rollout.token_rows()].to(next(model.parameters()).device)
        policy = rl.completion_logprobs(model, rollout, s.temperature)
        reference = None
        if s.beta > 0:  # beta 0 needs no reference pass
            with torch.no_grad(), model.disable_adapter():
                reference = rl.completion_logprobs(model, rollout, s.temperature)
        loss, kl_sum = rl.grpo_loss(policy, reference, per_token, s.beta, n_tokens)
        opt.backward(loss)
        loss_total, kl_total = loss_total + float(loss.detach()), kl_total + (kl_sum or 0.0)
    grad_norm = opt.step()
    all_scores = [s for _, s in rollouts]
    n = sum(len(x.total) for x in all_scores)
    metrics = {
        "loss": loss_total,
        "grad_norm": grad_norm,
        "reward": sum(sum(x.total) for x in all_scores) / n,
        "kl": kl_total / max(1, n_tokens) if s.beta > 0 else None,
        "completion_tokens": n_tokens / n,
    }
    for name in all_scores[0].per_reward:
        metrics[f"reward_{name}"] = sum(sum(x.per_reward[name]) for x in all_scores) / n
    slots = sum(r.completion_mask.numel() for r, _ in rollouts)
    return metrics | {"_tokens": n_tokens, "_slots": slots}


def train_loop(
    run_dir: Path,
    report: RunReporter,
    config: TrainConfig,
    model: Any,
    task: Task,
    opt: Optimization,
    state: TrainState,
    plan: Any,
) -> bool:
    """Run the optimizer steps left in `plan`; returns True when stopped by a cancel."""
    args = config.args
    lengths = [len(x) for x in task.ids]  # similar prompt lengths share a batch: less padding
    clock, window = Stopwatch(state.elapsed_s, state.step), defaultdict(list)
    while state.step < plan.total_steps:
        state.step += 1
        step, (epoch, part), lr = state.step, plan.locate(state.step), opt.lr
        batches = grouped_batches(lengths, args.batch_size, args.seed, epoch)[part]
        metrics = grpo_step(model, task, batches, opt)
        state.record(metrics.pop("loss"), metrics.pop("_tokens"), metrics.pop("_slots"))
        state.elapsed_s = clock.elapsed()
        for key, value in metrics.items():
            window[key].append(value)
        if step % args.logging_steps == 0 or step in (1, plan.total_steps):
            means = {k: None if None in v else sum(v) / len(v) for k, v in window.items()}
            window.clear()
            report.progress(
                **means,
                step=step,
                epoch=plan.epoch_at(step),
                lr=lr,
                loss=state.take_log_loss(),
                elapsed_s=round(state.elapsed_s, 2),
                eta_s=clock.eta(step, plan.total_steps),
            )
        if lifecycle.end_step(run_dir, report, config, model, opt, state, plan):
            return True
    return False


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
        first = dataclasses.replace(
            task, prompts=task.prompts[:n_samples], ids=task.ids[:n_samples], errors=RewardErrors()
        )
        results, samples = evaluate(model, first, batch, n_samples, "train")
        results = {k: None for k in results if k.startswith("reward")} | {"eval_prompts": 0}
    files.write_eval(run_dir, results | {"step": step})
    files.write_samples(run_dir, samples)
    return results


def main(run_dir: str | os.PathLike[str]) -> str:
    """Train the GRPO run in `run_dir`; returns "succeeded" or "cancelled"."""
    run_dir = Path(run_dir)
    with reported_run(run_dir) as report:
        config = load_config(run_dir)
        args, placement = config.args, resolve_placement(config.hardware)
        method_args = dict(config.method_args)
        rewards = [Reward.from_dict(d, run_dir=run_dir) for d in method_args.pop("rewards")]
        settings = ReinforceArgs(**method_args)

        tokenizer = modeling.load_tokenizer(config.model)
        budget = max(1, args.max_seq_len - settings.max_new_tokens)
        train_rows, eval_rows = rl.read_prompts(run_dir, "train"), rl.read_prompts(run_dir, "eval")
        train_ids, cut_train = rl.encode_prompts(tokenizer, train_rows, budget)
        eval_ids, cut_eval = rl.encode_prompts(tokenizer, eval_rows, budget)

        training = lifecycle.start(
            run_dir, report, config, placement, len(train_rows), cut_train + cut_eval
        )
        model, plan, opt, state = training.model, training.plan, training.opt, training.state
        stop = stop_ids(model, tokenizer)
        task = Task(train_rows, train_ids, rewards, settings, tokenizer, stop, RewardErrors())
        print(
            f"GRPO on {config.model.name} ({placement.device}, {placement.dtype_name}): "
            f"{len(train_rows)} prompts x {settings.group_size} completions, {plan.total_steps} "
            f"steps, rewards {', '.join(reward_names(rewards))}.",
            flush=True,
        )

        cancelled = train_loop(run_dir, report, config, model, task, opt, state, plan)
        metrics = lifecycle.stop(run_dir, report, training.model, training.state, cancelled)
        if metrics is None:
            return "cancelled"
        held_out = Task(eval_rows, eval_ids, rewards, settings, tokenizer, stop, RewardErrors())
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
