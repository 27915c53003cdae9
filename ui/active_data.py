"""The active dataset, said the same way on every tab that uses it (Data, Mapping, Train).

The Data tab writes `ctx.dataset`; the Mapping tab (or Feedback, or a synthesis) writes
`ctx.mapped`, which is what Train trains. Each tab that reads them shows one line built here:
which file, how many rows, which mapping, and when the training data came from elsewhere (a
feedback build), that too. A failed upload leaves both states as they were, so the line keeps
naming the old file, and the Data tab's problem box says it was kept (`kept_note`).
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

import dragonfarm_core as dragon
from ui import present
from ui.context import AppContext

# How the line names each mapping kind.
KIND_NAMES = {
    "sft": "prompt → response (SFT)",
    "conversations": "conversations",
    "pairs": "preference pairs",
    "prompts": "prompts for RL",
}
NONE_YET = "**Active dataset:** none yet: load a file or the example data in the Data tab."


def file_label(ds: dragon.Dataset) -> str:
    """The dataset's file name (never the folder it was copied to), or its name in memory."""
    return Path(ds.source).name if ds.source else ds.name


def _code(text: str) -> str:
    """`text` as an inline code span; backticks inside would end it early, and a line break
    would split it across lines, so a template's break reads `\\n` as in the code panel."""
    return "`" + text.replace("`", "'").replace("\r", "").replace("\n", "\\n") + "`"


def _rows(n: int) -> str:
    return f"{n} row{'' if n == 1 else 's'}"


def mapping_text(mapped: dragon.Dataset) -> str:
    """'prompt → response (SFT): prompt `{question}`, response `answer`' ('' unmapped)."""
    if mapped.mapping is None:
        return ""
    slots = ", ".join(f"{name} {_code(value)}" for name, value in mapped.mapping.slots().items())
    kind = KIND_NAMES.get(mapped.mapping.kind, mapped.mapping.kind)
    return kind + (f": {slots}" if slots else "")


def _same_data(ds: dragon.Dataset, mapped: dragon.Dataset) -> bool:
    # Conversations from a column live in memory under the table's name, so the name counts.
    return mapped.source == ds.source or mapped.name == ds.name


def active_markdown(ds: dragon.Dataset | None, mapped: dragon.Dataset | None) -> str:
    """The line: the loaded file and its rows, then the mapping Train will use (or none yet)."""
    mapping = mapped.mapping if mapped is not None else None
    if mapped is None or mapping is None:
        if ds is None:
            return NONE_YET
        return (
            f"**Active dataset:** {_code(file_label(ds))} · {_rows(len(ds))} · "
            "not mapped yet: map its columns in the Mapping tab."
        )
    if ds is not None and _same_data(ds, mapped):
        return (
            f"**Active dataset:** {_code(file_label(ds))} · {_rows(len(ds))} · "
            f"mapped as {mapping_text(mapped)}"
        )
    lines = [] if ds is None else [f"**Loaded file:** {_code(file_label(ds))} · {_rows(len(ds))}"]
    lines.append(
        f"**Training data:** {_code(file_label(mapped))} · {_rows(len(mapped))} · "
        f"{KIND_NAMES.get(mapping.kind, mapping.kind)} (built in another tab; Train uses it "
        "until you map the loaded file again)"
    )
    return "  \n".join(lines)


def user_message(message: str, ds: dragon.Dataset | None) -> str:
    """A core message about `ds` with its file's server-side path as the file's name."""
    if ds is None or not ds.source:
        return message
    return present.user_file_names(message, {ds.source: file_label(ds)})


def kept_note(ds: dragon.Dataset | None) -> str:
    """What a failed upload leaves active, for the end of its problem message."""
    if ds is None:
        return "No dataset is loaded yet."
    return f"Kept {file_label(ds)} ({_rows(len(ds))}) as the active dataset."


def build_active(ctx: AppContext, elem_id: str) -> gr.Markdown:
    """The line as a Markdown that follows both states; call inside a tab's `build`."""
    line = gr.Markdown(NONE_YET, elem_id=elem_id, elem_classes="df-active")
    gr.on(
        [ctx.dataset.change, ctx.mapped.change],
        active_markdown,
        [ctx.dataset, ctx.mapped],
        line,
        show_progress="hidden",
    )
    return line
