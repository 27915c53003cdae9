"""The one decode loop every torch-side generation goes through: the worker's chat and batches,
the trainers' held-out samples and GRPO rollouts.

    settings = Decoding.from_model(model, temperature=0.7, top_p=0.9)   # the worker's semantics
    new = decode(model, ids, mask, settings, max_new_tokens=128, stop=[eos], pad_id=pad)

`decode` returns what `model.generate(...)[:, prompt_len:]` returns, token for token for greedy
decoding (tests/inference/test_decode.py): the new tokens of each row, the stop token that
ended a row included and pad after it, as long as the longest row. It is a plain loop over
`model.forward` with a cache: the prompt once (logits of its last position only), then one
token per step, sampling in torch, rows stopping as they finish and the loop ending when all
have. generate() pays, per token, for its stopping criteria, its logits-processor lists built
for every option, a fresh model-input dict and a cache-position bookkeeping that this loop does
not need; see bench/decode.py for the figures (docs/BENCHMARKS.md, "Decode speed").

Sampling keeps generate()'s semantics as the worker called it: the model's
generation_config.json supplies the repetition penalty (the bundled model's 1.1) and top_k
(transformers' 50 when it sets none); temperature and top_p come from the request; temperature
0 is greedy, with the repetition penalty still applied, as generate() applies it. The
processors are transformers' own classes, in generate()'s order, so the same seed draws the
same tokens. `Decoding.pure(t)` is the model's full distribution at temperature t (GRPO: the
distribution its loss scores).

Imports torch: only the worker process and the trainers import this module.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from dragonfarm_core.inference.worker_step import ROW_COPIES, DecodeStep, base_model
from dragonfarm_core.rundir.threads import OtherLoad

# transformers' own default when a generation_config sets no top_k (GenerationConfig fills it
# in for sampling): the worker's replies were drawn with it before this loop existed.
DEFAULT_TOP_K = 50
# Below this many parameters a CPU decodes faster on one thread: a token is a few hundred small
# ops, and every op split over threads waits at a barrier for the slowest one (for all of
# them when another process holds a core). Measured with bench/decode.py; see docs/BENCHMARKS.md
# "Decode speed" for the figures on the bundled model (6M) and the SmolLM2-135M shape.
ONE_THREAD_BELOW = 50_000_000
# ...unless the batch has this many rows: then each product is large enough to split. The
# bundled model in float32, 55-token prompts, 64 new tokens, medians of 3 turns on an idle
# 2-core machine (2026-12-05), tokens/s on 2 threads over 1: 1.11 at 1 row, 0.90 at 4, 1.28 at
# 8, 1.33 at 16, 1.43 at 32; with an unmerged LoRA adapter on every linear layer (a GRPO
# rollout) 0.99, 0.99, 1.02, 1.16, 1.29. A GRPO step's 32 rollouts of 48 tokens: 0.79 s
# against 1.11-1.18 s.
ALL_THREADS_FROM_ROWS = 8
# float16 on a CPU. Batch-1 decode reads every weight once a token, and torch's float16
# matrix-vector product (float32 accumulation, AVX2 or AVX-512 kernels) moves half the bytes at a
# better rate than float32's (2 threads, weights beyond the cache: 22-26 GB/s against 7-12).
# With the trimmed step (worker_step, which attends in float32), three runs of bench/decode.py
# (AMD EPYC, AVX-512, 2 cores, greedy, 128 new tokens, tokens/s, float32 against float16): the
# SmolLM2-135M shape 14.6-15.2 against 36.4-54.8 at batch 1 and 57-82 against 67-79 at batch
# 8; the bundled model (6M) 183-219 against 450-461 at batch 1 but 823-1,153 against 648-803 at
# batch 8 (its time is in per-op overhead, and float16's elementwise ops and batched products
# are slower). So the worker's "auto" on such a CPU is half precision from HALF_PRECISION_FROM
# parameters, float32 below, and a float32 model reads float16 copies for one row: the bundled
# model, compiled step, 2 threads (2026-12-06): 820-980 tokens/s against float32's 300-330;
# greedy replies to 20 example tickets (96 new tokens) the same as float32's, all 20.
# Which half precision: float16's kernel is fast only for one row. With more rows (a batch, the
# prompt) it runs row by row: [8 x 576] @ [576 x 1536] took 393 us in float16, 183 in float32,
# 98 in bfloat16 on a CPU with bf16 instructions (AVX512-BF16), and a 40-token prompt through
# the 135M shape 248 ms in float16. So on such a CPU the model is held in bfloat16 (the prompt
# and batches) with float16 copies of its matrices for one-row steps (worker_step's
# add_row_copies; two half copies take what one float32 copy takes). The 135M shape, same
# session (2026-12-05), tokens/s at batch 1 and 8: float32 20 and 90, float16 58 and 92,
# bfloat16 31 and 183, bfloat16 with the float16 copies 68 and 171-180; the bundled model
# (which stays float32) 286/1,317 float32 against 585-630/2,006 with the copies on 2 threads.
# With a merged LoRA adapter the 135M shape ran 24.7 against 12.8, unmerged only 17.8 (see
# worker.Models.merges_at_load). bfloat16 was slower than float16 on both models, and with
# torch held to no SIMD kernels (ATEN_CPU_CAPABILITY=default) float16 ran at half float32's
# speed. Greedy replies of the bundled model in float16 agreed with float32's on 19 of 20
# example tickets (96 new tokens each). A float16 model whose activations overflow is caught
# here (NonFiniteLogits) and reloaded in float32 by the worker.
HALF_PRECISION_FROM = 50_000_000


class NonFiniteLogits(ValueError):
    """Half-precision activations overflowed: the logits hold inf or nan."""


@dataclass(frozen=True)
class Decoding:
    """How each next token is chosen: 0 temperature is greedy; the rest as generate() does."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    # Draw as generate() does (torch.multinomial), so that a seed draws generate()'s tokens;
    # False draws from the same distribution by its cumulative sums (`draw`).
    as_generate: bool = True
    # (token id, bias) pairs added to the logits first (OpenAI's logit_bias; `dragonfarm serve`).
    logit_bias: tuple[tuple[int, float], ...] = ()

    @classmethod
    def from_model(
        cls,
        model: Any,
        temperature: float,
        top_p: float = 1.0,
        logit_bias: tuple[tuple[int, float], ...] = (),
    ) -> Decoding:
        """The worker's settings: the request's temperature, top_p and logit_bias over the
        model's own generation_config (its repetition penalty, its top_k or transformers'
        default)."""
        config = getattr(model, "generation_config", None)
        penalty = getattr(config, "repetition_penalty", None) or 1.0
        top_k = getattr(config, "top_k", None)
        return cls(
            temperature=temperature,
            top_p=top_p,
            top_k=DEFAULT_TOP_K if top_k is None else int(top_k),
            repetition_penalty=float(penalty),
            logit_bias=logit_bias,
        )

    @classmethod
    def pure(cls, temperature: float) -> Decoding:
        """The model's own distribution at `temperature` (no penalty, top-k or top-p), drawn
        by cumulative sums (GRPO's rollouts: no seed has to draw what generate() draws)."""
        return cls(temperature=temperature, as_generate=False)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def processors(self) -> Any:
        """transformers' logits processors for these settings, in generate()'s order."""
        from transformers import (
            LogitsProcessorList,
            RepetitionPenaltyLogitsProcessor,
            SequenceBiasLogitsProcessor,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        found = LogitsProcessorList()
        if self.logit_bias:
            bias: list[list[list[int] | float]] = [
                [[token], float(value)] for token, value in self.logit_bias
            ]
            found.append(SequenceBiasLogitsProcessor(bias))
        if self.repetition_penalty != 1.0:
            found.append(RepetitionPenaltyLogitsProcessor(self.repetition_penalty))
        if not self.greedy:
            if self.temperature != 1.0:
                found.append(TemperatureLogitsWarper(self.temperature))
            if self.top_k:
                found.append(TopKLogitsWarper(top_k=self.top_k))
            if self.top_p < 1.0:
                found.append(TopPLogitsWarper(top_p=self.top_p))
        return found


def default_stop(model: Any) -> list[int]:
    """The end-of-sequence ids generate() stops at by itself: the generation config's."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return []
    return [int(eos)] if isinstance(eos, int) else [int(i) for i in eos]


# What other processes keep busy, in the worker (`watch_other_load`); None elsewhere.
_other_load: OtherLoad | None = None


def watch_other_load() -> OtherLoad:
    """Start sampling what other processes keep busy (once); one-row steps on row copies then
    decode on the cores they leave idle (`decode_threads`)."""
    global _other_load
    if _other_load is None:
        _other_load = OtherLoad().start()
    return _other_load


def decode_threads(model: Any, rows: int = 1) -> int:
    """Threads to decode `rows` rows of `model` with on a CPU: one row on float16 row copies
    (worker_step.add_row_copies) on the cores other processes leave idle where the worker
    watches them (`watch_other_load`), else on all; one for a small model and a small batch;
    else torch's own count. An OMP_NUM_THREADS the user set wins.

    One row on the copies, the bundled model (6M, float32 with float16 copies), 2 cores, greedy,
    128 new tokens, tokens/s on 1 and 2 threads (2026-12-06): idle, 534 and 634 uncompiled, 721
    and 981 compiled; with one busy-looping process beside it, 508 and 120 uncompiled, 677 and
    216 compiled (float32 without copies: 323 and 328 idle, 290 and 91 so loaded)."""
    most = torch.get_num_threads()
    if os.environ.get("OMP_NUM_THREADS") or rows >= ALL_THREADS_FROM_ROWS:
        return most
    if rows == 1 and getattr(base_model(model), ROW_COPIES, None) is not None:
        return most if _other_load is None else _other_load.free_threads(most)
    if sum(p.numel() for p in model.parameters()) < ONE_THREAD_BELOW:
        return 1
    return most


@contextlib.contextmanager
def cpu_threads(model: Any, rows: int = 1) -> Iterator[None]:
    """Decode `rows` rows on `decode_threads(model, rows)` threads when the model is on the
    CPU; the previous count is restored after (a trainer trains on all of them)."""
    before = torch.get_num_threads()
    on_cpu = next(model.parameters()).device.type == "cpu"
    wanted = decode_threads(model, rows) if on_cpu else before
    if wanted != before:
        torch.set_num_threads(wanted)
    try:
        yield
    finally:
        if wanted != before:
            torch.set_num_threads(before)


def lay_out_for_decoding(model: Any) -> int:
    """Store each float32 linear weight of `model` on a CPU transposed (each input feature's
    weights side by side: `W.t()` contiguous), in place; returns how many. The values and
    shapes do not change, and neither do the tokens (tests/inference/test_worker_dtype.py).

    `F.linear(x, W)` multiplies x by W.t(), and torch's float32 product ran faster with W.t()
    contiguous: the bundled model's 43 matrices for one row took 1.7 ms against 2.5 on one
    thread, and its decode, the same process taking turns (2026-12-06), 1.26x tokens/s at 1
    row, 1.06x at 8, 1.03x at 32. For the worker, whose weights do not train: a trainer's
    backward would read them the other way round."""
    laid_out = 0
    for module in model.modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        weight = module.weight
        if weight.device.type == "cpu" and weight.dtype == torch.float32 and weight.is_contiguous():
            weight.data = weight.data.t().contiguous().t()
            laid_out += 1
    return laid_out


def start_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Left-padded rows' positions as generate() gives them: counted from each row's first real
    token, pads at 1 (they are masked out; the value only has to be a valid position)."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.masked_fill(attention_mask == 0, 1)


def _next_tokens(
    logits: torch.Tensor, seen: torch.Tensor, settings: Decoding, processors: Any
) -> torch.Tensor:
    scores = processors(seen, logits) if processors else logits
    if settings.greedy:
        return scores.argmax(-1)
    probs = torch.softmax(scores, dim=-1)
    if settings.as_generate:
        return torch.multinomial(probs, num_samples=1).squeeze(1)
    return draw(probs)


def draw(probs: torch.Tensor, block: int = 64) -> torch.Tensor:
    """One token from each row of `probs` [rows, vocab]: where a uniform number falls among
    the row's cumulative sums, in float64 so that a rare token keeps its share. The sums go
    block by block (which block, then where in it): a float64 cumsum over the whole vocabulary
    is not vectorized on a CPU (0.76 ms for [32 x 4,096] against 0.07 in float32).

    torch.multinomial draws one number per vocabulary entry (exponential_, one at a time on a
    CPU): 2.6 ms a step for GRPO's 32 rollouts of the bundled model (4,096 entries), about a
    tenth of its rollout time; this draws one number per row: 0.1 ms."""
    rows, vocab = probs.shape
    padded = -vocab % block
    blocks = F.pad(probs, (0, padded)).view(rows, -1, block)  # zeros draw nothing
    ends = blocks.sum(-1, dtype=torch.float64).cumsum(-1)  # [rows, blocks]
    point = torch.rand(rows, 1, dtype=torch.float64, device=probs.device) * ends[:, -1:]
    which = torch.searchsorted(ends, point, right=True).clamp_max(ends.shape[1] - 1)
    before = torch.where(which > 0, ends.gather(1, (which - 1).clamp_min(0)), 0.0)
    inside = blocks.gather(1, which[:, :, None].expand(-1, 1, block)).squeeze(1)
    sums = inside.double().cumsum(-1) + before  # [rows, block]
    offset = torch.searchsorted(sums, point, right=True).clamp_max(block - 1)
    return (which * block + offset).squeeze(1).clamp_max(vocab - 1)


def distinct_rows(*columns: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the distinct rows of `columns` side by side, which of them each row is): GRPO's rows
    repeat each prompt once per completion of its group."""
    side_by_side = torch.cat([c.to(columns[0].dtype) for c in columns], dim=1)
    return torch.unique(side_by_side, dim=0, return_inverse=True)


def repeated_prompts(
    input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`distinct_rows` of the prompts and their masks when some rows repeat, else None."""
    if len(input_ids) < 2:
        return None
    found = distinct_rows(input_ids, attention_mask)
    return found if len(found[0]) < len(input_ids) else None


def plain_cache(model: Any) -> Any:
    """An empty DynamicCache for `model` whose layers all hold every position as it is (full
    attention): one whose rows can be repeated (`repeat_rows`); None for other layers."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=model.config)
    return cache if all(type(layer) is DynamicLayer for layer in cache.layers) else None


def repeat_rows(cache: Any, index: torch.Tensor) -> None:
    """Make row i of a plain cache (`plain_cache`) its row index[i], in place (autograd
    follows: gradients of the repeated rows add up in the row they came from)."""
    for layer in cache.layers:
        layer.batch_select_indices(index)


@torch.no_grad()  # not inference_mode: GRPO scores the sampled ids with grad afterwards
def decode(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    settings: Decoding,
    *,
    max_new_tokens: int,
    stop: Sequence[int],
    pad_id: int | None,
    streamer: Any = None,
    trimmed: bool = True,
    until: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """The new tokens for each left-padded row of `input_ids`, [rows, longest reply]: the stop
    token that ended a row included, `pad_id` after it (as generate() returns them). `stop`
    empty decodes every row to max_new_tokens. `streamer` gets generate()'s calls: put(prompt),
    put(tokens) each step, end(). `trimmed` False keeps every step on model.forward (the tests and
    bench/grpo_rollout.py compare the two). `until` (a transformers StoppingCriteria's call, over
    the prompt and the tokens so far) ends the rows it returns True for, as a stop token does."""
    from transformers import DynamicCache

    rows, prompt_len = input_ids.shape
    device = input_ids.device
    pad = torch.tensor(0 if pad_id is None else pad_id, device=device)
    stops = torch.tensor(list(stop), dtype=torch.long, device=device)
    # Prompt and reply in one buffer: the repetition penalty looks at both, as in generate().
    seen = torch.cat([input_ids, input_ids.new_zeros(rows, max_new_tokens)], dim=1)
    mask = torch.cat([attention_mask, attention_mask.new_ones(rows, max_new_tokens)], dim=1)
    positions = start_positions(attention_mask)
    processors = settings.processors()
    # Rows with the same prompt (GRPO's groups) are read once and their cache rows repeated:
    # the bundled model's 32 rollouts of 4 prompts (40-61 tokens), 48 new tokens each, 0.59-0.62
    # s -> 0.43-0.50 s (float32, 2 threads).
    cache = plain_cache(model)
    shared = repeated_prompts(input_ids, attention_mask) if cache is not None else None
    cache = cache if cache is not None else DynamicCache(config=model.config)
    running = torch.ones(rows, dtype=torch.bool, device=device)
    if streamer is not None:
        streamer.put(input_ids.cpu())
    # The prompt goes through model.forward; each token after it through the trimmed step
    # when the model has a shape it knows (worker_step), else through model.forward too.
    step: DecodeStep | None = None
    step_ids, step_pos, n = input_ids, positions, 0
    while n < max_new_tokens:
        length = prompt_len + n
        if step is not None:
            logits = step(step_ids, step_pos, length - 1, mask)
        else:
            model_ids, model_mask, model_pos = step_ids, mask[:, :length], step_pos
            if n == 0 and shared is not None:  # each distinct prompt once
                model_ids, model_mask = shared[0].split(prompt_len, dim=1)
                model_pos = start_positions(model_mask)
            out = model(
                input_ids=model_ids,
                attention_mask=model_mask,
                position_ids=model_pos,
                cache=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            logits = out.logits[:, -1, :]
            if n == 0 and shared is not None:
                logits = logits[shared[1]]
                repeat_rows(cache, shared[1])
            if n == 0 and trimmed:
                step = DecodeStep.build(model, cache, prompt_len, prompt_len + max_new_tokens)
        scores = logits.float()
        # Their float32 sum is finite exactly when they all are (float16's largest times the
        # vocabulary is far from float32's): one pass, where isfinite().all() took four (200 us
        # a token over the SmolLM2-135M shape's 49,152 logits, 1.5 % of its step).
        if logits.dtype == torch.float16 and not bool(scores.sum().isfinite()):
            raise NonFiniteLogits(
                f"The model's float16 values overflowed at new token {n + 1} (the logits are "
                "not finite)."
            )
        token = _next_tokens(scores, seen[:, :length], settings, processors)
        token = torch.where(running, token, pad)
        seen[:, length] = token
        n += 1
        if streamer is not None:
            streamer.put(token.cpu())
        if stops.numel():
            running &= ~torch.isin(token, stops)
        if until is not None:
            running &= ~until(seen[:, : length + 1])
        if (stops.numel() or until is not None) and not bool(running.any()):
            break
        step_ids, step_pos = token[:, None], step_pos[:, -1:] + 1
    if streamer is not None:
        streamer.end()
    return seen[:, prompt_len : prompt_len + n].clone()
