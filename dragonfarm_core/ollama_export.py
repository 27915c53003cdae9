"""`serve_ollama(run)`: a run's model registered with Ollama, and the backend that talks to it.

    backend = dragon.serve_ollama(run)                  # merged, GGUF'd, registered as run.id
    dragon.generate(run, "My thermostat is offline", backend=backend)

Steps, each skipped when already done: merge the run (`export.merge`, <run>/merged/), export
the merged folder to GGUF with llama.cpp (`gguf.export_gguf`), translate the model's chat
template (Jinja, what training used) into the Go template Ollama renders, prove the
translation, write <run>/ollama/Modelfile, and register the model through Ollama's
documented API with the official `ollama` client: the GGUF as a blob (POST
/api/blobs/sha256:...), then POST /api/create with the file's digest, the template, the system
prompt and the parameters. Returns `backend_ollama(name, url)`.

The template is where exports go wrong ("my model is worse in Ollama"), so it is translated
from what the model's own template renders, not picked by name. For each family the presets
use (ChatML, Qwen, Llama 3, Gemma) a Go template of that family's layout is filled in with what
probing the Jinja template shows: the default system prompt it adds (SmolLM2's, Qwen's: the
Modelfile's SYSTEM, which Ollama inserts exactly when the template would), the text its system
block starts with (Llama 3's knowledge-cutoff and date lines), and the begin-of-sequence token
it writes (left to the tokenizer, as llama.cpp adds it from the GGUF). Then the check: fixed
conversations and the run's held-out prompts are rendered by the Jinja template and by the Go
template as Ollama runs it (its default system prompt, consecutive turns of one role merged,
`gotemplate`), and the two strings must be equal; the first difference is named by token
(the merged tokenizer) and character. A mismatch stops the export before anything is
registered; the record is <run>/ollama/template_check.json.

Known limits: Go templates cannot trim, so a message with leading or trailing spaces reads
differently for templates that trim content (Gemma, Llama 3); Llama 3's "Today Date" is the
export's date. A template of another family is refused with its name; `template="embedded"`
lets Ollama use the GGUF's own chat template instead, and any Go template may be given.
No torch: the app and a job (`python -m dragonfarm_core.ollama_export`) both run this.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core import chat_template, export, export_jobs, gotemplate
from dragonfarm_core.inference.ollama import DEFAULT_URL, OllamaBackend, backend_ollama
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.atomic import write_atomic
from dragonfarm_core.rundir.run import Run, open_run

JOB_KIND = "ollama"
OLLAMA_DIR = "ollama"
MODELFILE = "Modelfile"
CHECK_FILE = "template_check.json"
# What was registered last (name, url, GGUF), for the Export tab and a later session.
REGISTERED = "registered.json"
EMBEDDED = "embedded"
# How long one HTTP read may take: the blob upload of a large GGUF, Ollama's create.
HTTP_TIMEOUT_S = 600.0
# Ollama's own default context is 4096 (2048 in older releases); a model trained for less is
# given its own, a long-context model no more than this (its KV cache grows with it).
MAX_NUM_CTX = 8192
# Held-out prompts the template check renders besides the fixed conversations.
CHECK_EVAL_PROMPTS = 4

# Conversations every template check renders: one turn, a system prompt, several turns, both;
# multi-line content, none with leading or trailing spaces (see the limits above).
FIXED_CONVERSATIONS: tuple[tuple[dict[str, str], ...], ...] = (
    ({"role": "user", "content": "My thermostat keeps dropping off Wi-Fi."},),
    (
        {"role": "system", "content": "You are a concise support agent."},
        {"role": "user", "content": "How do I cancel my subscription?"},
    ),
    (
        {"role": "user", "content": "My order arrived damaged."},
        {"role": "assistant", "content": "Sorry to hear that. Is the device itself broken?"},
        {"role": "user", "content": "Yes: the screen is cracked.\nThe box was crushed too."},
    ),
    (
        {"role": "system", "content": "Answer in one sentence.\nNever promise refunds."},
        {"role": "user", "content": "What is 12 plus 30?"},
        {"role": "assistant", "content": "12 plus 30 is 42."},
        {"role": "user", "content": "And 42 minus 2?"},
    ),
)

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


def _hf(template: str, messages: Sequence[dict[str, str]], tokens: dict[str, str]) -> str:
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
    user_only = _hf(template, [{"role": "user", "content": PROBE_USER}], probe_tokens)
    try:
        with_system = _hf(
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
    stop = FAMILIES[family].stop
    if family in ("chatml", "qwen"):
        turn = f"<|im_start|>user\n{PROBE_USER}<|im_end|>\n<|im_start|>assistant\n"
        preamble = user_only.removesuffix(turn)
        if not user_only.endswith(turn):
            raise _unusual(family, "its user turn is laid out differently", user_only)
        system = None
        if preamble:
            m = re.fullmatch(r"<\|im_start\|>system\n(.*)<\|im_end\|>\n", preamble, re.DOTALL)
            if not m:
                raise _unusual(
                    family, "it writes something unusual before the first turn", user_only
                )
            system = m.group(1)
        expected = f"<|im_start|>system\n{PROBE_SYSTEM}<|im_end|>\n{turn}"
        if with_system is not None and with_system != expected:
            raise _unusual(family, "its system turn is laid out differently", with_system)
        return OllamaTemplate(family, CHATML_GO, system, stop, bos, with_system is not None)
    if family == "llama3":
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
    # gemma: a system message is folded into the first user turn.
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


# --- the check ----------------------------------------------------------------------------------


def eval_conversations(run_dir: Path, n: int = CHECK_EVAL_PROMPTS) -> list[list[dict[str, str]]]:
    """Up to `n` held-out prompts of the run, each up to its last user message."""
    path = files.data_path(run_dir, "eval")
    found: list[list[dict[str, str]]] = []
    for row in files.read_jsonl(path, tolerant=True) if path.is_file() else []:
        messages = row.get("messages") if isinstance(row, dict) else None
        if not isinstance(messages, list) and isinstance(row, dict):
            messages = row.get("prompt") if isinstance(row.get("prompt"), list) else None
        if not messages:
            continue
        messages = [m for m in messages if isinstance(m, dict)]
        while messages and messages[-1].get("role") == "assistant":
            messages = messages[:-1]
        if messages:
            found.append([{"role": str(m.get("role")), "content": str(m.get("content", ""))}
                          for m in messages])  # fmt: skip
        if len(found) >= n:
            break
    return found


def _token_diff(tokenizer: Any, expected: str, got: str) -> dict[str, Any] | None:
    """The first differing token of the two strings through the model's tokenizer."""
    if tokenizer is None:
        return None
    a = tokenizer.encode(expected, add_special_tokens=False).ids
    b = tokenizer.encode(got, add_special_tokens=False).ids
    for i in range(max(len(a), len(b))):
        x, y = (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)
        if x != y:
            side = [{"id": t, "text": tokenizer.decode([t], skip_special_tokens=False)
                     if t is not None else "(ended)"} for t in (x, y)]  # fmt: skip
            return {"position": i, "expected": side[0], "ollama": side[1]}
    return None


def load_tokenizer(model_dir: str | os.PathLike[str]) -> Any:
    """The folder's fast tokenizer (tokenizer.json) through `tokenizers`, or None."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def check_template(
    tmpl: OllamaTemplate,
    template: str,
    tokens: dict[str, str] | None = None,
    conversations: Sequence[tuple[str, Sequence[dict[str, str]]]] = (),
    tokenizer: Any = None,
) -> dict[str, Any]:
    """Render every (source, conversation) with the Jinja `template` and with `tmpl` as Ollama
    does; the record: identical, counts, and the first difference (conversation, character,
    token, both sides' text around it). A conversation the model's template refuses (a
    system message for Gemma 2) is skipped and counted."""
    tokens = dict(tokens or {})
    cases = list(conversations) or [("fixed", list(c)) for c in FIXED_CONVERSATIONS]
    checked, skipped = 0, 0
    difference = None
    for n, (source, messages) in enumerate(cases):
        try:
            expected = _hf(template, messages, tokens)
        except chat_template.ChatTemplateError:
            skipped += 1
            continue
        if tmpl.bos and expected.startswith(tmpl.bos):
            expected = expected[len(tmpl.bos) :]
        got = ollama_prompt(tmpl, messages)
        checked += 1
        if got == expected:
            continue
        at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
                  min(len(expected), len(got)))  # fmt: skip
        difference = {
            "conversation": n,
            "source": source,
            "roles": [m.get("role") for m in messages],
            "char": at,
            "expected": expected[max(0, at - 40) : at + 40],
            "ollama": got[max(0, at - 40) : at + 40],
            "token": _token_diff(tokenizer, expected, got),
        }
        break
    return {
        "identical": difference is None and checked > 0,
        "family": tmpl.family,
        "checked": checked,
        "skipped": skipped,
        "first_difference": difference,
        "bos": tmpl.bos,
        "system": tmpl.system,
        "checked_at": files.now_iso(),
    }


def describe_difference(check: dict[str, Any]) -> str:
    """One sentence naming the first difference of a template check."""
    d = check.get("first_difference")
    if not d:
        return "identical" if check.get("identical") else "nothing was checked"
    token = d.get("token")
    where = f"conversation {d['conversation']} ({d['source']}, roles {'/'.join(d['roles'])})"
    if token:
        return (
            f"{where}, token {token['position']}: the model's template has "
            f"{token['expected']['text']!r} (id {token['expected']['id']}), Ollama's "
            f"{token['ollama']['text']!r} (id {token['ollama']['id']})"
        )
    return f"{where}, character {d['char']}: {d['expected']!r} vs {d['ollama']!r}"


# --- the Modelfile and the parameters -----------------------------------------------------------


def _token_texts(model_dir: Path, ids: Sequence[int]) -> list[str]:
    data = files.read_json(model_dir / "tokenizer.json") or {}
    added = {t.get("id"): t.get("content") for t in data.get("added_tokens") or []}
    vocab = (data.get("model") or {}).get("vocab")
    by_id = {i: t for t, i in vocab.items()} if isinstance(vocab, dict) else {}
    return [str(added.get(i) or by_id.get(i)) for i in ids if added.get(i) or by_id.get(i)]


def parameters(model_dir: str | os.PathLike[str], tmpl: OllamaTemplate) -> dict[str, Any]:
    """Ollama PARAMETERs from the merged folder: the stop strings (the family's and every eos
    token), the generation defaults of generation_config.json (greedy: temperature 0), and
    num_ctx from the model's context length (at most MAX_NUM_CTX)."""
    folder = Path(model_dir)
    gen = files.read_json(folder / "generation_config.json") or {}
    config = files.read_json(folder / "config.json") or {}
    eos = gen.get("eos_token_id", config.get("eos_token_id"))
    eos_ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
    stop = list(dict.fromkeys([*tmpl.stop, *_token_texts(folder, [int(i) for i in eos_ids])]))
    params: dict[str, Any] = {"stop": stop}
    if gen.get("do_sample") is False:
        params["temperature"] = 0.0
    else:
        for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"),
                             ("top_k", "top_k"), ("min_p", "min_p"),
                             ("repeat_penalty", "repetition_penalty")):  # fmt: skip
            if isinstance(gen.get(theirs), int | float):
                params[ours] = gen[theirs]
    if isinstance(gen.get("max_new_tokens"), int):
        params["num_predict"] = gen["max_new_tokens"]
    context = config.get("max_position_embeddings")
    if isinstance(context, int) and context > 0:
        params["num_ctx"] = min(context, MAX_NUM_CTX)
    return params


def _quoted(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)


def modelfile(gguf: str, tmpl: OllamaTemplate | None, params: dict[str, Any], title: str) -> str:
    """The Modelfile text: FROM the GGUF, TEMPLATE, SYSTEM and PARAMETERs (what `ollama create
    -f Modelfile` would register; serve_ollama sends the same through the API)."""
    lines = [f"# {title}", f"FROM {gguf}"]
    if tmpl is not None:
        lines.append(f'TEMPLATE """{tmpl.template}"""')
        if tmpl.system:
            lines.append(f'SYSTEM """{tmpl.system}"""')
    for key, value in params.items():
        for one in value if isinstance(value, list) else [value]:
            lines.append(f"PARAMETER {key} {_quoted(one)}")
    return "\n".join(lines) + "\n"


# --- Ollama's API -------------------------------------------------------------------------------


def _explain(error: Exception, url: str, name: str) -> OllamaExportError:
    import httpx
    from ollama import ResponseError

    if isinstance(error, ConnectionError | httpx.ConnectError):
        return OllamaExportError(
            f"Ollama is not running at {url}: start it with `ollama serve` (or the Ollama app), "
            "or pass its url=. The GGUF and the Modelfile are ready; `ollama create NAME -f "
            "Modelfile` registers them by hand."
        )
    if isinstance(error, httpx.TimeoutException):
        return OllamaExportError(f"Ollama at {url} did not answer within {HTTP_TIMEOUT_S:g} s.")
    if isinstance(error, ResponseError):
        status = f"HTTP {error.status_code}" if error.status_code > 0 else "an error"
        return OllamaExportError(
            f"Ollama at {url} refused to create {name!r} ({status}): {error.error}"
        )
    return OllamaExportError(f"Ollama at {url} failed: {type(error).__name__}: {error}")


def register(
    client: Any,
    name: str,
    gguf: Path,
    tmpl: OllamaTemplate | None,
    params: dict[str, Any],
    log: Callable[[str], None] = print,
) -> None:
    """Upload the GGUF as a blob and create model `name` from it (Ollama's /api/blobs and
    /api/create), through the official client `client` (an `ollama.Client`)."""
    log(f"uploading {gguf.name} ({gguf.stat().st_size / 1e6:.1f} MB) to Ollama")
    digest = client.create_blob(gguf)
    log(f"creating {name} from {digest[:19]}…")
    extra: dict[str, Any] = {}
    if tmpl is not None:
        extra["template"] = tmpl.template
        if tmpl.system:
            extra["system"] = tmpl.system
    last = None
    for part in client.create(model=name, files={gguf.name: digest}, parameters=params,
                              stream=True, **extra):  # fmt: skip
        if part.status and part.status != last:
            log(f"ollama: {part.status}")
            last = part.status
    if last != "success":
        raise OllamaExportError(f"Ollama did not confirm creating {name!r} (last: {last!r}).")


def default_name(run: Run) -> str:
    """An Ollama model name for the run: its id, lower case, in the characters names allow."""
    name = re.sub(r"[^a-z0-9._-]+", "-", run.id.lower()).strip("-.")
    return name or "dragonfarm-model"


def _check_name(name: str) -> str:
    name = name.strip()
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]*(:[A-Za-z0-9._-]+)?", name):
        raise ValueError(
            f"name = {name!r} is not an Ollama model name: letters, digits, '.', '_', '-', an "
            "optional namespace/ and :tag, e.g. 'support-agent:v1'."
        )
    return name


# --- the whole step -----------------------------------------------------------------------------


def _gguf_for(merged: Path, quantize: str | None, log: Callable[[str], None]) -> Path:
    """The merged folder's GGUF of that type (<run>/merged-<quant>.gguf), exported and
    round-trip checked by llama.cpp (`gguf.export_gguf`) unless it is there already (a GGUF
    takes its name only once its check has passed)."""
    from dragonfarm_core import gguf as gguf_export

    quant = gguf_export.normalize_quant(quantize or "q8_0")
    existing = gguf_export.default_out_file(merged, quant)
    if existing.is_file():
        log(f"using the GGUF exported earlier: {existing}")
        return existing
    log(f"exporting {merged} to GGUF ({quant}) with llama.cpp, then checking it")
    return Path(gguf_export.export_gguf(merged, quant=quant))


def serve_ollama(
    run: Run | str | os.PathLike[str],
    name: str | None = None,
    quantize: str | None = None,
    ollama: Any = None,
    url: str = DEFAULT_URL,
    *,
    template: str | None = None,
    gguf: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] = print,
) -> OllamaBackend:
    """Serve a succeeded run with Ollama; returns `backend_ollama(name, url)`.

    name: the Ollama model name (default: the run's id). quantize: the GGUF type llama.cpp
    writes (default q8_0; f16, bf16, or a llama-quantize type such as q4_k_m). ollama: an
    `ollama.Client` to register through (default: one for `url`; the backend returned talks
    to `url` either way). template: None translates the model's
    chat template and checks it (refusing a mismatch), "embedded" leaves the template to the
    GGUF's own, any other text is a Go template of your own (checked, a mismatch reported).
    gguf: a GGUF file to register instead of exporting one. Merging and exporting are skipped
    when done already. Raises OllamaExportError (Ollama not running, refused, a template
    mismatch), UnknownTemplateFamily.
    """
    run = open_run(run)
    name = _check_name(name or default_name(run))
    url = (url or DEFAULT_URL).strip().rstrip("/")
    merged = export.merged_model(run)
    if merged is None:
        log(f"merging run {run.id} first")
        merged = export.merge(run)
    source, tokens = chat_template.load_chat_template(merged)
    out = run.dir / OLLAMA_DIR
    out.mkdir(exist_ok=True)
    tmpl: OllamaTemplate | None
    if template == EMBEDDED:
        tmpl, check = None, {"identical": None, "family": EMBEDDED, "checked_at": files.now_iso()}
    else:
        if template is None:
            tmpl = translate(source, tokens)
        else:
            gotemplate.parse(template)  # refuse what Ollama's Go would reject
            tmpl = OllamaTemplate("custom", template)
        conversations = [("fixed", list(c)) for c in FIXED_CONVERSATIONS]
        conversations += [("eval", c) for c in eval_conversations(run.dir)]
        check = check_template(tmpl, source, tokens, conversations, load_tokenizer(merged))
        log(f"template check ({tmpl.label}): {describe_difference(check)} "
            f"({check['checked']} conversations)")  # fmt: skip
    files.write_json(out / CHECK_FILE, check)
    if tmpl is not None and not check["identical"]:
        message = (
            f"The {tmpl.label} template for Ollama renders differently from the model's chat "
            f"template: {describe_difference(check)}. Nothing was registered; the record is "
            f"{out / CHECK_FILE}."
        )
        if template is None:
            raise TemplateMismatch(message + f" Pass template={EMBEDDED!r} to use the GGUF's own.")
        log(f"warning: {message}")
    gguf_path = Path(gguf).expanduser().resolve() if gguf else _gguf_for(merged, quantize, log)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"gguf = {gguf_path} is not a file.")
    params = parameters(merged, tmpl or OllamaTemplate(EMBEDDED, ""))
    shown = os.path.relpath(gguf_path, out) if gguf_path.is_relative_to(run.dir) else gguf_path
    text = modelfile(str(shown), tmpl, params,
                     f"dragonfarm: run {run.id} for Ollama (`ollama create {name} -f Modelfile`)")  # fmt: skip
    write_atomic(out / MODELFILE, lambda f: f.write(text))
    if ollama is None:
        from ollama import Client

        ollama = Client(host=url, timeout=HTTP_TIMEOUT_S)
    try:
        ollama.list()  # is it there at all, before a large upload
        register(ollama, name, gguf_path, tmpl, params, log)
    except OllamaExportError:
        raise
    except Exception as e:
        raise _explain(e, url, name) from None
    files.write_json(out / REGISTERED, {"name": name, "url": url, "gguf": str(gguf_path),
                                        "registered_at": files.now_iso()})  # fmt: skip
    log(f"registered {name!r} with Ollama at {url}")
    return backend_ollama(name, url=url)


def start_serve_ollama(
    run: Run | str | os.PathLike[str],
    name: str | None = None,
    quantize: str | None = None,
    url: str = DEFAULT_URL,
    *,
    template: str | None = None,
    gguf: str | os.PathLike[str] | None = None,
) -> export_jobs.ExportJob:
    """`serve_ollama` as a background job on the run (<run>/jobs/ollama-<time>/); returns at
    once. Its result: {"name", "url", "modelfile", "gguf", "template_check"}."""
    run = open_run(run)
    name = _check_name(name or default_name(run))
    arguments = ["--name", name, "--url", url]
    arguments += ["--quantize", quantize] if quantize else []
    arguments += ["--template", template] if template else []
    arguments += ["--gguf", str(Path(gguf).expanduser().resolve())] if gguf else []
    return export_jobs.start_step(
        run, JOB_KIND, "dragonfarm_core.ollama_export", arguments,
        doing=f"Serving run {run.id} with Ollama", error=OllamaExportError,
    )  # fmt: skip


def result_of(run: Run, name: str, url: str) -> dict[str, Any]:
    """What a finished `serve_ollama` left in <run>/ollama/, with the model's name and URL."""
    out = run.dir / OLLAMA_DIR
    registered = files.read_json(out / REGISTERED) or {}
    return {
        "name": name,
        "url": url,
        "modelfile": str(out / MODELFILE),
        "gguf": registered.get("gguf"),
        "template_check": files.read_json(out / CHECK_FILE),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dragonfarm_core.ollama_export",
        description="Merge, export to GGUF and register a run with Ollama.",
    )
    parser.add_argument("run_dir")
    parser.add_argument("--job", help="run as the job in this folder")
    parser.add_argument("--name", default=None)
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--quantize", default=None)
    parser.add_argument("--template", default=None)
    parser.add_argument("--gguf", default=None, help="register this GGUF instead of exporting one")
    ns = parser.parse_args(argv)
    run = open_run(ns.run_dir)
    name = ns.name or default_name(run)

    def work() -> dict[str, Any]:
        def log(line: str) -> None:
            print(f"[dragonfarm] {line}", flush=True)

        serve_ollama(run, name, ns.quantize, url=ns.url, template=ns.template, gguf=ns.gguf,
                     log=log)  # fmt: skip
        return result_of(run, name, ns.url)

    if ns.job:
        return export_jobs.run_step(ns.job, work)
    work()
    return 0


if __name__ == "__main__":
    sys.exit(main())
