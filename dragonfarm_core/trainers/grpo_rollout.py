"""GRPO's tensor work: the prompts, a group of sampled completions per prompt, their token
log-probabilities, the group-relative advantages and the loss.

    rollout = generate_rollout(model, tokenizer, prompt_ids, group_size=4, max_new_tokens=128,
                               temperature=1.0, stop=stop_ids(model, tokenizer))  # chat_template's
    policy = completion_logprobs(model, rollout, temperature)        # with grad, adapter on
    with torch.no_grad(), model.disable_adapter():
        reference = completion_logprobs(model, rollout, temperature) # the model it started from
    loss, kl_sum = grpo_loss(policy, reference, token_advantages, beta, n_tokens)

A rollout keeps left-padded prompts and right-padded completions side by side, as `generate`
returns them, so one forward pass over [prompt | completion] scores every completion token.
Positions come from the attention mask, as in `generate`, so the scoring pass sees each token
where it was sampled. Logits are divided by the sampling temperature before the softmax, so the
log-probabilities are those of the distribution the completions were drawn from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from dragonfarm_core.chat_template import ROLES
from dragonfarm_core.inference.worker_decode import Decoding, cpu_threads, decode
from dragonfarm_core.rewards import Reward, RewardErrors, Scores, score
from dragonfarm_core.trainers.common import DataError
from dragonfarm_core.trainers.modeling import lm_head_logits
from dragonfarm_core.trainers.sft_data import read_rows

# Added to the group's standard deviation: a group whose rewards are all equal gets advantage 0
# instead of 0/0 (the value trl's GRPOTrainer uses).
ADVANTAGE_EPS = 1e-4


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
) -> tuple[list[list[int]], int]:
    """(token ids of each rendered prompt, how many were cut to their last `max_len` tokens).

    The end is kept: it holds the question and the assistant header the reply follows.
    """
    if not prompts:
        return [], 0
    texts = tokenizer.apply_chat_template(
        [p.messages for p in prompts], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    truncated = sum(len(x) > max_len for x in ids)
    return [x[-max_len:] for x in ids], truncated


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

    def token_rows(self) -> torch.Tensor:
        """The completion (row) each learned token belongs to, in `completion_logprobs` order."""
        return self.completion_mask.nonzero()[:, 0]


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
        with cpu_threads(model):
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


def completion_logprobs(model: Any, rollout: Rollout, temperature: float) -> torch.Tensor:
    """Log-probability of each completion token (1-D, row by row, padding left out).

    The LM head runs only at positions that predict a completion token.
    """
    causal = model.get_base_model()
    device = next(model.parameters()).device
    ids = torch.cat([rollout.prompt_ids, rollout.completion_ids], 1).to(device)
    mask = torch.cat([rollout.prompt_mask, rollout.completion_mask], 1).to(device)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    hidden = causal.get_decoder()(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False
    ).last_hidden_state
    width = rollout.prompt_ids.shape[1]
    keep = rollout.completion_mask.bool().to(device)
    logits = lm_head_logits(causal, hidden[:, width - 1 : -1][keep]).float() / temperature
    targets = rollout.completion_ids.to(device)[keep]
    return logits.gather(1, targets[:, None]).squeeze(1) - logits.logsumexp(1)


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each completion's reward relative to its group: (r - group mean) / (group std + eps).

    The std is the sample std (n - 1), as in trl's GRPOTrainer. Dividing by it makes every
    prompt count alike whatever its reward scale; a group with equal rewards teaches nothing.

    >>> [round(a, 3) for a in group_advantages(torch.tensor([1.0, 0, 0, 2, 2, 2]), 3).tolist()]
    [1.155, -0.577, -0.577, 0.0, 0.0, 0.0]
    """
    groups = rewards.view(-1, group_size)
    mean, std = groups.mean(1, keepdim=True), groups.std(1, keepdim=True)
    return ((groups - mean) / (std + ADVANTAGE_EPS)).view(-1)


def kl_k3(reference: torch.Tensor, policy: torch.Tensor) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate k3 = exp(r - p) - (r - p) - 1: never negative,
    unbiased on tokens sampled from the policy, low variance (Schulman's k3).

    >>> [round(k, 4) for k in kl_k3(torch.tensor([-1.0, -2.0]), torch.tensor([-1.0, -1.0])).tolist()]
    [0.0, 0.3679]
    """
    delta = reference - policy
    return torch.exp(delta) - delta - 1


def grpo_loss(
    policy: torch.Tensor,
    reference: torch.Tensor | None,
    advantages: torch.Tensor,
    beta: float,
    n_tokens: int,
) -> tuple[torch.Tensor, float | None]:
    """(loss of these tokens / n_tokens, summed KL of these tokens, or None without a reference).

    Plain on-policy GRPO: one update per rollout, so the ratio with the sampling policy is 1 in
    value and carries the gradient of log pi; per token, -advantage * ratio + beta * KL.
    Dividing by the step's count of completion tokens gives the token-level mean over the whole
    step, whatever its split into micro-batches, and long completions no more weight per token
    than short ones.
    """
    ratio = torch.exp(policy - policy.detach())
    per_token = -advantages * ratio
    kl_sum = None
    if reference is not None:
        kl = kl_k3(reference, policy)
        per_token = per_token + beta * kl
        kl_sum = float(kl.detach().sum())
    return per_token.sum() / max(1, n_tokens), kl_sum
