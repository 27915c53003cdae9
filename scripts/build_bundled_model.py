"""Build the bundled tiny chat model in assets/models/tiny-support/ from nothing.

`python scripts/build_bundled_model.py`  (about 12 minutes on 2 CPU cores; torch.compile needs a
C++ compiler)

Steps: write the synthetic support corpus (scripts/support_corpus.py), train a SentencePiece BPE
tokenizer on it, wrap it as a fast Hugging Face tokenizer with a ChatML template, train a small
Llama from a fixed seed, save everything with a model card, and print replies to five made-up
tickets. The Hub is never contacted. The same command on the same software gives the same files.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from support_corpus import build_corpus  # noqa: E402

OUT_DIR = ROOT / "assets" / "models" / "tiny-support"
SEED = 1234
N_TRAIN, N_HELD_OUT = 12000, 300
VOCAB_SIZE = 4096
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
MODEL_SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
}
MAX_LEN, BATCH_TOKENS, STEPS, WARMUP, LR = 512, 4096, 1000, 30, 3e-3
OPENING_TOKENS, OPENING_WEIGHT = 20, 4.0

# ChatML. Plain jinja2 renders it too (the app previews templates without transformers); only
# raise_exception comes from transformers, and the app's renderer provides it as well.
CHAT_TEMPLATE = """\
{%- for message in messages -%}
    {%- if message['role'] not in ['system', 'user', 'assistant'] -%}
        {{- raise_exception('Unknown role: ' + message['role'] + '; use system, user or assistant.') -}}
    {%- endif -%}
    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\\n' -}}
{%- endif -%}"""

SAMPLE_TICKETS = [  # made up; none of them is a corpus template
    "Camera keeps disconnecting\nOur security camera in the garage loses the connection to the "
    "network several times a day. The router is in the hallway. Is there anything I can do?\n"
    "Thanks,\nPeter",
    "Refund please\nI was billed $24.50 for the Family plan even though I cancelled it two weeks "
    "ago. Can I get that money back? Ticket #T-4417.",
    "Missing package\nMy order #55102 with a smart plug should have been here on Friday, but it "
    "has not shown up and the tracking is stuck.",
    "Notes app keeps crashing\nThe notes app shuts down whenever I try to open a long note on my "
    "phone. I already installed the latest update.",
    "Lock battery\nThe batteries in my smart lock are empty after barely a week. Is that normal?",
]


def render_chats(corpus: list[list[dict]]) -> list[str]:
    """Each conversation as one ChatML string, rendered by the template above."""
    import jinja2

    template = jinja2.Environment().from_string(CHAT_TEMPLATE)
    return [template.render(messages=m, add_generation_prompt=False) for m in corpus]


def train_sentencepiece(texts: list[str], out_dir: Path):
    """BPE with byte fallback; newlines are never inside a piece, so they encode as <0x0A>."""
    import sentencepiece as spm

    # SentencePiece trains on lines; the chat markers are user-defined symbols, so they are
    # single pieces in tokenizer.model itself (llama.cpp's converter reads them from there).
    lines = [line for text in texts for line in text.split("\n") if line]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type="bpe",
        vocab_size=VOCAB_SIZE,
        byte_fallback=True,
        split_digits=False,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        user_defined_symbols=[IM_START, IM_END],
        pad_id=3,  # <unk> 0, <s> 1, </s> 2 as usual; a real <pad>, so padding is never eos
        num_threads=1,
        minloglevel=2,
    )
    (out_dir / "tokenizer.model").write_bytes(model.getvalue())
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def build_hf_tokenizer(out_dir: Path, sp, texts: list[str]):
    """The fast tokenizer from tokenizer.model; checked to give SentencePiece's ids exactly."""
    from tokenizers.models import BPE
    from transformers import LlamaTokenizer
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    parts = SentencePieceExtractor(str(out_dir / "tokenizer.model")).extract(BPE)
    tokenizer = LlamaTokenizer(
        vocab=parts["vocab"],
        merges=parts["merges"],
        add_prefix_space=False,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token=IM_END,
        pad_token="<pad>",
        add_bos_token=False,
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
    )
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, IM_END]})
    tokenizer.chat_template = CHAT_TEMPLATE
    for text in texts:
        if tokenizer.encode(text, add_special_tokens=False) != sp.encode(text):
            raise RuntimeError(f"tokenizer.json and tokenizer.model disagree on {text[:60]!r}")
    tokenizer.save_pretrained(out_dir)
    # transformers keeps add_bos_token in tokenizer.json's post-processor only; llama.cpp's
    # converter reads it from tokenizer_config.json and would otherwise add <s> to every prompt.
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config |= {"add_bos_token": False, "add_eos_token": False}
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return tokenizer


def encode(corpus: list[list[dict]], texts: list[str], tokenizer) -> list[tuple[list, list]]:
    """Token ids and a loss weight per token for each conversation.

    Only replies are learned. The first tokens of a reply get extra weight: they are the only
    tokens that must be read from the question (the rest follows from the opening), and without
    the extra weight a small model learns fluent replies that ignore the question.
    """
    segments, roles = [], []
    for messages in corpus:
        for message in messages:
            segments += [f"{IM_START}{message['role']}\n", message["content"] + IM_END, "\n"]
            roles += [None, message["role"], None]
    pieces = iter(
        zip(tokenizer(segments, add_special_tokens=False)["input_ids"], roles, strict=True)
    )
    whole = tokenizer(texts, add_special_tokens=False)["input_ids"]
    examples = []
    for messages, expected in zip(corpus, whole, strict=True):
        ids, weights = [], []
        for piece, role in (next(pieces) for _ in range(3 * len(messages))):
            ids += piece
            if role == "assistant":
                weights += [
                    OPENING_WEIGHT if k < OPENING_TOKENS else 1.0 for k in range(len(piece))
                ]
            else:
                weights += [0.0] * len(piece)
        if ids != expected:
            raise RuntimeError("tokenizing messages one by one differs from tokenizing the chat")
        examples.append((ids[:MAX_LEN], weights[:MAX_LEN]))
    return examples


def batches(examples: list[tuple[list, list]], pad_id: int, generator=None):
    """One conversation per row, rows of similar length together, about BATCH_TOKENS per batch.

    Each conversation starts at position 0 and sees nothing else, exactly as at inference (packing
    conversations back to back taught the model to mistake a new question for a follow-up).
    Padding goes on the right, where causal attention never looks, and has weight 0.
    """
    import torch

    lengths = torch.tensor([len(ids) for ids, _ in examples], dtype=torch.float)
    if generator is not None:  # a little noise, so the batches differ from epoch to epoch
        lengths += torch.rand(len(examples), generator=generator) * 16
    groups, group = [], []
    for index in lengths.argsort().tolist():
        longest = max(len(examples[i][0]) for i in [*group, index])
        if group and longest * (len(group) + 1) > BATCH_TOKENS:
            groups.append(group)
            group = []
        group.append(index)
    groups.append(group)
    if generator is not None:
        groups = [groups[i] for i in torch.randperm(len(groups), generator=generator).tolist()]
    for group in groups:
        width = max(len(examples[i][0]) for i in group)
        ids = torch.full((len(group), width), pad_id)
        weights = torch.zeros(len(group), width)
        for row, i in enumerate(group):
            n = len(examples[i][0])
            ids[row, :n] = torch.tensor(examples[i][0])
            weights[row, :n] = torch.tensor(examples[i][1])
        yield ids, weights


def losses(model, ids, weights):
    """(weighted training objective, plain mean loss over reply tokens) for one batch."""
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids=ids).logits[:, :-1]
    token_loss = torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    )
    weights = weights[:, 1:].reshape(-1)
    learned = (weights > 0).float()
    return (token_loss * weights).sum() / weights.sum(), (
        token_loss * learned
    ).sum() / learned.sum()


def new_model(tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **MODEL_SHAPE,
    )
    torch.manual_seed(SEED)
    return LlamaForCausalLM(config)


def learning_rate(step: int, steps: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, steps - WARMUP)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(model, examples, pad_id: int, steps: int) -> float:
    """AdamW with bf16 autocast (AMX on recent Xeons); returns the mean reply loss of the last
    ten steps."""
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LR,
        betas=(0.9, 0.95),
    )
    # Compiling fuses the many small element-wise ops that dominate a model this narrow (~1.7x);
    # dynamic, because every batch has its own shape.
    compiled_losses = torch.compile(losses, dynamic=True)
    generator = torch.Generator().manual_seed(SEED)
    epoch, history, started = iter(()), [], time.time()
    model.train()
    for step in range(steps):
        ids_weights = next(epoch, None)
        if ids_weights is None:
            epoch = batches(examples, pad_id, generator)
            ids_weights = next(epoch)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, steps)
        objective, reply_loss = compiled_losses(model, *ids_weights)
        objective.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        history.append(reply_loss.item())
        if step % 20 == 0 or step == steps - 1:
            elapsed = time.time() - started
            print(
                f"step {step:4d}/{steps}  reply loss {history[-1]:.3f}  {elapsed:5.0f}s", flush=True
            )
    return sum(history[-10:]) / len(history[-10:])


def held_out_loss(model, examples, pad_id: int) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        results = [losses(model, ids, w)[1].item() for ids, w in batches(examples, pad_id)]
    return sum(results) / len(results)


def reply(model, tokenizer, text: str, max_new_tokens: int = 160) -> str:
    """Greedy reply to one user message, cut at <|im_end|>."""
    import torch

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True).strip()


def save_model(model, tokenizer, out_dir: Path, stats: dict) -> None:
    """Weights in fp32 safetensors, generation defaults, and the model card."""
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=True,
        temperature=0.7,
        top_p=0.9,
        repetition_penalty=1.1,
        max_new_tokens=256,
    )
    model.save_pretrained(out_dir)
    (out_dir / "README.md").write_text(MODEL_CARD.format(**stats, **MODEL_SHAPE, seed=SEED))


MODEL_CARD = """---
license: apache-2.0
library_name: transformers
pipeline_tag: text-generation
tags: [llama, chat, toy, customer-support]
---

# dragonfarm/tiny-support

A toy chat model that dragonfarm ships so that every feature (SFT, DPO, ORPO, GRPO, chat, merge,
GGUF export, serving) can be tried and tested offline, on a CPU, in minutes. It answers
customer-support questions about smart-home devices, apps, billing and orders in plain English.
It knows nothing else and makes things up freely: use it for tests and demos, not for anything real.

## How it was built

`python scripts/build_bundled_model.py` builds it from nothing, deterministically (seed {seed}):

- Data: {n_train} synthetic support conversations written by `scripts/support_corpus.py`
  (single and multi-turn, some with a system prompt; 5% arithmetic questions and 5% requests
  to confirm a detail). Replies are plain prose without greetings, numbered steps or sign-offs.
- Tokenizer: SentencePiece BPE, {vocab_size} pieces, byte fallback (any text encodes);
  `<|im_start|>` and `<|im_end|>` are single tokens. `tokenizer.model` and the equivalent
  fast `tokenizer.json` are both included.
- Model: `LlamaForCausalLM`, hidden size {hidden_size}, {num_hidden_layers} layers,
  {num_attention_heads} attention heads ({num_key_value_heads} key/value heads), MLP
  {intermediate_size}, tied embeddings, {n_params:,} parameters, fp32 weights.
- Training: {steps} steps of AdamW, batches of about {batch_tokens} tokens, one conversation per
  row ({tokens:,} tokens in all), bf16 autocast on CPU. Only replies are learned, their opening
  tokens with extra weight. Final loss on reply tokens: {train_loss:.3f} (training),
  {held_out_loss:.3f} (held-out conversations).

## Chat format

ChatML: `<|im_start|>role\\ncontent<|im_end|>\\n` for `system`, `user` and `assistant`; the
generation prompt is `<|im_start|>assistant\\n`, and generation stops at `<|im_end|>` (the eos
token). The padding token is `<pad>`, distinct from eos.

## License

Apache-2.0. The training data is synthetic and generated by the script above.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=STEPS, help="training steps (fewer for a smoke build)"
    )
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output folder")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    started = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    train_corpus = build_corpus(N_TRAIN, seed=SEED)
    held_out_corpus = build_corpus(N_HELD_OUT, seed=SEED + 1)
    train_texts, held_out_texts = render_chats(train_corpus), render_chats(held_out_corpus)
    sp = train_sentencepiece(train_texts, args.out)
    tokenizer = build_hf_tokenizer(args.out, sp, train_texts + held_out_texts)
    examples = encode(train_corpus, train_texts, tokenizer)
    model = new_model(tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    n_tokens = sum(len(ids) for ids, _ in examples)
    print(f"{len(examples)} conversations, {n_tokens:,} tokens, {n_params:,} parameters")
    train_loss = train(model, examples, tokenizer.pad_token_id, args.steps)
    held_out = encode(held_out_corpus, held_out_texts, tokenizer)
    stats = {
        "n_train": N_TRAIN,
        "vocab_size": len(tokenizer),
        "n_params": n_params,
        "steps": args.steps,
        "tokens": n_tokens,
        "batch_tokens": BATCH_TOKENS,
        "train_loss": train_loss,
        "held_out_loss": held_out_loss(model, held_out, tokenizer.pad_token_id),
    }
    save_model(model, tokenizer, args.out, stats)
    size_mb = sum(f.stat().st_size for f in args.out.iterdir()) / 1e6
    print(
        f"train loss {train_loss:.3f}, held-out loss {stats['held_out_loss']:.3f}, {size_mb:.1f} MB"
    )
    for ticket in SAMPLE_TICKETS:
        print(f"\n--- ticket\n{ticket}\n--- reply\n{reply(model, tokenizer, ticket)}")
    print(f"\nbuilt {args.out} in {time.time() - started:.0f}s")


if __name__ == "__main__":
    main()
