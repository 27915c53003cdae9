"""Builders for trainer tests and the benchmark: support conversations and a tiny model.

`support_conversations` makes synthetic ticket conversations in training format;
`build_tiny_model` writes a 2-layer random-init Llama with a ChatML BPE tokenizer (a second to
build, no network). Unit tests use that model; slow tests use the bundled model when present.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files, launch

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]

PRODUCTS = ["thermostat", "doorbell", "smart plug", "router", "camera", "speaker"]
PROBLEMS = [
    "keeps dropping off Wi-Fi",
    "will not turn on",
    "shows a red light",
    "stopped updating",
    "makes a clicking noise",
    "lost its settings",
]
FIXES = [
    "Hold the reset button for ten seconds, then pair it again in the app.",
    "Unplug it for a minute, plug it back in, and check the firmware version.",
    "Move it closer to the router and switch the network to 2.4 GHz.",
    "Open the app, go to Settings, Devices, and choose Reinstall.",
    "Replace the batteries and make sure the cover clicks shut.",
]


def support_conversations(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Synthetic ticket conversations in training format, with varied lengths."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        product, problem = rng.choice(PRODUCTS), rng.choice(PROBLEMS)
        body = " ".join(
            [f"My {product} {problem}."] + ["I tried restarting it already."] * rng.randint(0, 6)
        )
        reply = " ".join(
            [f"Sorry about the {product}."]
            + rng.sample(FIXES, rng.randint(1, 4))
            + ["Let us know if it helps."]
        )
        messages = [
            {"role": "user", "content": f"Ticket {i}: {product}\n\n{body}"},
            {"role": "assistant", "content": reply},
        ]
        if i % 7 == 0:
            messages.insert(0, {"role": "system", "content": "You are a support agent."})
        rows.append({"messages": messages})
    return rows


def build_tiny_model(out: Path) -> Path:
    """A 2-layer random-init Llama and a BPE tokenizer trained on the support texts."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    texts = [m["content"] for r in support_conversations(300, seed=1) for m in r["messages"]]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(
        texts + ["user assistant system"] * 5,
        trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS, show_progress=False),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="<|im_end|>",
        unk_token="<unk>",
        pad_token="</s>",
        chat_template=CHATML,
    )
    tokenizer.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(out)
    return out


# --- runs on several processes (test_sft_devices, test_pref_devices) ----------------------


def on_devices(run_dir: Path, devices: int | None) -> Path:
    config = files.read_config(run_dir)
    config["hardware"]["devices"] = devices
    files.write_config(run_dir, config)
    return run_dir


def wait_for(run_dir: Path, until: str = "terminal", timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = launch.live_status(run_dir)
        if status.get("state") in files.TERMINAL_STATES:
            return status
        if until == "step 3" and (status.get("step") or 0) >= 3:
            return status
        time.sleep(0.5)
    raise AssertionError(f"{run_dir.name} did not finish: {files.read_log_tail(run_dir, 30)}")


def curves(run_dir: Path) -> tuple[dict[int, float], dict[int, float]]:
    """(train loss per step, held-out loss per step); a step logged twice fails."""
    train, held_out = {}, {}
    for row in files.read_progress(run_dir):
        column, into = ("loss", train) if row["loss"] is not None else ("eval_loss", held_out)
        assert row["step"] not in into, f"step {row['step']} logged twice in {run_dir.name}"
        into[row["step"]] = row[column]
    return train, held_out


def liger_installed(installed: bool) -> Any:
    """importlib.util.find_spec as if the liger-kernel package were (or were not) installed;
    every other name is looked up as usual."""
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        if name == "liger_kernel":
            return real("json") if installed else None  # any spec stands for "installed"
        return real(name, *args)

    return find_spec
