"""The loop with its runs really launched and trained by tests/fake_trainer.py (a trainer
process per run, status and adapter written by it, no torch): the lineage reads what those
processes wrote as it reads the stubbed chain."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import location
from tests.lineage.loop import rate

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_trained_loop_is_read_back_from_each_end(tmp_path, model_dir, monkeypatch):
    monkeypatch.setenv("DRAGONFARM_TRAINER_MODULE", "fake_trainer")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    runs = tmp_path / "runs"
    data = tmp_path / "tickets.csv"
    rows = [{"question": f"Device {i} reboots", "answer": f"Reset it ({i})."} for i in range(8)]
    pd.DataFrame(rows).to_csv(data, index=False)

    ds = dragon.dataset(data).map(prompt="question", response="answer")
    sft = dragon.train(ds, str(model_dir), runs_dir=runs, wait=True)
    rate(runs, sft)
    fb = dragon.feedback(runs, label="round1")
    dpo = dragon.prefer(fb.pairs, sft, runs_dir=runs, wait=True)
    assert (sft.state, dpo.state) == ("succeeded", "succeeded")

    forward = dragon.lineage(data, runs_dir=runs)
    back = dragon.lineage(dpo)
    chain = [("tickets.csv", "trained on", sft.id),
             (sft.id, "chatted with", f"feedback on {sft.id}"),
             (f"feedback on {sft.id}", "4 of its events", "pairs-round1.jsonl"),
             ("pairs-round1.jsonl", "trained on", dpo.id),
             (sft.id, "continued from", dpo.id)]  # fmt: skip
    for lin in (forward, back):
        found = {(lin.node(e.source).id, e.link, lin.node(e.target).id) for e in lin.edges}
        assert set(chain) <= found
    assert back.focus_node.detail == "dpo, succeeded"
    assert [n.kind for n in back.children(back.focus)] == []
