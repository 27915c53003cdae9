"""The Monitor's training curves: each method's own columns from progress.jsonl, as plotly
traces whose points are the logged steps."""

from __future__ import annotations

import pandas as pd

from dragonfarm_core.rundir import files
from ui import charts

SFT_ROWS = [
    {"step": 1, "loss": 2.0, "eval_loss": None, "lr": 1e-4},
    {"step": 2, "loss": 1.5, "eval_loss": None, "lr": 1e-4},
    {"step": 2, "loss": None, "eval_loss": 1.7, "lr": None},  # an eval row
]
PREF_ROWS = [
    {"step": 1, "loss": 0.69, "pref_acc": 0.5, "reward_margin": 0.0, "eval_pref_acc": None,
     "eval_reward_margin": None, "eval_loss": None, "lr": 5e-5},
    {"step": 2, "loss": 0.6, "pref_acc": 0.75, "reward_margin": 0.2, "eval_pref_acc": 0.8,
     "eval_reward_margin": 0.3, "eval_loss": 0.58, "lr": 5e-5},
]  # fmt: skip
GRPO_ROWS = [
    {"step": 1, "loss": 0.0, "reward": 0.5, "kl": 0.0, "reward_regex": 0.25,
     "reward_length": 0.5, "completion_tokens": 12.0, "lr": 1e-5},
    {"step": 2, "loss": 0.01, "reward": 0.9, "kl": 0.02, "reward_regex": 0.5,
     "reward_length": 0.8, "completion_tokens": 10.0, "lr": 1e-5},
]  # fmt: skip


def traces(fig) -> dict[str, tuple[list, list, str]]:
    """name -> (steps, values, y axis) of every trace."""
    return {t.name: (list(t.x), list(t.y), t.yaxis) for t in fig.data}


def test_sft_shows_loss_eval_loss_and_the_learning_rate():
    got = traces(charts.progress_figure(pd.DataFrame(SFT_ROWS), "sft"))
    assert list(got) == ["loss", "eval loss", "learning rate"]
    assert got["loss"][:2] == ([1, 2], [2.0, 1.5]) and got["eval loss"][:2] == ([2], [1.7])
    assert got["learning rate"][2] != got["loss"][2]  # its own subplot


def test_dpo_and_orpo_add_preference_accuracy_and_reward_margin():
    for method in ("dpo", "orpo"):
        fig = charts.progress_figure(pd.DataFrame(PREF_ROWS), method)
        got = traces(fig)
        assert list(got)[0] == "loss"
        assert got["preference accuracy"][:2] == ([1, 2], [0.5, 0.75])
        assert got["eval preference accuracy"][:2] == ([2], [0.8])
        assert got["reward margin"][:2] == ([1, 2], [0.0, 0.2])
        assert got["eval reward margin"][:2] == ([2], [0.3])
        axes = {got[name][2] for name in ("loss", "preference accuracy", "reward margin")}
        assert len(axes) == 3  # one subplot each
        assert len(fig.layout.annotations) == 0


def test_grpo_shows_the_total_reward_each_reward_and_kl():
    fig = charts.progress_figure(pd.DataFrame(GRPO_ROWS), "grpo")
    got = traces(fig)
    assert list(got)[:3] == ["reward (total)", "regex reward", "length reward"]
    assert got["reward (total)"][:2] == ([1, 2], [0.5, 0.9])
    assert got["regex reward"][:2] == ([1, 2], [0.25, 0.5])
    assert got["length reward"][2] == got["reward (total)"][2]  # same subplot as the total
    assert got["KL to the start model"][:2] == ([1, 2], [0.0, 0.02])
    assert got["KL to the start model"][2] != got["reward (total)"][2]
    assert "completion_tokens" not in str(list(got))
    # The same rows drawn as SFT show no reward: the curves follow the method, not the file.
    assert "reward (total)" not in traces(charts.progress_figure(pd.DataFrame(GRPO_ROWS)))


def test_an_empty_run_says_it_waits_for_the_first_step():
    for method in ("sft", "dpo", "grpo"):
        fig = charts.progress_figure(pd.DataFrame(), method)
        assert "Waiting for the first logged step" in fig.layout.annotations[0].text
        assert all(len(t.x) == 0 for t in fig.data)


def test_the_bar_says_what_a_run_does_after_its_last_step():
    finishing = charts.progress_html("running", 10, 10, 0.0, files.FINISHING)
    assert "step 10 / 10 (100%) · finishing: measuring the held-out loss" in finishing
    assert "left" not in finishing
    assert "about" in charts.progress_html("running", 9, 10, 3.0)
    assert "finishing" not in charts.progress_html("succeeded", 10, 10, None, files.FINISHING)
