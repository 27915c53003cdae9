"""Translating a model's chat template into the Go template Ollama renders, and proving it.

The chat templates in tests/export_templates/ are the models' own (the presets' families:
SmolLM2 and the bundled model are ChatML, Qwen 2.5, Llama 3 and 3.2, Gemma 2 and 3). Each is
translated, then rendered as Ollama would render the translation (gotemplate, held to real Go
by tests/export/test_gotemplate.py) and compared with the Jinja template's own output string.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dragonfarm_core import chat_template
from dragonfarm_core.export.ollama import check as oc
from dragonfarm_core.export.ollama import gotemplate
from dragonfarm_core.export.ollama import register as orr
from dragonfarm_core.export.ollama import template as ot
from dragonfarm_core.export.ollama.template import (
    OllamaTemplate,
    TemplateMismatch,
    UnknownTemplateFamily,
)
from dragonfarm_core.serve import ollama as oe

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "export_templates"
BUNDLED = ROOT / "assets" / "models" / "tiny-support"
# The special tokens each template file is rendered with (the models' own).
TOKENS = json.loads((HERE / "tokens.json").read_text(encoding="utf-8"))
# (family, default system prompt, BOS text the template writes, takes a system message)
EXPECTED = {
    "smollm2": ("chatml", "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
                None, True),
    "qwen2.5": ("qwen", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
                None, True),
    "llama3": ("llama3", None, "<|begin_of_text|>", True),
    "llama3.2": ("llama3", None, "<|begin_of_text|>", True),
    "gemma2": ("gemma", None, "<bos>", False),
    "gemma3": ("gemma", None, "<bos>", True),
}  # fmt: skip
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}"
    "{% endif %}{% endfor %}"
)
EXTRA = [  # a longer conversation than the fixed ones: five turns, punctuation, unicode
    {"role": "user", "content": "Ça ne marche pas: l'écran reste noir."},
    {"role": "assistant", "content": "Hold the power button for 10 s."},
    {"role": "user", "content": 'Done. Now it shows "E42".'},
    {"role": "assistant", "content": "E42 means the battery is empty; charge it for an hour."},
    {"role": "user", "content": "Thanks!"},
]


def source(name: str) -> str:
    return (HERE / f"{name}.jinja").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", list(TOKENS))
def test_each_family_is_translated_and_renders_exactly_like_the_model_template(name):
    tmpl = ot.translate(source(name), TOKENS[name])
    family, system, bos, takes_system = EXPECTED[name]
    assert (tmpl.family, tmpl.system, tmpl.bos, tmpl.takes_system) == (
        family,
        system,
        bos,
        takes_system,
    )
    cases = [("fixed", list(c)) for c in oc.FIXED_CONVERSATIONS] + [("extra", EXTRA)]
    check = oc.check_template(tmpl, source(name), TOKENS[name], cases)
    assert check["identical"] is True, oc.describe_difference(check)
    assert check["checked"] + check["skipped"] == 5
    assert check["skipped"] == (2 if name == "gemma2" else 0)  # Gemma 2 refuses system prompts
    # The comparison itself, spelled out for one conversation: the Jinja string less its BOS.
    hf = chat_template.render(source(name), EXTRA, add_generation_prompt=True, **TOKENS[name])
    assert hf == (bos or "") + ot.ollama_prompt(tmpl, EXTRA)


def test_the_bundled_model_is_chatml_without_a_default_system_prompt():
    template, tokens = chat_template.load_chat_template(BUNDLED)
    tmpl = ot.translate(template, tokens)
    assert (tmpl.family, tmpl.system, tmpl.bos) == ("chatml", None, None)
    assert tmpl.template == ot.CHATML_GO
    assert oc.check_template(tmpl, template, tokens)["identical"] is True


def test_the_default_system_prompt_is_what_ollama_inserts_only_without_a_system_message():
    tmpl = ot.translate(source("qwen2.5"), TOKENS["qwen2.5"])
    plain = ot.ollama_prompt(tmpl, [{"role": "user", "content": "Hi"}])
    assert plain.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
    own = ot.ollama_prompt(tmpl, [{"role": "system", "content": "Be terse."},
                                  {"role": "user", "content": "Hi"}])  # fmt: skip
    assert "Qwen" not in own and own.startswith("<|im_start|>system\nBe terse.<|im_end|>")


def test_the_templates_written_are_those_held_to_real_go():
    golden = json.loads((HERE / "ollama_go_golden.json").read_text(encoding="utf-8"))
    written = {c["name"].split("/")[0]: c["template"] for c in golden}
    for name in TOKENS:
        template = ot.translate(source(name), TOKENS[name]).template
        if name == "llama3.2":  # its system block carries the day's date (strftime_now)
            template = template.split("Today Date: ")[0]
            assert written[name].startswith(template)
        else:
            assert template == written[name], name


def test_an_unknown_family_is_refused_with_its_name_and_the_embedded_template_offered():
    with pytest.raises(UnknownTemplateFamily) as caught:
        ot.translate(MISTRAL, {"bos_token": "<s>", "eos_token": "</s>"})
    message = str(caught.value)
    assert "Mistral / Llama 2 ([INST] ... [/INST])" in message
    assert "ChatML, Qwen (ChatML), Llama 3, Gemma" in message
    assert "template='embedded'" in message and "tokenizer.chat_template" in message


def test_a_family_laid_out_unusually_is_refused_not_mistranslated():
    # ChatML markers, but the generation prompt lacks its newline.
    odd = chat_template.DEFAULT_CHAT_TEMPLATE.replace(
        "'<|im_start|>assistant\n'", "'<|im_start|>assistant'"
    )
    assert odd != chat_template.DEFAULT_CHAT_TEMPLATE
    with pytest.raises(oe.OllamaExportError, match="looks like ChatML but its user turn"):
        ot.translate(odd, {})


def test_a_template_that_differs_is_caught_and_the_first_differing_token_named():
    template, tokens = chat_template.load_chat_template(BUNDLED)
    good = ot.translate(template, tokens)
    # A Go template that forgets the newline after the role, as a hand-written one might.
    broken = OllamaTemplate("chatml", good.template.replace("{{ .Role }}\n", "{{ .Role }} "))
    check = oc.check_template(broken, template, tokens, tokenizer=oc.load_tokenizer(BUNDLED))
    assert check["identical"] is False
    d = check["first_difference"]
    assert (d["conversation"], d["source"], d["char"]) == (0, "fixed", len("<|im_start|>user"))
    assert d["expected"].startswith("<|im_start|>user\n") and d["ollama"].startswith(
        "<|im_start|>user "
    )
    token = d["token"]
    # <|im_start|>, user, then the newline token on the model's side, "▁My" on Ollama's.
    assert token["position"] == 2
    assert token["expected"]["text"] == "\n" and token["ollama"]["text"] == " My"
    assert token["expected"]["id"] != token["ollama"]["id"]
    assert "token 2: the model's template has '\\n'" in oc.describe_difference(check)


def test_parameters_come_from_the_generation_config_and_the_eos_tokens():
    tmpl = ot.translate(*chat_template.load_chat_template(BUNDLED))
    params = orr.parameters(BUNDLED, tmpl)
    # generation_config.json: eos 5 (<|im_end|>), sampling 0.7 / 0.9, repetition 1.1, 256 new.
    assert params == {"stop": ["<|im_start|>", "<|im_end|>"], "temperature": 0.7, "top_p": 0.9,
                      "repeat_penalty": 1.1, "num_predict": 256, "num_ctx": 2048}  # fmt: skip


def test_greedy_generation_config_is_temperature_zero_and_every_eos_a_stop(tmp_path):
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"do_sample": False, "eos_token_id": [7, 9]})
    )
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 131072}))
    (tmp_path / "tokenizer.json").write_text(json.dumps(
        {"added_tokens": [{"id": 7, "content": "<|eot_id|>"}], "model": {"vocab": {"</s>": 9}}}))  # fmt: skip
    params = orr.parameters(tmp_path, OllamaTemplate("llama3", "", stop=("<|eot_id|>", "<|eom|>")))
    assert params == {
        "stop": ["<|eot_id|>", "<|eom|>", "</s>"],
        "temperature": 0.0,
        "num_ctx": 8192,
    }


def test_the_modelfile_has_from_template_system_and_one_line_per_parameter():
    tmpl = ot.translate(source("smollm2"), TOKENS["smollm2"])
    text = orr.modelfile("model-q8_0.gguf", tmpl, {"stop": ["<|im_start|>", "<|im_end|>"],
                                                 "temperature": 0.2}, "dragonfarm: run r")  # fmt: skip
    lines = text.splitlines()
    assert lines[:2] == ["# dragonfarm: run r", "FROM model-q8_0.gguf"]
    assert f'TEMPLATE """{ot.CHATML_GO}"""' in text
    assert (
        'SYSTEM """You are a helpful AI assistant named SmolLM, trained by Hugging Face"""' in text
    )
    assert lines[-3:] == ['PARAMETER stop "<|im_start|>"', 'PARAMETER stop "<|im_end|>"',
                          "PARAMETER temperature 0.2"]  # fmt: skip
    # The TEMPLATE block holds the Go template verbatim (newlines kept), as Ollama reads it.
    block = text.split('TEMPLATE """', 1)[1].split('"""', 1)[0]
    assert block == ot.CHATML_GO and gotemplate.parse(block)


def test_eval_prompts_are_cut_at_their_last_user_message(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}]},
            {"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "q2"}]},
            {"text": "no messages"}]  # fmt: skip
    (data / "eval.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert oc.eval_conversations(tmp_path) == [
        [{"role": "user", "content": "q1"}],
        [{"role": "system", "content": "s"}, {"role": "user", "content": "q2"}],
    ]


def test_mismatch_is_an_export_error():
    assert issubclass(TemplateMismatch, oe.OllamaExportError)
