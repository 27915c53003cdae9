"""The Mapping tab: say which columns fill the prompt and response slots (or the slots of
preference pairs, RL prompts, whole conversations), and see rows as the model will.

Column chips insert "{column}" into the selected slot; typing a template works the same. Every
change maps the loaded dataset again and renders the first rows through the chosen model's chat
template, the learned part highlighted against the masked context, so a wrong mapping shows up
before any training starts. The line at the top (`ui.active_data`) names the dataset being
mapped and the mapping Train will use; errors name the file, not its copy in the runs folder.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.chat_template import (
    ChatTemplateError,
    learned_span,
    load_chat_template,
    render,
)
from dragonfarm_core.data.codegen import dataset_code, literal
from ui import active_data, named, present
from ui.context import AppContext, report_tokenizer

TITLE = "Mapping"
PREVIEW_N = 3
# The preview renders the first rows only (up to this many, to find PREVIEW_N usable ones):
# rendering a million rows for three took 44 s and 0.9 GB.
PREVIEW_SCAN = 1000
KINDS = [
    ("Prompt → response (SFT)", "sft"),
    ("Conversations (a column of JSON message lists)", "conversations"),
    ("Preference pairs (DPO / ORPO)", "pairs"),
    ("Prompts for RL (GRPO)", "prompts"),
]
SLOTS = ("prompt", "response", "chosen", "rejected", "reference", "system", "messages")
SLOTS_BY_KIND = {
    "sft": ("prompt", "response", "system"),
    "conversations": ("messages",),
    "pairs": ("prompt", "chosen", "rejected", "system"),
    "prompts": ("prompt", "reference", "system"),
}
REQUIRED_BY_KIND = {
    "sft": ("prompt", "response"),
    "conversations": ("messages",),
    "pairs": ("prompt", "chosen", "rejected"),
    "prompts": ("prompt",),
}
SLOT_LABELS = {
    "prompt": "Prompt (the user turn)",
    "response": "Response (the assistant turn that is learned)",
    "chosen": "Chosen (the preferred reply)",
    "rejected": "Rejected (the reply to move away from)",
    "reference": "Reference answer (optional; rewards compare against it)",
    "system": "System prompt (optional; a column, a template or plain text)",
    "messages": "Messages column (each cell a JSON list of {role, content})",
}
CODE_HINT = "# Map the columns; the Python that builds this dataset appears here."
# The example tickets come mapped as the README and the manual map them.
EXAMPLE_SLOTS = {"prompt": "{subject}\n\n{body}", "response": "reply"}
EXAMPLE_NOTE = (
    "Mapped like the README's example: prompt `{subject}` and `{body}`, response `reply`. "
    "Change any slot to map it your way."
)
REMAP_QUEUE = "mapping-remap"


# What goes between two chips in a row: a blank line in the multi-line slots (a title then a
# body, as in the manual's "{subject}\n\n{body}"), a space in the others, so two columns never
# run together as "{Ticket Title}{Details}". After typed text the chip goes right where the
# cursor was ("{question} (" + "{topic}").
CHIP_SEPARATOR = {"prompt": "\n\n", "system": "\n\n"}


def insert_column(
    target: str, column: str | None, slots: Mapping[str, str | None]
) -> tuple[Any, ...]:
    """A column chip was clicked: append "{column}" to the target slot, reset the chips.
    `slots`: the slot boxes' values by slot name; -> one update per slot in SLOTS order."""
    if not column or target not in SLOTS:
        return (gr.skip(),) * (len(SLOTS) + 1)
    i = SLOTS.index(target)
    updated: list[Any] = [gr.skip()] * len(SLOTS)
    if target == "messages":  # the messages slot names a column, it is not a template
        updated[i] = column
        return (*updated, None)
    text = slots[target] or ""
    separator = CHIP_SEPARATOR.get(target, " ") if text.endswith("}") else ""
    updated[i] = text + separator + "{" + column + "}"
    return (*updated, None)


def show_slots(kind: str) -> tuple[Any, ...]:
    """The slot boxes the kind uses become visible; the insert target moves to the first."""
    visible = SLOTS_BY_KIND[kind]
    boxes = [gr.update(visible=name in visible) for name in SLOTS]
    return (*boxes, gr.update(choices=list(visible), value=visible[0]))


def show_columns(ds: dragon.Dataset | None) -> Any:
    return gr.update(choices=ds.columns if ds is not None else [], value=None)


def conversations_from_column(ds: dragon.Dataset, column: str) -> dragon.Dataset:
    """Whole conversations from a column whose cells hold JSON lists of messages."""
    if column not in ds.columns:
        raise dragon.DatasetError(
            f"{ds.label} has no column {column!r}. Available columns: "
            + ", ".join(repr(c) for c in ds.columns)
            + "."
        )
    if ds.source and ds.format in ("json", "jsonl") and column == "messages":
        return dragon.conversations(ds.source, name=ds.name)
    convs = []
    for row, cell in enumerate(ds.frame[column], start=1):
        try:
            convs.append(json.loads(cell))
        except (TypeError, json.JSONDecodeError) as e:
            raise dragon.DatasetError(
                f"{ds.label}, row {row}, column {column!r}: expected a JSON list of messages "
                f'like [{{"role": "user", "content": "..."}}, ...], got {cell!r:.60} ({e}).'
            ) from e
    return dragon.conversations(convs, name=ds.name)


def is_example(ds: dragon.Dataset | None) -> bool:
    return ds is not None and ds.source is not None and str(ds.source) == str(dragon.example_data())


def suggest_slots(
    ds: dragon.Dataset | None, suggested: Mapping[str, str] | None,
    slots: Mapping[str, str | None],
) -> tuple[Any, ...]:  # fmt: skip
    """A dataset was loaded -> (*slot boxes in SLOTS order, kind, suggested, note). `slots`:
    the boxes' values by slot name; `suggested`: the slots this page filled in itself. The
    example data comes mapped (EXAMPLE_SLOTS); slots the page filled itself are emptied for
    any other dataset (its columns differ). Slots the person typed or picked are never
    touched."""
    untouched = all(not (t or "").strip() for t in slots.values()) or dict(slots) == suggested
    if not untouched:
        return (gr.skip(),) * (len(SLOTS) + 3)
    if is_example(ds):
        filled = {name: EXAMPLE_SLOTS.get(name, "") for name in SLOTS}
        return (*filled.values(), "sft", filled, present.hint_html(EXAMPLE_NOTE))
    if suggested is None:
        return (gr.skip(),) * (len(SLOTS) + 3)
    return (*("",) * len(SLOTS), gr.skip(), None, "")


def map_dataset(ds: dragon.Dataset, kind: str, slots: dict[str, str]) -> dragon.Dataset:
    """One call of the public API per kind; empty optional slots are left out.

    The required slots (REQUIRED_BY_KIND) are filled: `remap` checks that before calling.
    """
    optional = {name: slots[name] or None for name in ("system", "reference")}
    if kind == "sft":
        return ds.map(slots["prompt"], slots["response"], system=optional["system"])
    if kind == "pairs":
        return ds.map_pairs(slots["prompt"], slots["chosen"], slots["rejected"], optional["system"])
    if kind == "prompts":
        return ds.map_prompts(slots["prompt"], optional["reference"], system=optional["system"])
    return conversations_from_column(ds, slots["messages"])


def mapping_code(
    ds: dragon.Dataset, mapped: dragon.Dataset, column: str, model: dragon.ResolvedModel
) -> str:
    """The Python that builds `mapped`, previews it and prints its report."""
    counted_with = model.name if report_tokenizer(model) else None
    tail = f"\nds.preview({PREVIEW_N})\n" + present.report_code(counted_with)
    if (
        mapped.mapping is not None
        and mapped.mapping.kind == "conversations"
        and mapped.source is None
    ):
        rebuild = (
            dataset_code(ds.spec(), var="table")
            + "\nds = dragon.conversations("
            + f"[json.loads(cell) for cell in table.frame[{literal(column)}]], "
            + f"name={literal(mapped.name)})"
        )
        return present.python_code(rebuild + tail, imports=("json",))
    return present.python_code(dataset_code(mapped.spec(), var="ds") + tail)


def preview_segments(
    record: dict[str, Any], template: str, tokens: dict[str, str]
) -> list[present.Segment]:
    """One training record (any kind, as data/records.py shapes it) as (text, kind) segments:
    the masked context, then what is learned (or the prompt and its reference answer)."""
    if "messages" in record:  # sft and conversations: the last turn is the assistant's
        context, learned = learned_span(template, record["messages"], **tokens)
        return [(context, "masked"), (learned, "learned")]
    prompt = record["prompt"]
    if "chosen" in record:
        context, chosen = learned_span(template, [*prompt, *record["chosen"]], **tokens)
        _, rejected = learned_span(template, [*prompt, *record["rejected"]], **tokens)
        return [(context, "masked"), (chosen, "learned"), (rejected, "rejected")]
    segments = [(render(template, prompt, add_generation_prompt=True, **tokens), "masked")]
    if record.get("reference") is not None:
        segments.append((record["reference"], "reference"))
    return segments


def preview_html(mapped: dragon.Dataset, model: dragon.ResolvedModel) -> str:
    """The first rows through the model's chat template, learned part highlighted."""
    template, tokens = load_chat_template(model.base)
    head = dataclasses.replace(mapped, frame=mapped.frame.head(PREVIEW_SCAN))
    records = head.rendered().records[:PREVIEW_N]
    examples = [preview_segments(r, template, tokens) for r in records]
    return present.chat_preview_html(examples, model.name)


def remap(
    ds: dragon.Dataset | None, model: dragon.ResolvedModel, kind: str,
    slots: Mapping[str, str | None],
) -> tuple[Any, ...]:  # fmt: skip
    """Slots (the boxes' values by slot name; one left out is empty) -> (mapped dataset,
    preview HTML, report, code, error box)."""
    unknown = sorted(set(slots) - set(SLOTS))
    if unknown:
        raise ValueError(f"Not a mapping slot: {', '.join(unknown)}; one of {', '.join(SLOTS)}.")
    text = {name: (slots.get(name) or "").strip() for name in SLOTS}
    if ds is None:
        return None, present.hint_html("Load a dataset in the Data tab first."), "", CODE_HINT, ""
    missing = [name for name in REQUIRED_BY_KIND[kind] if not text[name]]
    if missing:
        hint = f"Fill in {' and '.join(missing)}: click a column above, or type a template."
        return None, present.hint_html(hint), "", CODE_HINT, ""
    try:
        mapped = map_dataset(ds, kind, text)
        html = preview_html(mapped, model)
        report = mapped.report(tokenizer=report_tokenizer(model)).to_markdown()
    except (dragon.DatasetError, ChatTemplateError) as e:
        return None, "", "", CODE_HINT, present.error_html(active_data.user_message(str(e), ds))
    return mapped, html, report, mapping_code(ds, mapped, text["messages"], model), ""


def build(ctx: AppContext) -> None:
    active_data.build_active(ctx, "mapping-active")
    kind = gr.Radio(KINDS, value="sft", label="What does each row hold?", elem_id="mapping-kind")
    with gr.Row():
        with gr.Column(scale=2):
            chips = gr.Radio(
                [],
                label="Columns: click one to insert {column} into the selected slot",
                elem_id="mapping-chips",
            )
            target = gr.Radio(
                list(SLOTS_BY_KIND["sft"]),
                value="prompt",
                label="Insert into",
                elem_id="mapping-target",
            )
            slot_boxes = {
                name: gr.Textbox(
                    label=SLOT_LABELS[name],
                    lines=2 if name in ("prompt", "system") else 1,
                    visible=name in SLOTS_BY_KIND["sft"],
                    elem_id=f"mapping-{name}",
                )
                for name in SLOTS
            }
            boxes = list(slot_boxes.values())  # SLOTS order: the handlers' outputs
            error = gr.HTML(elem_id="mapping-error")
            note = gr.HTML(elem_id="mapping-note")
        with gr.Column(scale=3):
            gr.Markdown("**Preview**: the first rows as the model sees them")
            preview = gr.HTML(
                present.hint_html("Load a dataset in the Data tab first."),
                elem_id="mapping-preview",
            )
    with gr.Row():
        with gr.Column(scale=2):
            report = gr.Markdown(elem_id="mapping-report")
        with gr.Column(scale=3):
            code = gr.Code(
                CODE_HINT,
                language="python",
                label="Python",
                interactive=False,
                show_line_numbers=False,
                elem_id="mapping-code",
            )

    for name, box in slot_boxes.items():
        # Runs in the browser only: focusing a slot makes it the chips' target.
        box.focus(None, None, target, js=f"() => {json.dumps(name)}")
    chip = {"target": target, "column": chips, "slots": slot_boxes}
    chips.input(named.handler(insert_column, chip), named.inputs(chip), [*boxes, chips])
    kind.change(show_slots, kind, [*boxes, target])
    ctx.dataset.change(show_columns, ctx.dataset, chips)
    suggested = gr.State(None)  # the slot values this page filled in itself, if any
    # The note says the page mapped the example; once the person edits, it no longer holds.
    gr.on([*(box.input for box in boxes), chips.input, kind.input], lambda: "", None, note)
    loaded = {"ds": ctx.dataset, "suggested": suggested, "slots": slot_boxes}
    ctx.dataset.change(
        named.handler(suggest_slots, loaded), named.inputs(loaded),
        [*boxes, kind, suggested, note],
    )  # fmt: skip
    # One listener for every input the preview depends on, one at a time, newest last: with a
    # listener per slot, each remapped from the slots as they were when it fired and the last
    # to finish won, so a quick second slot could be overwritten by "Fill in response..."
    # from the first. Queued in order, the newest request (which reads every slot) runs last;
    # `always_last` drops the stale ones waiting behind a running remap.
    mapping_form = {"ds": ctx.dataset, "model": ctx.model, "kind": kind, "slots": slot_boxes}
    gr.on(
        [*(box.change for box in boxes), kind.change, ctx.dataset.change, ctx.model.change],
        named.handler(remap, mapping_form),
        named.inputs(mapping_form),
        [ctx.mapped, preview, report, code, error],
        trigger_mode="always_last",
        concurrency_limit=1,
        concurrency_id=REMAP_QUEUE,
    )
