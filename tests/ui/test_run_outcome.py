"""What a finished run changed, on the Monitor (ui.run_outcome): the held-out measure before and
after in plain words, the replies before and after for a few held-out prompts next to the
data's, and every final number folded away instead of a raw "Final: ..." line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files
from ui import run_outcome
from ui.tabs import monitor

SAMPLES = [
    {"prompt": "VPN drops <every> hour", "reference": "Renew the certificate.",
     "generated": "Renew your VPN certificate.", "before": "Your return label is attached."},
    {"prompt": "Printer jams", "reference": "Clear the tray.", "generated": "Open the tray."},
]  # fmt: skip


def test_the_loss_sentence_says_what_happened_and_what_to_try():
    lower = run_outcome.loss_sentence(11.45, 4.9)
    assert "from 11.45 to 4.90: 57% lower" in lower
    assert "barely changed" in run_outcome.loss_sentence(11.45, 11.03)
    assert "more epochs or a larger learning rate" in run_outcome.loss_sentence(11.45, 11.03)
    higher = run_outcome.loss_sentence(2.0, 2.5)
    assert "25% higher" in higher and "fewer epochs" in higher
    assert "no held-out rows" in run_outcome.loss_sentence(None, None, held_out=0)
    assert run_outcome.loss_sentence(None, None, held_out=6) == run_outcome.NOT_MEASURED


def test_each_method_gets_its_own_measure():
    grpo = run_outcome.measure_sentence("grpo", {"start_reward": 0.1, "reward": 0.6}, {})
    assert "Mean reward on the held-out prompts went from 0.10 to 0.60" in grpo
    dpo = run_outcome.measure_sentence("dpo", {"pref_accuracy": 0.75}, {"eval_pref_acc": 0.5})
    assert "went from 50% to 75%" in dpo
    sft = run_outcome.measure_sentence("sft", {"eval_loss": 3.0}, {"eval_loss": 6.0})
    assert "from 6.00 to 3.00: 50% lower" in sft  # the step-0 row when eval.json lacks it


def test_before_and_after_cards_only_for_samples_that_have_before_and_escaped():
    shown = run_outcome.before_after_html(SAMPLES)
    assert shown.count("outcome-card") == 1 and "Printer jams" not in shown
    assert "VPN drops &lt;every&gt; hour" in shown and "<every>" not in shown
    for text in ("Renew the certificate.", "Your return label is attached.", "Renew your VPN"):
        assert text in shown
    assert run_outcome.before_after_html(SAMPLES[1:]) == ""


@pytest.mark.slow
def test_the_monitor_shows_the_outcome_of_a_succeeded_run(mapped, model, runs_dir: Path):
    run = dragon.train(mapped, model.name, runs_dir=runs_dir, wait=True)
    files.write_eval(run.dir, {"start_eval_loss": 11.45, "eval_loss": 4.9, "step": 6})
    files.write_samples(run.dir, SAMPLES)
    shown = monitor.show(str(run.dir), runs_dir=runs_dir)
    out = {"header": shown[0], "outcome": shown[9]}
    assert "from 11.45 to 4.90: 57% lower" in out["outcome"]
    assert "Before this run" in out["outcome"] and "Your return label" in out["outcome"]
    assert "<details><summary>All final numbers</summary>" in out["outcome"]
    assert "train loss" in out["outcome"]  # the fake trainer's final metrics, folded away
    assert "Final:" not in out["header"]


def test_the_start_values_are_the_step_0_row():
    assert run_outcome.start_row(pd.DataFrame()) == {}
    frame = pd.DataFrame([{"step": 0, "eval_loss": 9.0}, {"step": 5, "eval_loss": 4.0}])
    assert run_outcome.start_row(frame)["eval_loss"] == 9.0
