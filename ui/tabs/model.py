"""The Model tab: pick the model to train, and check what this machine can train on.

The bundled tiny model is the default and always works offline. Any other choice (a preset, a
Hub id, a local folder) is validated with `dragon.resolve_model` when the person asks; if that
fails (say the Hub is unreachable) the message says why and the current model stays chosen.
`dragon.check()` probes torch in a subprocess, so it runs on a button press, never at start-up.
"""

from __future__ import annotations

import html
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.auth.profiles import Profile
from dragonfarm_core.data.codegen import literal
from dragonfarm_core.environment import format_check
from ui import per_user, present
from ui.context import AppContext

TITLE = "Model"


def model_code(name: str, revision: str | None) -> str:
    """The Python that lists the presets and resolves this model to a local folder."""
    rev = f", revision={literal(revision)}" if revision else ""
    return (
        "import dragonfarm_core as dragon\n\n"
        "print(dragon.presets())\n"
        f"model = dragon.resolve_model({literal(name)}{rev})\n"
        "print(model.name, model.base)\n"
    )


def describe(model: dragon.ResolvedModel) -> str:
    return present.model_markdown(model.name, model.base, model.revision, model.is_bundled)


def choose_model(
    name: str, revision: str, current: dragon.ResolvedModel, *, runs_dir: Path | None = None,
    profile: Profile | None = None,
) -> tuple[Any, ...]:  # fmt: skip
    """Model name and revision -> (model state, description, code, error box). With a lab
    `profile`, a folder in another user's runs is refused."""
    try:
        if profile and runs_dir and (refusal := per_user.foreign_folder(profile, name, runs_dir)):
            raise dragon.ModelError(refusal)
        chosen = dragon.resolve_model(name, revision=revision.strip() or None)
    except dragon.ModelError as e:
        message = f"{e} Keeping {current.name}."
        gr.Warning(html.escape(message))  # Gradio renders the toast as HTML
        return gr.skip(), gr.skip(), gr.skip(), present.error_html(message)
    return chosen, describe(chosen), model_code(chosen.name, chosen.revision), ""


def pick_preset(event: gr.SelectData) -> str:
    """A click on a presets row puts that model's id in the model box."""
    row = event.row_value or []
    return str(row[0]) if row else gr.skip()


CHECK_CODE = "import dragonfarm_core as dragon\n\ndragon.check()\n"


def run_check(runs_dir: Path) -> tuple[str, str]:
    """`dragon.check()` as a markdown list, and the code panel showing that call."""
    facts = present.check_markdown(format_check(dragon.check(runs_dir=runs_dir, verbose=False)))
    return facts, CHECK_CODE


def build(ctx: AppContext) -> None:
    start = ctx.model.value
    current = gr.Markdown(describe(start), elem_id="model-current")
    gr.Markdown("Click a row to use a preset, or type a Hugging Face id or a local folder.")
    presets = gr.Dataframe(
        present.presets_table(dragon.presets()),
        interactive=False,
        wrap=True,
        label="Presets",
        column_widths=["27%", "7%", "10%", "6%", "7%", "43%"],
        elem_id="model-presets",
    )
    with gr.Row():
        name = gr.Textbox(
            start.name, label="Model (Hub id or local folder)", scale=3, elem_id="model-name"
        )
        revision = gr.Textbox("", label="Revision (branch, tag or commit; optional)", scale=1)
        use = gr.Button("Use this model", variant="primary", scale=1, elem_id="model-use")
    error = gr.HTML(elem_id="model-error")
    with gr.Accordion("This machine", open=False):
        check = gr.Button("Check this machine (versions, device, disk, Hub)", elem_id="model-check")
        facts = gr.Markdown(elem_id="model-facts")
    code = gr.Code(
        model_code(start.name, None),
        language="python",
        show_line_numbers=False,
        label="Python",
        interactive=False,
        elem_id="model-code",
    )

    presets.select(pick_preset, None, name)
    use.click(partial(choose_model, runs_dir=ctx.runs_dir, profile=ctx.profile),
              [name, revision, ctx.model], [ctx.model, current, code, error])  # fmt: skip
    check.click(partial(run_check, ctx.runs_dir), None, [facts, code])
