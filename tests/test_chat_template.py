import json

import pytest

from dragonfarm_core.chat_template import (
    DEFAULT_CHAT_TEMPLATE,
    ChatTemplateError,
    learned_span,
    load_chat_template,
    render,
)

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi {there}"},
    {"role": "assistant", "content": "Hello!"},
]


def test_default_template_is_chatml():
    text = render(DEFAULT_CHAT_TEMPLATE, MESSAGES)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi {there}<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
    )
    assert render(DEFAULT_CHAT_TEMPLATE, MESSAGES[:2], add_generation_prompt=True).endswith(
        "<|im_start|>assistant\n"
    )


def test_learned_span_splits_context_from_the_assistant_turn():
    context, learned = learned_span(DEFAULT_CHAT_TEMPLATE, MESSAGES)
    assert context.endswith("<|im_start|>assistant\n")
    assert learned == "Hello!<|im_end|>\n"
    with pytest.raises(ChatTemplateError, match="assistant"):
        learned_span(DEFAULT_CHAT_TEMPLATE, MESSAGES[:2])


def test_transformers_extensions_work():
    template = (
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'tool' %}"
        "{{ raise_exception('no tools') }}{% endif %}{{ m | tojson }}{% endfor %}"
    )
    assert (
        render(template, MESSAGES[:1], bos_token="<s>")
        == '<s>{"role": "system", "content": "Be brief."}'
    )
    with pytest.raises(ChatTemplateError, match="no tools"):
        render(template, [{"role": "tool", "content": "x"}])


def test_bad_template_is_a_clear_error():
    with pytest.raises(ChatTemplateError, match="does not parse"):
        render("{% for %}", MESSAGES)


def test_load_from_tokenizer_config_and_jinja_file(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": [
                    {"name": "default", "template": "A{{ eos_token }}"},
                    {"name": "tool_use", "template": "B"},
                ],
                "eos_token": {"content": "</s>"},
                "bos_token": "<s>",
            }
        )
    )
    template, tokens = load_chat_template(tmp_path)
    assert template == "A{{ eos_token }}" and tokens == {"eos_token": "</s>", "bos_token": "<s>"}
    (tmp_path / "chat_template.jinja").write_text("C")
    assert load_chat_template(tmp_path)[0] == "C"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert load_chat_template(empty) == (DEFAULT_CHAT_TEMPLATE, {})


class _Config:
    def __init__(self, eos):
        self.eos_token_id = eos


class _Model:
    def __init__(self, eos):
        self.generation_config = _Config(eos)


class _Tokenizer:
    eos_token_id, unk_token_id = 2, 0

    def __init__(self, template):
        self.chat_template = template

    def convert_tokens_to_ids(self, token):
        return 7 if token == "<|im_end|>" else self.unk_token_id


def test_stop_ids_are_every_token_that_ends_a_reply():
    from dragonfarm_core.chat_template import stop_ids

    assert stop_ids(_Model([2, 5]), _Tokenizer(DEFAULT_CHAT_TEMPLATE)) == [2, 5, 7]
    assert stop_ids(_Model(None), _Tokenizer("{{ messages }}")) == [2]  # no ChatML end
    assert stop_ids(_Model([3, None]), _Tokenizer(None)) == [2, 3]  # a None id is no token


def test_one_definition_of_the_message_roles():
    import importlib

    from dragonfarm_core import chat_template

    assert chat_template.ROLES == ("system", "user", "assistant")
    for name in ("data.conversations", "inference.protocol", "trainers.grpo_rollout",
                 "trainers.sft_data"):  # fmt: skip
        # by module name: dragonfarm_core.data.conversations is also a function's name
        module = importlib.import_module(f"dragonfarm_core.{name}")
        assert module.ROLES is chat_template.ROLES, module.__name__
