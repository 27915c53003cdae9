"""The first samples also carry `before`: the greedy reply of the model the run started from (its
adapter switched off), which the Monitor shows next to the run's own reply and the data's."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from dragonfarm_core.rundir import files
from dragonfarm_core.trainers import evaluation


def _chat(i: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"My router {i} keeps dropping off the Wi-Fi."},
        {"role": "assistant", "content": f"Hold the reset button for {i} seconds."},
    ]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_before_is_the_base_models_reply_and_only_the_first_few_have_it(
    tiny_model_dir, tokenizer, tmp_path
):
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    chats = [_chat(i) for i in range(evaluation.N_BEFORE + 2)]
    plain = evaluation.generate_samples(base, tokenizer, chats[: evaluation.N_BEFORE], 12, 256)
    # An adapter that changes the replies (init_lora_weights=False: B is not zero).
    config = LoraConfig(r=8, lora_alpha=64, target_modules="all-linear", init_lora_weights=False)
    model = get_peft_model(base, config)
    samples = evaluation.write_samples(tmp_path, model, tokenizer, chats, "eval", len(chats), 12,
                                       256)  # fmt: skip
    assert [s["before"] for s in samples[: evaluation.N_BEFORE]] == plain
    assert all("before" not in s for s in samples[evaluation.N_BEFORE :])
    assert [s["generated"] for s in samples[: evaluation.N_BEFORE]] != plain  # the adapter's
    assert files.read_samples(tmp_path) == samples
