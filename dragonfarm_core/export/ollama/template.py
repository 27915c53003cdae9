"""The chat template for Ollama: a model's Jinja chat template translated into the Go template
Ollama renders, and how Ollama renders it (`ollama_export.serve_ollama` registers the result).

The translation is read from what the model's own template renders, not picked by name. For
each family the presets use (ChatML, Qwen, Llama 3, Gemma) a Go template of that family's
layout is filled in with what probing the Jinja template shows: the default system prompt it
adds, the text its system block starts with, and the begin-of-sequence token it writes (left
to the tokenizer, as llama.cpp adds it from the GGUF). `ollama_check` proves the translation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dragonfarm_core import chat_template
from dragonfarm_core.export.ollama import gotemplate

EMBEDDED = "embedded"

# Marker text, unlikely in any template, rendered to see where a template puts things.
PROBE_SYSTEM = "dragonfarm-probe-system"
PROBE_USER = "dragonfarm-probe-user"
PROBE_BOS = "dragonfarm-probe-bos"


class OllamaExportError(RuntimeError):
    """Serving a run with Ollama failed or was refused; the message says why and what to do."""


class UnknownTemplateFamily(OllamaExportError):
    """The model's chat template is not one of the families dragonfarm translates."""


class TemplateMismatch(OllamaExportError):
    """The translated template renders a conversation differently from the model's own."""


# --- the families -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    name: str
    label: str
    # Strings that end a reply besides the model's eos tokens (Ollama's library uses the same).
    stop: tuple[str, ...]


FAMILIES = {
    "chatml": Family("chatml", "ChatML", ("<|im_start|>", "<|im_end|>")),
    "qwen": Family("qwen", "Qwen (ChatML)", ("<|im_start|>", "<|im_end|>")),
    "llama3": Family("llama3", "Llama 3", ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")),
    "gemma": Family("gemma", "Gemma", ("<start_of_turn>", "<end_of_turn>")),
}  # fmt: skip
# Other layouts, only to name them in the refusal.
OTHER_LAYOUTS = (
    ("[INST]", "Mistral / Llama 2 ([INST] ... [/INST])"),
    ("<|user|>", "Phi-3 / Zephyr (<|user|> ... <|end|>)"),
    ("<|start_of_role|>", "Granite (<|start_of_role|>)"),
    ("<|START_OF_TURN_TOKEN|>", "Command R (<|START_OF_TURN_TOKEN|>)"),
    ("### Instruction", "Alpaca (### Instruction / ### Response)"),
    ("<｜User｜>", "DeepSeek (<｜User｜>)"),
)


def template_family(template: str) -> str | None:
    """The family a Jinja chat template belongs to ("chatml", "qwen", "llama3", "gemma"), by
    the special tokens its layout is made of; None for any other."""
    if "<|start_header_id|>" in template and "<|eot_id|>" in template:
        return "llama3"
    if "<start_of_turn>" in template and "<end_of_turn>" in template:
        return "gemma"
    if "<|im_start|>" in template and "<|im_end|>" in template:
        return "qwen" if "<tool_call>" in template or "You are Qwen" in template else "chatml"
    return None


def describe_layout(template: str) -> str:
    """What an untranslatable template looks like, for the refusal."""
    for marker, name in OTHER_LAYOUTS:
        if marker in template:
            return name
    return "an unrecognised layout"


# The Go templates. `{PREFIX}`-style holes are filled from the probes (`_fill`).
CHATML_GO = (
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n"
    "{{ .Content }}<|im_end|>\n"
    "{{ end }}<|im_start|>assistant\n"
)
LLAMA3_TURNS = (
    '{{- range .Messages }}{{- if ne .Role "system" }}'
    "<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>"
    "{{- end }}{{- end }}<|start_header_id|>assistant<|end_header_id|>\n\n"
)
LLAMA3_SYSTEM = "<|start_header_id|>system<|end_header_id|>\n\n{prefix}{{{{ .System }}}}<|eot_id|>"
GEMMA_GO = (
    "{{- range $i, $_ := .Messages }}\n"
    '{{- if eq .Role "user" }}<start_of_turn>user\n'
    "{{ if and $.System (eq $i 1) }}{{ $.System }}{separator}{{ end }}"
    "{{ .Content }}<end_of_turn>\n"
    '{{ else if eq .Role "assistant" }}<start_of_turn>model\n'
    "{{ .Content }}<end_of_turn>\n"
    "{{ end }}\n"
    "{{- end }}<start_of_turn>model\n"
)


@dataclass(frozen=True)
class OllamaTemplate:
    """A chat template as Ollama takes it: the Go template, the default system prompt, the
    stop strings, and the begin-of-sequence text the Jinja template writes (left to the
    tokenizer; None when it writes none)."""

    family: str
    template: str
    system: str | None = None
    stop: tuple[str, ...] = ()
    bos: str | None = None
    # Whether the model's template takes a system message at all (Gemma 2's refuses one).
    takes_system: bool = True

    @property
    def label(self) -> str:
        return FAMILIES[self.family].label if self.family in FAMILIES else self.family


def jinja_prompt(template: str, messages: Sequence[dict[str, str]], tokens: dict[str, str]) -> str:
    """The prompt the model's Jinja chat template renders for `messages`, ready for a reply."""
    return chat_template.render(template, list(messages), add_generation_prompt=True, **tokens)


def _unusual(family: str, what: str, rendered: str) -> OllamaExportError:
    return OllamaExportError(
        f"The chat template looks like {FAMILIES[family].label} but {what}: it renders "
        f"{rendered[:300]!r}. Pass template={EMBEDDED!r} to let Ollama use the GGUF's own "
        "template, or template='<a Go template>'."
    )


def translate(template: str, tokens: dict[str, str] | None = None) -> OllamaTemplate:
    """The Go template (and system prompt, stops) that renders like Jinja `template`.

    tokens: the special tokens the template may use (bos_token, eos_token...), as
    `chat_template.load_chat_template` reads them. Raises UnknownTemplateFamily for a template
    of another family, OllamaExportError for one of a family laid out unusually.
    """
    tokens = dict(tokens or {})
    family = template_family(template)
    if family is None:
        raise UnknownTemplateFamily(
            f"The model's chat template is not one of the families dragonfarm translates for "
            f"Ollama ({', '.join(f.label for f in FAMILIES.values())}): it looks like "
            f"{describe_layout(template)}; it begins {template[:120]!r}. Pass "
            f"template={EMBEDDED!r} to let Ollama use the chat template embedded in the GGUF "
            "(tokenizer.chat_template, the same Jinja template: recent Ollama releases render "
            "it themselves, older ones match it to their own library), or pass "
            "template='<a Go template>' to write it yourself."
        )
    # The probes render the BOS token as a marker of its own, so a template that writes it is
    # told from one whose text merely starts like it (SmolLM2's BOS is <|im_start|>).
    probe_tokens = {**tokens, "bos_token": PROBE_BOS}
    user_only = jinja_prompt(template, [{"role": "user", "content": PROBE_USER}], probe_tokens)
    try:
        with_system = jinja_prompt(
            template,
            [{"role": "system", "content": PROBE_SYSTEM}, {"role": "user", "content": PROBE_USER}],
            probe_tokens,
        )
    except chat_template.ChatTemplateError:
        with_system = None  # the template refuses a system message (Gemma 2's does)
    bos = tokens.get("bos_token") if user_only.startswith(PROBE_BOS) else None
    user_only = user_only.removeprefix(PROBE_BOS)
    with_system = with_system.removeprefix(PROBE_BOS) if with_system is not None else None
    if PROBE_BOS in user_only + (with_system or ""):
        raise _unusual(family, "it writes the BOS token in the middle", user_only)
    translate_family = {"chatml": _chatml, "qwen": _chatml, "llama3": _llama3, "gemma": _gemma}
    return translate_family[family](family, user_only, with_system, bos)


def _chatml(
    family: str, user_only: str, with_system: str | None, bos: str | None
) -> OllamaTemplate:
    """ChatML and Qwen: a default system prompt, if the template adds one, is the SYSTEM."""
    stop = FAMILIES[family].stop
    turn = f"<|im_start|>user\n{PROBE_USER}<|im_end|>\n<|im_start|>assistant\n"
    preamble = user_only.removesuffix(turn)
    if not user_only.endswith(turn):
        raise _unusual(family, "its user turn is laid out differently", user_only)
    system = None
    if preamble:
        m = re.fullmatch(r"<\|im_start\|>system\n(.*)<\|im_end\|>\n", preamble, re.DOTALL)
        if not m:
            raise _unusual(family, "it writes something unusual before the first turn", user_only)
        system = m.group(1)
    expected = f"<|im_start|>system\n{PROBE_SYSTEM}<|im_end|>\n{turn}"
    if with_system is not None and with_system != expected:
        raise _unusual(family, "its system turn is laid out differently", with_system)
    return OllamaTemplate(family, CHATML_GO, system, stop, bos, with_system is not None)


def _llama3(
    family: str, user_only: str, with_system: str | None, bos: str | None
) -> OllamaTemplate:
    """Llama 3: the text the system block starts with (3.1's date lines) is kept literally."""
    stop = FAMILIES[family].stop
    head = "<|start_header_id|>{}<|end_header_id|>\n\n"
    turn = head.format("user") + f"{PROBE_USER}<|eot_id|>" + head.format("assistant")
    if not user_only.endswith(turn) or with_system is None or not with_system.endswith(turn):
        raise _unusual(family, "its turns are laid out differently", user_only)
    plain, sys_block = user_only.removesuffix(turn), with_system.removesuffix(turn)
    start, end = head.format("system"), f"{PROBE_SYSTEM}<|eot_id|>"
    if not (sys_block.startswith(start) and sys_block.endswith(end)):
        raise _unusual(family, "its system turn is laid out differently", with_system)
    prefix = sys_block[len(start) : -len(end)]
    block = LLAMA3_SYSTEM.format(prefix=_go_text(prefix))
    if plain == f"{start}{prefix}<|eot_id|>":  # 3.1+: a system block in every prompt
        go = block + LLAMA3_TURNS
    elif plain == "":  # 3.0: a system block only with a system message
        go = "{{- if .System }}" + block + "{{ end }}" + LLAMA3_TURNS
    else:
        raise _unusual(family, "it writes something unusual before the first turn", user_only)
    return OllamaTemplate(family, go, None, stop, bos)


def _gemma(family: str, user_only: str, with_system: str | None, bos: str | None) -> OllamaTemplate:
    """Gemma: a system message is folded into the first user turn."""
    stop = FAMILIES[family].stop
    turn = f"<start_of_turn>user\n{PROBE_USER}<end_of_turn>\n<start_of_turn>model\n"
    if user_only != turn:
        raise _unusual(family, "its user turn is laid out differently", user_only)
    separator = "\n\n"  # where the model refuses a system message, as Gemma 3 joins one
    if with_system is not None:
        m = re.fullmatch(
            rf"<start_of_turn>user\n{PROBE_SYSTEM}(.*){PROBE_USER}<end_of_turn>\n"
            r"<start_of_turn>model\n",
            with_system,
            re.DOTALL,
        )
        if not m:
            raise _unusual(family, "its system prompt goes elsewhere", with_system)
        separator = m.group(1)
    go = GEMMA_GO.replace("{separator}", _go_text(separator))
    return OllamaTemplate(family, go, None, stop, bos, with_system is not None)


def _go_text(text: str) -> str:
    """Literal text inside a Go template: `{{` would open an action, so it is printed instead."""
    return text.replace("{{", '{{ "{{" }}')


# --- how Ollama renders it ----------------------------------------------------------------------


def ollama_prompt(tmpl: OllamaTemplate, messages: Sequence[dict[str, str]]) -> str:
    """The prompt Ollama's /api/chat renders for `messages` with this template (less the BOS
    token its tokenizer adds)."""
    return gotemplate.render(tmpl.template, ollama_data(tmpl, messages))


def ollama_data(tmpl: OllamaTemplate, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
    """What Ollama executes a template on for a chat: the model's SYSTEM first when the
    conversation has no system message, consecutive messages of one role merged with a blank
    line, {System, Messages, Tools, Response} (Ollama's server/routes.go, template.go)."""
    msgs = [dict(m) for m in messages]
    if tmpl.system and (not msgs or msgs[0].get("role") != "system"):
        msgs.insert(0, {"role": "system", "content": tmpl.system})
    systems: list[str] = []
    collated: list[dict[str, str]] = []
    for m in msgs:
        role, content = m.get("role", ""), m.get("content", "")
        if role == "system":
            systems.append(content)
        if collated and collated[-1]["Role"] == role and role != "tool":
            collated[-1]["Content"] += "\n\n" + content
        else:
            collated.append({"Role": role, "Content": content})
    return {"System": "\n\n".join(systems), "Messages": collated, "Tools": None, "Response": ""}
