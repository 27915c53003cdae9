"""GRPO's prompts and rollouts: the prompt rows, their rendering and token budget, a group of
sampled completions per prompt in one batched decode, and their scores.

    texts, ids, truncated = encode_prompts(tokenizer, read_prompts(run_dir, "train"), budget)
    rollout = generate_rollout(model, tokenizer, ids, group_size=4, max_new_tokens=128,
                               temperature=1.0, stop=stop_ids(model, tokenizer))  # chat_template's
    scores = score_completions(rewards, prompts, rollout.texts, errors)

A rollout keeps left-padded prompts and right-padded completions side by side, as `generate`
returns them. The loss, the advantages and the KL are TRL's GRPOTrainer's (trainers/grpo.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from dragonfarm_core.chat_template import ROLES
from dragonfarm_core.inference.worker_decode import (
    Decoding,
    cpu_threads,
    decode,
    distinct_rows,
    plain_cache,
    repeat_rows,
)
from dragonfarm_core.inference.worker_step import base_model
from dragonfarm_core.rewards import Reward, RewardErrors, Scores, score
from dragonfarm_core.trainers.common import DataError
from dragonfarm_core.trainers.sft_data import read_rows


@dataclass(frozen=True)
class Prompt:
    """One row of data/<split>.jsonl in the `prompts` format."""

    messages: list[dict[str, str]]
    reference: str | None
    fields: dict[str, Any]

    @property
    def text(self) -> str:
        """The last user turn: what a reward function receives as `prompt`."""
        return next(m["content"] for m in reversed(self.messages) if m["role"] == "user")


def _check_prompt(record: Any, where: str) -> Prompt:
    messages = record.get("prompt") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where} has no 'prompt' list; GRPO needs {{\"prompt\": [...]}} rows.")
    for m in messages:
        if not (
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)
        ):
            raise DataError(
                f"{where}: each prompt message needs a role ({', '.join(ROLES)}) and a text "
                f"content; got {str(m)[:120]}."
            )
    if messages[-1]["role"] != "user":
        raise DataError(f"{where}: the prompt must end with a user turn for the model to answer.")
    reference, fields = record.get("reference"), record.get("fields") or {}
    if reference is not None and not isinstance(reference, str):
        raise DataError(f"{where}: 'reference' must be text or null, got {reference!r:.80}.")
    if not isinstance(fields, dict):
        raise DataError(f"{where}: 'fields' must be an object of column values.")
    return Prompt([dict(m) for m in messages], reference, fields)


def read_prompts(run_dir: str | os.PathLike[str], split: str) -> list[Prompt]:
    """The rows of data/<split>.jsonl; a missing eval file means no held-out prompts."""
    return [_check_prompt(record, where) for where, record in read_rows(run_dir, split)]


def encode_prompts(
    tokenizer: Any, prompts: list[Prompt], max_len: int
) -> tuple[list[str], list[list[int]], int]:
    """(each prompt rendered with the chat template, its token ids, how many were cut to
    their last `max_len` tokens).

    The end is kept: it holds the question and the assistant header the reply follows.
    """
    if not prompts:
        return [], [], 0
    texts = tokenizer.apply_chat_template(
        [p.messages for p in prompts], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    truncated = sum(len(x) > max_len for x in ids)
    return texts, [x[-max_len:] for x in ids], truncated


def score_completions(
    rewards: list[Reward], prompts: list[Prompt], completions: list[str], errors: RewardErrors
) -> Scores:
    """Score completion i, an answer to prompts[i], as a reward function sees it: the prompt's
    last user turn, the completion, the reference, and the row's other columns."""
    return score(rewards, [p.text for p in prompts], completions,
                 [p.reference for p in prompts], [p.fields for p in prompts], errors)  # fmt: skip


def left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask), padded on the left so every row ends where generation starts."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = 1
    return ids, mask


def completion_mask(completion_ids: torch.Tensor, stop: list[int]) -> torch.Tensor:
    """1 for each token up to and including the first stop token, 0 after it (padding).

    The stop token is learned too: ending the reply is part of what earns the reward.
    """
    is_stop = torch.isin(completion_ids, torch.tensor(stop, dtype=completion_ids.dtype))
    stops_before = is_stop.long().cumsum(1) - is_stop.long()
    return (stops_before == 0).long()


@dataclass
class Rollout:
    """Prompts (left-padded) and their sampled completions (right-padded), row i of each
    belonging together; prompt p's completions are rows p*G .. p*G+G-1."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    texts: list[str]

    @property
    def n_tokens(self) -> int:
        return int(self.completion_mask.sum())


@torch.no_grad()
def generate_rollout(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    group_size: int,
    max_new_tokens: int,
    temperature: float,
    stop: list[int],
) -> Rollout:
    """`group_size` completions of every prompt, all in one batched decode (`worker_decode.decode`).

    temperature 0 is greedy decoding (evaluation). Sampling uses the full distribution
    (`Decoding.pure`: none of the bundled generation_config's repetition penalty 1.1 or top_p
    0.9, nor transformers' top_k 50), the one the loss's log-probabilities describe.
    """
    device = next(model.parameters()).device
    ids, mask = left_pad([p for p in prompts for _ in range(group_size)], tokenizer.pad_token_id)
    was_training = model.training
    model.eval()  # no dropout while sampling
    try:
        with cpu_threads(model, len(ids)):
            completion = decode(
                model, ids.to(device), mask.to(device), Decoding.pure(temperature),
                max_new_tokens=max_new_tokens, stop=stop, pad_id=tokenizer.pad_token_id,
            ).cpu()  # fmt: skip
    finally:
        model.train(was_training)
    cmask = completion_mask(completion, stop)
    return Rollout(
        ids, mask, completion, cmask, decode_completions(tokenizer, completion, cmask, stop)
    )


def decode_completions(
    tokenizer: Any, completion_ids: torch.Tensor, mask: torch.Tensor, stop: list[int]
) -> list[str]:
    """The text of each completion: its tokens before the stop token, stripped."""
    rows = []
    for row, n in zip(completion_ids.tolist(), mask.sum(1).tolist(), strict=True):
        tokens = row[:n]
        rows.append(tokens[:-1] if tokens and tokens[-1] in stop else tokens)
    return [t.strip() for t in tokenizer.batch_decode(rows, skip_special_tokens=True)]


def shared_prompt_logps(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_len: int
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """What TRL's GRPOTrainer scores for rows of prompt + completion (`input_ids`, the last
    `completion_len` columns the completions): each completion token's log-probability (and
    entropy, when TRL's fused LM head computes it), [rows, completion_len], zero at padding.
    None where the model cannot do it this way (activation checkpointing drops the cache on
    the way forward; layers other than full attention): TRL's own forward then does it.

    TRL sends every row through the model whole, its fused LM head applied at every position
    on a CPU (only where a label is, on a GPU), and a group's rows share their prompt. Here
    the prompts but their last token go through the model first, the rows then go on from the
    prompt's last token through TRL's fused head with those keys and values in the cache: the
    same positions, mask and numbers, the head applied only where a completion token is
    scored. Where nothing drops out, each distinct prompt is read once and its keys and
    values repeated for its group's rows (gradients flow back through the repetition). With
    dropout on (`drops_out`; LoRA's 0.05 by default) every row's prompt is read, each with
    its own dropout draw as in TRL: one draw shared by a group lowered the outcome (the
    bench's GRPO held-out reward over 8 seeds 0.34-1.0, mean 0.82, against 0.95-1.0, mean
    0.99, row by row). The bundled model, 4 prompts x 8 completions (prompts ~60 tokens,
    completions 48), prompts read once: log-probabilities with grad plus backward 2.0 s ->
    0.7 s, without grad 0.5 -> 0.3 s; logps equal and gradients within 5e-7
    (tests/trainers/test_grpo_shared.py).
    """
    start = input_ids.shape[1] - completion_len - 1  # the prompt columns but the last
    inner = base_model(model)
    if start < 1 or (torch.is_grad_enabled() and inner.is_activation_checkpointing):
        return None
    cache = plain_cache(inner)
    if cache is None:
        return None
    prompts, masks, which = input_ids[:, :start], attention_mask[:, :start], None
    if not drops_out(inner):
        found, which = distinct_rows(prompts, masks)
        prompts, masks = found[:, :start], found[:, start:]
    inner.base_model(input_ids=prompts, attention_mask=masks, cache=cache, use_cache=True)
    if which is not None:
        repeat_rows(cache, which)
    rest = input_ids[:, start:]
    labels = rest.masked_fill(attention_mask[:, start:] == 0, -100)
    labels[:, 0] = -100  # the prompt's last token: its position predicts the first reply token
    out = model(input_ids=rest, attention_mask=attention_mask, cache=cache, labels=labels,
                fused_lm_head=True)  # fmt: skip
    return out.log_probs, out.entropy


def drops_out(model: Any) -> bool:
    """Whether a forward of `model` (a transformers model, perhaps with LoRA layers) would
    drop anything now: a dropout in training mode with p > 0 (a LoRA layer's only while its
    adapter is on), or attention dropout in training mode."""
    if not model.training:
        return False
    if getattr(model.config, "attention_dropout", 0.0):
        return True
    off: set[int] = set()  # the dropouts of LoRA layers that are switched off or merged
    for module in model.modules():
        dropouts = getattr(module, "lora_dropout", None)
        if isinstance(dropouts, torch.nn.ModuleDict):
            active = set(module.active_adapters)
            enabled = not (module.disable_adapters or module.merged)
            off |= {id(d) for name, d in dropouts.items() if not enabled or name not in active}
    return any(
        isinstance(m, torch.nn.Dropout) and m.training and m.p > 0 and id(m) not in off
        for m in model.modules()
    )
