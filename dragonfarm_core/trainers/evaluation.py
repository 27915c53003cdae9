"""Held-out loss and sample generations: what eval.json and samples.json hold."""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from dragonfarm_core.runs import files
from dragonfarm_core.trainers.batching import collate, sorted_batches
from dragonfarm_core.trainers.modeling import label_loss
from dragonfarm_core.trainers.sft_data import Encoded, SftData


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


@torch.inference_mode()
def generate_samples(
    model: Any,
    tokenizer: Any,
    conversations: list[list[dict[str, str]]],
    max_new_tokens: int,
    batch_size: int = 8,
) -> list[str]:
    """Greedy replies to each conversation's context, in left-padded batches."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    replies: list[str] = []
    try:
        for start in range(0, len(conversations), batch_size):
            prompts = tokenizer.apply_chat_template(
                [c[:-1] for c in conversations[start : start + batch_size]],
                tokenize=False,
                add_generation_prompt=True,
            )
            enc = tokenizer(
                prompts, add_special_tokens=False, padding=True, return_tensors="pt"
            ).to(device)
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                use_cache=True,
            )
            new = out[:, enc["input_ids"].shape[1] :]
            replies += [t.strip() for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return replies


def write_samples(
    run_dir: str | os.PathLike[str],
    model: Any,
    tokenizer: Any,
    conversations: list[list[dict[str, str]]],
    split: str,
    n: int,
    max_new_tokens: int,
) -> list[dict[str, Any]]:
    """samples.json: prompt (last user turn), reference (the data's reply), generated."""
    chosen = conversations[:n]
    replies = generate_samples(model, tokenizer, chosen, max_new_tokens)
    samples = [
        {
            "prompt": next(m["content"] for m in reversed(c) if m["role"] == "user"),
            "reference": c[-1]["content"],
            "generated": g,
            "split": split,
        }
        for c, g in zip(chosen, replies, strict=True)
    ]
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
) -> dict[str, Any]:
    """The end of an SFT run: eval.json from the held-out rows, then samples.json."""
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
    )
    return results
