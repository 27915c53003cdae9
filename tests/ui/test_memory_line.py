"""The Train tab's memory line: the preflight estimate for the typed settings, and the refusal
with the changes that would fit when they do not (the same sentence Start would refuse with)."""

from __future__ import annotations

import dragonfarm_core as dragon
from dragonfarm_core import memory_estimate
from ui import memory_line

TICKETS = dict(prompt="{subject}\n\n{body}", response="reply")


def spec(**args) -> dragon.RunSpec:
    ds = dragon.dataset(dragon.example_data()).map(**TICKETS)
    return dragon.RunSpec("sft", ds, "dragonfarm/tiny-support", args=dragon.TrainArgs(**args))


def test_settings_that_fit_show_the_estimate_against_the_device():
    line = memory_line.memory_html(spec(), dragon.ResolvedModel.bundled(), None)
    assert "train-memory-fits" in line and "Estimated peak memory" in line
    assert "available on cpu" in line


def test_settings_that_do_not_fit_say_what_would(monkeypatch):
    monkeypatch.setattr(memory_estimate, "available_mib", lambda device: 700.0)
    big = spec(batch_size=16, grad_accum=1, max_seq_len=1024)
    line = memory_line.memory_html(big, dragon.ResolvedModel.bundled(), None)
    assert "This run would not fit in memory" in line and "batch_size=" in line
    assert "role='alert'" in line


def test_a_datasets_rows_are_measured_once_while_it_stays_mapped(monkeypatch):
    s = spec()
    calls = []
    original = type(s.dataset).split_records
    monkeypatch.setattr(type(s.dataset), "split_records",
                        lambda self: calls.append(1) or original(self))  # fmt: skip
    memory_line._rows_seen.clear()
    for _ in range(3):
        memory_line.memory_html(s, dragon.ResolvedModel.bundled(), None)
    assert len(calls) == 1
