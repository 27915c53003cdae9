"""Held-out loss and sample generations: what eval.json and samples.json hold."""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from dragonfarm_core.inference.worker_decode import Decoding, cpu_threads, decode, default_stop
from dragonfarm_core.rundir import files
from dragonfarm_core.trainers.batching import collate, sorted_batches
from dragonfarm_core.trainers.grpo_rollout import left_pad
from dragonfarm_core.trainers.modeling import label_loss
from dragonfarm_core.trainers.sft_data import Encoded, SftData

N_BEFORE = 3  # samples also answered by the model the run started from (one small batch)


@torch.inference_mode()
def eval_loss(model: Any, data: Encoded, batch_size: int, pad_id: int) -> tuple[float | None, int]:
    """(mean loss per learned token, number of those tokens) over the held-out rows."""
    if not len(data):
        return None, 0
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    device = next(model.parameters()).device
    for rows in sorted_batches(data.lengths, batch_size):
        batch = {k: v.to(device) for k, v in collate(data, rows, pad_id).items()}
        loss, n = label_loss(model, batch)
        total, tokens = total + float(loss), tokens + n
    model.train(was_training)
    return (total / tokens if tokens else None), tokens


def eval_metrics(loss: float | None, tokens: int, rows: int, step: int) -> dict[str, Any]:
    perplexity = math.exp(min(loss, 50.0)) if loss is not None else None
    return {
        "eval_loss": loss,
        "perplexity": perplexity,
        "eval_tokens": tokens,
        "eval_rows": rows,
        "step": step,
    }


def prompt_budget(max_len: int, max_new_tokens: int) -> int:
    """Prompt tokens a sample may keep: the training window less the reply's room, and at
    least half the window (a reply longer than the window still gets some context)."""
    return max(max_len - max_new_tokens, max_len // 2, 1)


def prompt_ids(tokenizer: Any, context: list[dict[str, str]], budget: int) -> list[int]:
    """Token ids of `context` with the generation prompt, cut to at most `budget` tokens.

    The end of the conversation is what the reply answers, so it is kept: whole turns go from
    the start (a leading system message stays while it fits), and the cut always falls before
    a user turn, where any chat template may start; if the last user turn alone is longer
    than the budget, its beginning goes. Without the cut a long conversation makes
    generation cost grow with the square of its length, for a sample nobody reads whole.
    """

    def ids(messages: list[dict[str, str]]) -> list[int]:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    whole = ids(context)
    if len(whole) <= budget:
        return whole
    system = context[:1] if context and context[0]["role"] == "system" else []
    turns = context[len(system) :]
    starts = [i for i, m in enumerate(turns) if m["role"] == "user"]
    if not starts:
        return whole[-budget:]
    # The earliest user turn to start from that fits: fewer turns, fewer tokens (bisection).
    lo, hi, best = 0, len(starts) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = ids(system + turns[starts[mid] :])
        if len(candidate) <= budget:
            best, hi = candidate, mid - 1
        else:
            lo = mid + 1
    if best is not None:
        return best
    last = ids(turns[starts[-1] :])  # without the system message, then its end only
    return last[-budget:]


@torch.inference_mode()
def generate_samples(
    model: Any,
    tokenizer: Any,
    conversations: list[list[dict[str, str]]],
    max_new_tokens: int,
    max_len: int,
    batch_size: int = 8,
) -> list[str]:
    """Greedy replies to each conversation's context, in left-padded batches; each context is
    cut to fit `max_len` (the run's max_seq_len) with room for `max_new_tokens`."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    budget = prompt_budget(max_len, max_new_tokens)
    replies: list[str] = []
    try:
        for start in range(0, len(conversations), batch_size):
            rows = [prompt_ids(tokenizer, c[:-1], budget)
                    for c in conversations[start : start + batch_size]]  # fmt: skip
            ids, mask = left_pad(rows, tokenizer.pad_token_id)
            with cpu_threads(model, len(rows)):  # generate()'s greedy replies, less overhead
                new = decode(
                    model, ids.to(device), mask.to(device), Decoding.from_model(model, 0.0),
                    max_new_tokens=max_new_tokens, stop=default_stop(model),
                    pad_id=tokenizer.pad_token_id,
                )  # fmt: skip
            replies += [t.strip() for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
    finally:
        model.train(was_training)
    return replies


def add_before(
    samples: list[dict[str, Any]], model: Any, tokenizer: Any,
    conversations: list[list[dict[str, str]]], max_new_tokens: int, max_len: int,
) -> None:  # fmt: skip
    """Give the first N_BEFORE samples `before`: the greedy reply of the model the run started
    from (its adapter switched off), which the Monitor shows next to the run's own. One small
    batch, so it adds a few seconds to a run, not a second round of samples."""
    with model.disable_adapter():
        replies = generate_samples(
            model, tokenizer, conversations[:N_BEFORE], max_new_tokens, max_len
        )
    for sample, reply in zip(samples, replies, strict=False):
        sample["before"] = reply


def write_samples(
    run_dir: str | os.PathLike[str],
    model: Any,
    tokenizer: Any,
    conversations: list[list[dict[str, str]]],
    split: str,
    n: int,
    max_new_tokens: int,
    max_len: int,
) -> list[dict[str, Any]]:
    """samples.json: prompt (last user turn), reference (the data's reply), generated, and for
    the first N_BEFORE of them `before` (`add_before`)."""
    chosen = conversations[:n]
    replies = generate_samples(model, tokenizer, chosen, max_new_tokens, max_len)
    samples = [
        {
            "prompt": next(m["content"] for m in reversed(c) if m["role"] == "user"),
            "reference": c[-1]["content"],
            "generated": g,
            "split": split,
        }
        for c, g in zip(chosen, replies, strict=True)
    ]
    add_before(samples, model, tokenizer, chosen, max_new_tokens, max_len)
    files.write_samples(run_dir, samples)
    return samples


def write_eval_and_samples(
    run_dir: str | os.PathLike[str],
    model: Any,
    data: SftData,
    batch_size: int,
    n_samples: int,
    max_new_tokens: int,
    step: int,
    max_len: int,
) -> dict[str, Any]:
    """The end of an SFT run: eval.json from the held-out rows, then samples.json (prompts
    cut to `max_len`, the run's max_seq_len)."""
    loss, tokens = eval_loss(model, data.held_out, batch_size, data.pad_id)
    results = eval_metrics(loss, tokens, len(data.held_out), step)
    # The held-out loss before training, logged at step 0 (kept across resumes).
    results["start_eval_loss"] = next(
        (r["eval_loss"] for r in files.read_progress(run_dir) if r.get("step") == 0), None
    )
    files.write_eval(run_dir, results)
    # Without held-out rows, samples show replies to training prompts, marked as such.
    split = "eval" if data.eval_rows else "train"
    write_samples(
        run_dir,
        model,
        data.tokenizer,
        data.eval_rows or data.train_rows,
        split,
        n_samples,
        max_new_tokens,
        max_len,
    )
    return results
