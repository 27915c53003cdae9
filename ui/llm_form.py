"""The widgets that choose a teacher, student or judge for synthesis, and the model they make.

    teacher = llm_form("synth-teacher", "teacher")        # provider, model, URL, key
    llm = make_llm(**values, role="teacher", runs_dir=ctx.runs_dir)  # values: teacher.form's
    expression, notes = model_code(llm)                   # for the code panel, without the key

The provider is Claude (Anthropic), an OpenAI-compatible server (a URL and a model), or a local
model or run (answered through the inference backend). A key typed into the password field
stays in the LLM's memory: `model_code` never writes it, only where the code expects one.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import llm_call
from dragonfarm_core.data.codegen import literal
from ui import agreement_panel
from ui.judge_panel import model_ref

KINDS = [
    ("Anthropic (Claude)", "anthropic"),
    ("OpenAI-compatible server", "openai"),
    ("Local model or run", "local"),
]
ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_CLAUDE = inspect.signature(dragon.llm_anthropic).parameters["model"].default


@dataclass(frozen=True)
class LLMForm:
    """The widgets that choose a teacher or judge: provider, model, URL and key."""

    kind: gr.Radio
    model: gr.Textbox
    url: gr.Textbox
    key: gr.Textbox

    @property
    def form(self) -> dict[str, Any]:
        """The widgets by `make_llm`'s parameter names (for `ui.named`)."""
        return {"kind": self.kind, "model": self.model, "url": self.url, "key": self.key}


def llm_form(
    prefix: str, role: str, kind: str = "anthropic", runs_dir: Path | None = None
) -> LLMForm:
    """Provider choice, model, server URL (OpenAI-compatible only) and a password field; for a
    judge given the runs dir, its last measured agreement with the person's feedback beside it
    (`ui.agreement_panel`: read from the saved results, never by asking the judge)."""
    with gr.Row():
        choice = gr.Radio(KINDS, value=kind, label=f"{role.capitalize()}", scale=2,
                          elem_id=f"{prefix}-kind")  # fmt: skip
        model = gr.Textbox(
            DEFAULT_CLAUDE if kind == "anthropic" else "",
            label="Model",
            info="A model name; for a local model: a model id or a run in this app.",
            scale=2,
            elem_id=f"{prefix}-model",
        )
    with gr.Row():
        url = gr.Textbox(
            label="Server URL (ends in /v1)",
            placeholder="http://localhost:8000/v1",
            visible=kind == "openai",
            elem_id=f"{prefix}-url",
        )
        key = gr.Textbox(
            label="API key (kept in memory only; never shown in code, logs or files)",
            type="password",
            info=f"Empty: {ANTHROPIC_KEY_ENV} from the app's environment (Anthropic).",
            visible=kind != "local",
            elem_id=f"{prefix}-key",
        )
    form = LLMForm(choice, model, url, key)
    choice.change(show_fields, choice, [url, key, model])
    if role == "judge" and runs_dir is not None:
        first = DEFAULT_CLAUDE if kind == "anthropic" else ""
        shown = agreement_panel.line(f"{prefix}-agreement", kind, first, runs_dir)
        agreement_panel.wire_line(shown, choice, model, runs_dir)
    return form


def show_fields(kind: str) -> tuple[Any, ...]:
    """The URL only for a server, the key only for an API; Claude's default model filled in."""
    model = gr.update(value=DEFAULT_CLAUDE) if kind == "anthropic" else gr.update(value="")
    return gr.update(visible=kind == "openai"), gr.update(visible=kind != "local"), model


def make_llm(
    kind: str,
    model: str | None,
    url: str | None,
    key: str | None,
    *,
    role: str,
    runs_dir: Path,
    judge: bool = False,
    max_tokens: int = 1024,
    temperature: float | None = None,
) -> dragon.LLM | str:
    """The teacher or judge the form describes: an LLM, or a local model's name (synthesis
    answers it through the inference backend): a run in the app's runs dir or a model id, as
    the Evaluate tab's judge takes it (a folder outside the runs dir is refused)."""
    model, url, key = (model or "").strip(), (url or "").strip(), (key or "").strip() or None
    if kind == "local":
        return model_ref(model, runs_dir, what=f"the local {role}")
    if kind == "anthropic":
        make = dragon.judge_anthropic if judge else dragon.llm_anthropic
        return make(model=model or DEFAULT_CLAUDE, api_key=key, max_tokens=max_tokens,
                    temperature=temperature)  # fmt: skip
    if kind == "openai":
        if not model:
            raise ValueError(f"Name the {role}'s model, as the server lists it at /v1/models.")
        make_openai = dragon.judge_openai if judge else dragon.llm_openai
        return make_openai(model, url, api_key=key, max_tokens=max_tokens, temperature=temperature)
    raise ValueError(
        f"Choose where the {role} runs: Anthropic, an OpenAI-compatible server or local."
    )


def model_code(model: dragon.LLM | str, judge: bool = False) -> tuple[str, list[str]]:
    """(the expression, comment lines) for a model in a code panel: a typed key is never in
    it, only where the code expects one."""
    if isinstance(model, str):
        return literal(model), []
    description = model.describe()
    notes = []
    if description.get("api_key"):  # typed in the app: the code says where to put it
        notes.append(f"# The {model.provider} key typed in the app is not shown: put it in")
        notes.append(
            f"# {ANTHROPIC_KEY_ENV}."
            if model.provider == "anthropic"
            else '# an environment variable and add api_key_env="<its name>" to this call.'
        )
    return llm_call(description, judge), notes
