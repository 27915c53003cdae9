"""The Monitor's held-out samples table as a newcomer reads it: a width for every column (so the
data's reply and the run's sit beside the prompt at 1400 px), and a caption naming the columns
the table has. The browser check of the same is tests/browser/test_first_contact_tabs.py."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files
from ui import layout
from ui.tabs import monitor

PROMPT = "My disc brake squeals whenever it rains, and the lever feels softer than last week. " * 2
SAMPLES = [
    {"prompt": PROMPT, "reference": "Bring it in: the pads are glazed. " * 4,
     "generated": "Your return label is attached; print it and drop the parcel off. " * 2},
    {"prompt": "Tubeless or tubes?", "reference": "Tubeless, if the rims are ready for it.",
     "generated": "Thank you for your order. It ships within two working days."},
]  # fmt: skip


@pytest.mark.slow
def test_the_samples_table_gives_every_column_its_share(mapped, model, runs_dir: Path):
    run = dragon.train(mapped, model.name, runs_dir=runs_dir, wait=True)
    files.write_samples(run.dir, SAMPLES)
    samples = monitor.show(str(run.dir), runs_dir=runs_dir)[4]
    columns = list(samples["value"].columns)
    widths = samples["column_widths"]
    assert len(widths) == len(columns) >= 3
    shares = [float(w.rstrip("%")) for w in widths]
    assert sum(shares) == pytest.approx(100, abs=0.5)
    assert min(shares) >= 20, dict(zip(columns, widths, strict=True))  # none squeezed off-screen


@pytest.mark.slow
def test_the_samples_caption_names_the_tables_columns(mapped, model, runs_dir: Path):
    run = dragon.train(mapped, model.name, runs_dir=runs_dir, wait=True)
    files.write_samples(run.dir, SAMPLES)
    columns = list(monitor.show(str(run.dir), runs_dir=runs_dir)[4]["value"].columns)
    app = layout.build_app(runs_dir)
    (table,) = [
        b
        for b in app.blocks.values()
        if isinstance(b, gr.Dataframe) and b.elem_id == "monitor-samples"
    ]
    caption = str(table.label)
    # "Held-out samples: prompt, reference (what it is), ...": the names listed, in order
    named = [part.split()[0] for part in caption.split(":", 1)[1].split(",")]
    assert named == columns, caption
