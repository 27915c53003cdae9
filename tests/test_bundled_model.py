"""The bundled tiny model (assets/models/tiny-support) loads offline, chats, and answers on topic.

Built by `python scripts/build_bundled_model.py`; every end-to-end test relies on what is checked here.
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest

MODEL_DIR = Path(__file__).resolve().parents[1] / "assets" / "models" / "tiny-support"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
MESSAGES = [
    {"role": "system", "content": "You are a helpful support agent."},
    {"role": "user", "content": "Order late\nWhere is my order #12345?"},
    {"role": "assistant", "content": "Sorry your order has not arrived yet."},
    {"role": "user", "content": "It has been a week. Ticket T-1234."},
]
QUESTION = (
    "Smart plug offline\nMy smart plug keeps dropping off the Wi-Fi every evening. What can I do?"
)


@pytest.fixture(scope="module")
def tokenizer():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(MODEL_DIR)


@pytest.fixture(scope="module")
def model():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(MODEL_DIR).eval()


def render_with_jinja2(messages: list[dict], add_generation_prompt: bool) -> str:
    """How the app renders templates: plain jinja2, with raise_exception supplied."""

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    source = (MODEL_DIR / "chat_template.jinja").read_text()
    template = jinja2.Environment().from_string(source)
    return template.render(
        messages=messages,
        add_generation_prompt=add_generation_prompt,
        raise_exception=raise_exception,
    )


def test_files_present_and_small():
    names = {p.name for p in MODEL_DIR.iterdir()}
    expected = {"config.json", "generation_config.json", "model.safetensors", "README.md"}
    expected |= {
        "tokenizer.model",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    }
    assert expected <= names
    total_mb = sum(p.stat().st_size for p in MODEL_DIR.rglob("*") if p.is_file()) / 1e6
    assert total_mb < 30, f"the bundled model folder holds {total_mb:.1f} MB"


def test_sentencepiece_model_has_chat_markers_as_single_pieces():
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(MODEL_DIR / "tokenizer.model"))
    ids = sp.encode(f"{IM_START}user\nHi{IM_END}\n")
    assert ids[0] == sp.piece_to_id(IM_START) and sp.piece_to_id(IM_END) in ids
    assert sp.is_control(sp.piece_to_id(IM_START)) is False  # user-defined: always matched whole
    text = "Grüße, 東京 ✓ 42"  # byte fallback: any text survives a round trip
    assert sp.decode(sp.encode(text)) == text


def test_template_renders_the_same_in_transformers_and_jinja2(tokenizer):
    for add in (False, True):
        through_hf = tokenizer.apply_chat_template(
            MESSAGES, tokenize=False, add_generation_prompt=add
        )
        assert through_hf == render_with_jinja2(MESSAGES, add)
    rendered = render_with_jinja2(MESSAGES[:2], add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nYou are a helpful support agent.<|im_end|>\n"
        "<|im_start|>user\nOrder late\nWhere is my order #12345?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    with pytest.raises(ValueError, match="Unknown role"):
        render_with_jinja2([{"role": "robot", "content": "x"}], add_generation_prompt=False)


def test_tokenizer_special_tokens(tokenizer):
    import sentencepiece as spm

    assert tokenizer.is_fast
    assert tokenizer.eos_token == IM_END
    assert tokenizer.pad_token == "<pad>" and tokenizer.pad_token_id != tokenizer.eos_token_id
    for marker in (IM_START, IM_END):
        assert len(tokenizer.encode(marker, add_special_tokens=False)) == 1
    # tokenizer.json and tokenizer.model must agree, or the GGUF export would tokenize differently
    sp = spm.SentencePieceProcessor(model_file=str(MODEL_DIR / "tokenizer.model"))
    text = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert tokenizer.encode(text, add_special_tokens=False) == sp.encode(text)
    assert not text.startswith(tokenizer.bos_token)


@pytest.mark.slow
def test_model_architecture_and_size(model, tokenizer):
    assert model.config.architectures == ["LlamaForCausalLM"]
    n_params = sum(p.numel() for p in model.parameters())
    assert 1_000_000 < n_params < 20_000_000
    assert model.config.tie_word_embeddings
    assert model.config.vocab_size == len(tokenizer)
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids(IM_END)


@pytest.mark.slow
def test_reply_is_readable_on_topic_and_stops_at_eos(model, tokenizer):
    import torch

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=150, do_sample=False)
    new = out[0, ids.shape[1] :].tolist()
    assert new[-1] == tokenizer.eos_token_id, "generation ran to max_new_tokens without <|im_end|>"
    reply = tokenizer.decode(new, skip_special_tokens=True).strip()
    words = reply.split()
    assert len(words) >= 5, reply
    plain = [w for w in words if re.fullmatch(r"[A-Za-z0-9'.,:;!?()$#%-]+", w)]
    assert len(plain) / len(words) > 0.9, reply
    topic = {"plug", "wi-fi", "router", "network", "firmware", "offline"}
    said = {w.strip(".,!?").lower() for w in words}
    assert topic & said, f"reply shares no topic words with the question: {reply}"
