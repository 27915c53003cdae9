"""Feedback tab handlers: the events table and counts, ticks that read only after a change, and
the SFT and preference datasets handed to the Train tab.

Events are made the way the Chat tab makes them: `dragon.chat` with a scripted backend, then
`rate` and `edit`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.models import ResolvedModel
from dragonfarm_core.rundir import location
from ui import layout
from ui.tabs import feedback

SKIP = gr.skip()
BUILT = ["mapped", "built", "code", "error", "table", "counts", "seen"]


class Scripted:
    name = "server"
    model = "scripted-model"

    def chat(self, model, messages, sampling, on_token=None):
        return f"answer to {messages[-1]['content']}"

    def generate(self, model, conversations, sampling):
        return [self.chat(model, c, sampling) for c in conversations]


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    root = tmp_path / "runs"
    root.mkdir()
    return root


@pytest.fixture
def model() -> ResolvedModel:
    return ResolvedModel("dragonfarm/tiny-support", "/nowhere", None)


def rated(runs_dir: Path) -> None:
    """Two chats: a reply liked then a better one written; a reply disliked then regenerated
    and liked (a preference pair)."""
    c = dragon.chat(system="Be brief.", backend=Scripted(), runs_dir=runs_dir)
    c.say("Where is my order?")
    c.rate("up")
    c.edit("It ships tomorrow.")
    d = dragon.chat(backend=Scripted(), runs_dir=runs_dir)
    d.say("Refund?")
    d.rate("down")
    d.edit("Yes, within 30 days.")


def test_nothing_yet_says_what_to_do(runs_dir, model):
    table, counts, seen = feedback.show(runs_dir)
    assert len(table) == 0 and "No feedback yet" in counts and seen is None
    assert feedback.tick(runs_dir, None) == (SKIP,) * 3
    for kind in ("sft", "pairs"):
        out = dict(zip(BUILT, feedback.build_data(kind, runs_dir, model), strict=True))
        assert out["mapped"] == SKIP and "No " in out["error"] and out["built"] == ""
    assert not list((runs_dir / "feedback").glob("*.jsonl"))


def test_records_and_counts(runs_dir):
    rated(runs_dir)
    table, counts, seen = feedback.show(runs_dir)
    assert list(table["feedback"]) == ["edited", "👎 bad", "edited", "👍 good"]  # newest first
    assert list(table["prompt"]) == ["Refund?", "Refund?", "Where is my order?"] + [
        "Where is my order?"
    ]
    assert (
        table["edit"][0] == "Yes, within 30 days." and table["run or model"][0] == "scripted-model"
    )
    assert "4 feedback events" in counts and "1 liked" in counts and "1 disliked" in counts
    assert "2 edited" in counts and "3 SFT rows" in counts and "1 preference pair**" in counts
    assert not list((runs_dir / "feedback").glob("sft-*"))  # looking writes nothing


def test_a_tick_reads_only_after_a_new_event(runs_dir):
    rated(runs_dir)
    *_, seen = feedback.show(runs_dir)
    assert feedback.tick(runs_dir, seen) == (SKIP,) * 3
    time.sleep(0.01)
    c = dragon.chat(backend=Scripted(), runs_dir=runs_dir)
    c.say("Hello")
    c.rate("down")
    table, counts, newer = feedback.tick(runs_dir, seen)
    assert newer != seen and table["prompt"][0] == "Hello" and "5 feedback events" in counts


def test_build_sft_hands_the_dataset_to_the_train_tab(runs_dir, model):
    rated(runs_dir)
    out = dict(zip(BUILT, feedback.build_data("sft", runs_dir, model), strict=True))
    data = out["mapped"]
    assert isinstance(data, dragon.Dataset) and data.mapping.kind == "conversations"
    assert len(data) == 3 and out["error"] == "" and "**3 rows**" in out["built"]
    assert Path(data.spec()["source"]).parent == runs_dir / "feedback"
    assert f'fb = dragon.feedback(runs_dir="{runs_dir}")' in out["code"]
    assert 'run = dragon.train(fb.sft, "dragonfarm/tiny-support")' in out["code"]
    compile(out["code"], "feedback", "exec")
    assert "3 SFT rows" in out["counts"]


def test_build_pairs(runs_dir, model):
    rated(runs_dir)
    out = dict(zip(BUILT, feedback.build_data("pairs", runs_dir, model), strict=True))
    pairs = out["mapped"]
    assert pairs.mapping.kind == "pairs" and len(pairs) == 1
    row = pairs.frame.iloc[0]
    assert (row["prompt"], row["chosen"]) == ("Refund?", "Yes, within 30 days.")
    assert row["rejected"] == "answer to Refund?"
    assert 'dragon.prefer(fb.pairs, "dragonfarm/tiny-support", method="dpo")' in out["code"]
    assert "DPO or ORPO" in out["built"]


def test_the_code_continues_from_the_newest_rated_run(runs_dir, model):
    older, newer = (str(runs_dir / f"20260101-00000{i}-tickets") for i in (0, 1))
    records = pd.DataFrame({"run": [older, None, newer, None]})
    code = feedback.feedback_code("sft", runs_dir, records, model)
    assert f'run = dragon.train(fb.sft, dragon.open_run("{newer}"))' in code


def test_every_rating_button_says_its_verdict_in_words(tmp_path: Path):
    """Without an emoji font 👍 and 👎 are blank boxes: each button that shows one also says
    what it does in letters (the Chat tab's rating buttons feed this tab), and this tab's hint
    calls them by those labels."""
    app = layout.build_app(tmp_path / "runs")
    labels = [str(b.value) for b in app.blocks.values() if isinstance(b, gr.Button)]
    rating = [label for label in labels if "👍" in label or "👎" in label]
    assert len(rating) >= 2, labels  # the Chat tab's, one pair per chat column
    assert all(re.search(r"[A-Za-z]{3,}", label) for label in rating), rating
    assert all(label in feedback.EMPTY for label in rating)  # the hint names them as they read
