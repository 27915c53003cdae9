"""Mapping tab handlers: slots and chips, every kind, the highlighted preview, clear errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest

import dragonfarm_core as dragon
from ui import named
from ui.tabs import mapping

SKIP = gr.skip()


def texts(**slots: str) -> dict[str, str]:
    """The slot boxes' values, by slot name, as the tab passes them."""
    return {name: slots.get(name, "") for name in mapping.SLOTS}


def spans(html: str, kind: str) -> list[str]:
    return re.findall(rf'<span class="df-{kind}"[^>]*>(.*?)</span>', html, flags=re.S)


@pytest.fixture
def qa(qa_csv: Path) -> dragon.Dataset:
    return dragon.dataset(qa_csv)


def test_template_mapping_previews_learned_and_masked_parts(qa, chat_model):
    out = mapping.remap(
        qa, chat_model, "sft", texts(prompt="{question} ({topic})", response="answer")
    )
    mapped, html, report, code, error = out
    assert error == ""
    assert mapped.mapping.kind == "sft" and mapped.mapping.prompt == "{question} ({topic})"
    learned, masked = spans(html, "learned"), spans(html, "masked")
    assert len(learned) == len(masked) == 3
    assert "How do I reset my router? (network)" in masked[0]
    assert masked[0].endswith("&lt;|im_start|&gt;assistant\n")  # the assistant header is context
    assert learned[0] == "Hold the reset pin for 10 s.&lt;|im_end|&gt;\n"  # the reply and its end
    assert "learned" in html and "masked (context)" in html  # the legend
    assert "Data report" in report
    assert (
        "dragon.dataset(" in code
        and '.map(prompt="{question} ({topic})", response="answer")' in code
    )


def test_missing_column_lists_the_available_ones(qa, chat_model):
    mapped, html, _report, _code, error = mapping.remap(
        qa, chat_model, "sft", texts(prompt="{question}", response="{reply}")
    )
    assert mapped is None and html == ""
    assert 'class="df-error"' in error and "reply" in error
    assert "Available columns: &#x27;question&#x27;, &#x27;topic&#x27;, &#x27;answer&#x27;" in error


def test_unfinished_mapping_asks_for_the_missing_slots(qa, chat_model):
    mapped, html, _report, code, error = mapping.remap(
        qa, chat_model, "sft", texts(prompt="question")
    )
    assert mapped is None and error == "" and "Fill in response" in html
    assert code == mapping.CODE_HINT
    assert "Load a dataset" in mapping.remap(None, chat_model, "sft", texts())[1]


def test_column_chip_inserts_a_placeholder_into_the_target_slot():
    out = mapping.insert_column("prompt", "topic", texts(prompt="{question} ("))
    assert out[mapping.SLOTS.index("prompt")] == "{question} ({topic}"
    assert all(v == SKIP for i, v in enumerate(out[:-1]) if i != mapping.SLOTS.index("prompt"))
    assert out[-1] is None  # the chips reset, so the same chip can be clicked again
    assert (
        mapping.insert_column("messages", "turns", texts())[mapping.SLOTS.index("messages")]
        == "turns"
    )
    assert mapping.insert_column("prompt", None, texts()) == (SKIP,) * (len(mapping.SLOTS) + 1)


def test_each_kind_shows_its_slots():
    out = mapping.show_slots("pairs")
    visible = {name for name, update in zip(mapping.SLOTS, out, strict=False) if update["visible"]}
    assert visible == {"prompt", "chosen", "rejected", "system"}
    assert out[-1]["value"] == "prompt"
    assert mapping.show_slots("conversations")[-1]["choices"] == ["messages"]


def test_pairs_preview_shows_the_rejected_reply(tmp_path: Path, chat_model):
    df = pd.DataFrame(
        {"q": ["2 + 2?", "Capital of France?"], "good": ["4", "Paris"], "bad": ["5", "Lyon"]}
    )
    ds = dragon.dataset(df)
    mapped, html, _r, code, error = mapping.remap(
        ds, chat_model, "pairs", texts(prompt="q", chosen="good", rejected="bad")
    )
    assert error == "" and mapped.mapping.kind == "pairs"
    assert spans(html, "learned")[0].startswith("4") and spans(html, "rejected")[0].startswith("5")
    assert ".map_pairs(" in code


def test_prompts_preview_has_no_learned_text_but_the_reference(chat_model):
    ds = dragon.dataset(pd.DataFrame({"question": ["12 * 12?"], "answer": ["144"]}))
    mapped, html, *_rest, error = mapping.remap(
        ds, chat_model, "prompts", texts(prompt="question", reference="answer", system="Be brief.")
    )
    assert error == "" and mapped.mapping.kind == "prompts"
    assert spans(html, "learned") == [] and spans(html, "reference") == ["144"]
    assert "Be brief." in spans(html, "masked")[0]


CONV = [
    {"role": "user", "content": "Wi-Fi drops <again>"},
    {"role": "assistant", "content": "Which router?"},
]


def test_conversations_from_a_json_column(chat_model):
    ds = dragon.dataset(pd.DataFrame({"id": ["1"], "turns": [json.dumps(CONV)]}))
    mapped, html, _r, code, error = mapping.remap(
        ds, chat_model, "conversations", texts(messages="turns")
    )
    assert error == "" and mapped.mapping.kind == "conversations"
    assert spans(html, "learned")[0].startswith("Which router?")
    assert "Wi-Fi drops &lt;again&gt;" in spans(html, "masked")[0]  # user text is escaped
    assert "json.loads(cell)" in code


def test_conversations_errors_name_the_row_and_column(chat_model):
    ds = dragon.dataset(pd.DataFrame({"turns": [json.dumps(CONV), "not json"]}))
    error = mapping.remap(ds, chat_model, "conversations", texts(messages="turns"))[-1]
    assert "row 2" in error and "turns" in error
    error = mapping.remap(ds, chat_model, "conversations", texts(messages="messages"))[-1]
    assert "no column &#x27;messages&#x27;" in error and "turns" in error


def test_jsonl_conversations_are_read_with_dragon_conversations(tmp_path: Path, chat_model):
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps({"messages": CONV}) + "\n")
    ds = dragon.dataset(path)
    mapped, _html, _r, code, error = mapping.remap(
        ds, chat_model, "conversations", texts(messages="messages")
    )
    assert error == "" and mapped.source == str(path.resolve())
    assert f'dragon.conversations("{path.resolve()}")' in code


def test_two_chips_in_a_row_are_separated():
    prompt, response = mapping.SLOTS.index("prompt"), mapping.SLOTS.index("response")
    out = mapping.insert_column("prompt", "Détails", texts(prompt="{Ticket Title}"))
    assert out[prompt] == "{Ticket Title}\n\n{Détails}"
    out = mapping.insert_column("response", "b", texts(response="{a}"))
    assert out[response] == "{a} {b}"
    out = mapping.insert_column("prompt", "b", texts(prompt="{a}\n"))
    assert out[prompt] == "{a}\n{b}"  # the user's own separator is kept


def test_one_queued_listener_remaps_for_every_input(tmp_path: Path):
    """Each slot used to have its own remap listener; they ran side by side and the last to
    finish won, so a stale "Fill in response..." could overwrite the preview. Now one listener
    takes every trigger, one request at a time, in the order they were made."""
    from ui import layout

    app = layout.build_app(tmp_path / "runs")
    remaps = [d for d in app.fns.values() if named.called(d.fn) is mapping.remap]
    assert len(remaps) == 1
    dep = remaps[0]
    assert dep.concurrency_limit == 1 and dep.concurrency_id == mapping.REMAP_QUEUE
    assert dep.trigger_mode == "always_last"
    ids = {block._id: block for block in app.blocks.values()}
    triggered = {(ids[block_id].elem_id, event) for block_id, event in dep.targets}
    boxes = {(f"mapping-{name}", "change") for name in mapping.SLOTS}
    assert boxes | {("mapping-kind", "change")} <= triggered
    # ...and the dataset and model states: every change event the preview depends on.
    assert [event for _, event in dep.targets].count("change") == len(boxes) + 3


def test_the_example_comes_mapped_and_a_person_s_slots_are_never_touched(qa):
    example = dragon.dataset(dragon.example_data())
    n = len(mapping.SLOTS)
    *boxes, kind, suggested, note = mapping.suggest_slots(example, None, texts())
    assert boxes == list(texts(**mapping.EXAMPLE_SLOTS).values()) and kind == "sft"
    assert suggested == texts(**mapping.EXAMPLE_SLOTS) and "Mapped like the README" in note
    # The page's own slots are emptied for a dataset with other columns...
    shown = dict(zip(mapping.SLOTS, boxes, strict=True))
    *boxes, kind, suggested, note = mapping.suggest_slots(qa, suggested, shown)
    assert boxes == list(texts().values()) and kind == SKIP and suggested is None and note == ""
    # ...but slots the person filled stay, for the example too, and so do empty ones.
    typed = texts(prompt="{question}", response="answer")
    assert mapping.suggest_slots(example, None, typed) == (SKIP,) * (n + 3)
    edited = texts(**{**mapping.EXAMPLE_SLOTS, "response": "{reply}"})
    filled = texts(**mapping.EXAMPLE_SLOTS)
    assert mapping.suggest_slots(qa, filled, edited) == (SKIP,) * (n + 3)
    assert mapping.suggest_slots(qa, None, texts()) == (SKIP,) * (n + 3)
    # What the page filled in maps the example as the README does.
    mapped = mapping.remap(example, dragon.ResolvedModel.bundled(), "sft", filled)[0]
    assert mapped.mapping.prompt == "{subject}\n\n{body}" and mapped.mapping.response == "reply"
