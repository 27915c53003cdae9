"""Fixtures for the inference tests: a tiny random Llama with a ChatML tokenizer, and a run.

Built on the spot (a second or two on a CPU) so the tests need neither the Hub nor the bundled
model: a byte-level BPE tokenizer trained on a few sentences, a 2-layer Llama with random
weights, and a LoRA adapter with non-zero weights (so the adapter visibly changes the output)
saved in a run directory that looks exactly like a finished training run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dragonfarm_core.rundir import files

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CORPUS = [
    "My thermostat keeps dropping off Wi-Fi.",
    "Restart the router, then re-pair the device from the app.",
    "My order arrived damaged and the box was crushed.",
    "We will send a replacement at no cost; keep the damaged item.",
    "How do I cancel my subscription before it renews?",
    "Open Settings, then Billing, and choose Cancel plan.",
    "What is 12 plus 30? The answer is 42.",
] * 20


def build_tiny_model(path: Path, seed: int = 0) -> Path:
    """Save a tiny random Llama and its tokenizer (ChatML template) in `path`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    raw.train_from_iterator(CORPUS, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    tokenizer.chat_template = CHATML
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_adapter(model_dir: Path, adapter_dir: Path, seed: int = 1) -> Path:
    """A LoRA adapter on q/v projections with random (non-identity) weights."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    config = LoraConfig(
        r=4,
        lora_alpha=16,
        target_modules=["q_proj", "v_proj"],
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(base, config)
    with torch.no_grad():  # make the update large enough to change greedy outputs
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.mul_(4.0)
    peft_model.save_pretrained(adapter_dir)
    return adapter_dir


def build_run(runs_dir: Path, model_dir: Path, name: str = "tiny-run") -> Path:
    """A finished run directory: config.json, status.json and adapter/."""
    run_dir = runs_dir / f"20260101-000000-{name}"
    run_dir.mkdir(parents=True)
    files.write_config(
        run_dir,
        {
            "schema": 1,
            "id": run_dir.name,
            "name": name,
            "method": "sft",
            "created_at": files.now_iso(),
            "model": {
                "name": str(model_dir),
                "base": str(model_dir),
                "revision": None,
                "trust_remote_code": False,
                "adapters": [],
            },
            "continued_from": None,
        },
    )
    files.write_status(run_dir, {"state": "succeeded", "finished_at": files.now_iso()})
    build_adapter(model_dir, run_dir / files.ADAPTER_DIR)
    return run_dir


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    return build_run(tmp_path_factory.mktemp("runs"), tiny_model)
