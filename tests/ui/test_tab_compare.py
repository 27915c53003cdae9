"""Compare tab handlers: the run picker, the table with the best values marked, the overlaid
curves over steps or epochs, two runs' config diff and samples side by side, the code panel.

Runs are trained by tests/fake_trainer.py (the `runs_dir` fixture in conftest.py): an SFT run
and a DPO run continuing from it. The figures and samples a real trainer writes at its end
(eval.json, samples.json, a held-out loss row in progress.jsonl) are written by each test.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import json
import os
import shutil
import time
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files
from ui import compare_view, table_widths
from ui.tabs import compare

SKIP = gr.skip()
NAMES = ["table", "legend", "chart", "a", "b", "diff", "samples", "note", "code", "error"]
PROMPTS = ["Device 1 reboots", "Device 2 reboots"]
TESTS_DIR = Path(__file__).resolve().parents[1]


def view(out: tuple) -> dict:
    return dict(zip(NAMES, out, strict=True))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder with an SFT run and a DPO run from it, trained by the fake trainer once
    for the module (each test works on its own copy)."""
    base = tmp_path_factory.mktemp("trained")
    model = base / "Tiny-Model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    rows = [{"question": f"Device {i} reboots", "answer": f"Reset it ({i})."} for i in range(24)]
    pd.DataFrame(rows).to_csv(base / "tickets.csv", index=False)
    tickets = dragon.dataset(base / "tickets.csv")
    root = base / "runs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRAGONFARM_TRAINER_MODULE", "fake_trainer")
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
        sft = dragon.train(tickets.map(prompt="question", response="answer"), str(model),
                           runs_dir=root, name="sft", wait=True)  # fmt: skip
        pairs = tickets.map_pairs(prompt="question", chosen="answer", rejected="question")
        # Run ids hold the second they were made in; the app lists runs by id, so the DPO run
        # starts in a later second than the SFT run (the tests read the lists in that order).
        time.sleep(1.05 - time.time() % 1)
        dragon.prefer(pairs, sft, beta=0.3, runs_dir=root, name="dpo", wait=True)
    return root


@pytest.fixture
def two(runs_dir: Path, trained: Path) -> list:
    """[sft, dpo] in the test's runs folder, with the files a real trainer writes at its end."""
    for run_dir in sorted(trained.iterdir()):
        shutil.copytree(run_dir, runs_dir / run_dir.name)
    # By method, not by folder name: both runs can start in the same second, and then
    # "<time>-dpo" sorts before "<time>-sft".
    runs = {run.method: run for run in map(dragon.open_run, runs_dir.iterdir())}
    sft, dpo = runs["sft"], runs["dpo"]
    files.write_eval(sft.dir, {"eval_loss": 1.4, "perplexity": 4.06, "step": 6})
    files.write_eval(dpo.dir, {"eval_loss": 0.9, "pref_accuracy": 0.8, "step": 6})
    for run, eval_loss in ((sft, 1.4), (dpo, 0.9)):
        files.append_progress(run.dir, {"step": 6, "epoch": 3.0, "eval_loss": eval_loss})
        files.write_samples(run.dir, [
            {"prompt": p, "reference": f"ref {i}", "generated": f"{run.method} says {i}"}
            for i, p in enumerate(PROMPTS)
        ])  # fmt: skip
    return [sft, dpo]


@pytest.mark.slow
def test_the_picker_lists_every_run_and_keeps_the_picked_ones(two, runs_dir: Path):
    sft, dpo = two
    picked = [str(sft.dir), str(dpo.dir)]
    update, seen = compare.refresh_runs(runs_dir, None, picked)
    assert [v for _, v in update["choices"]] == [str(dpo.dir), str(sft.dir)]  # newest first
    assert update["value"] == picked and f"{sft.id} (sft, succeeded)" in dict(update["choices"])
    shutil.rmtree(dpo.dir)
    for _ in range(100):  # the watchdog event arrives from a thread
        update, _ = compare.refresh_runs(runs_dir, seen, picked)
        if update != SKIP:
            break
        time.sleep(0.05)
    assert update["value"] == [str(sft.dir)]  # the deleted run is no longer picked


def test_two_runs_side_by_side_with_the_best_marked(two, runs_dir: Path):
    sft, dpo = two
    shown = view(compare.show([str(sft.dir), str(dpo.dir)], "eval_loss", "step", None, None,
                              runs_dir=runs_dir))  # fmt: skip
    table = shown["table"]["value"]
    assert list(table["id"]) == [sft.id, dpo.id] and shown["table"]["visible"] is True
    assert list(table["eval_loss ↓"]) == ["1.4", f"{compare_view.BEST} 0.9"]
    assert list(table["pref_accuracy ↑"]) == ["", "0.8"]  # one figure alone is not marked
    assert list(table["beta"]) == ["", "0.3"] and "perplexity ↓" in table  # blank, not 0
    assert "reward_margin ↑" not in table  # neither run has one: the column is left out
    legend = shown["legend"]
    assert "lowest train_loss, eval_loss" in legend and "↓ lower is better" in legend
    traces = shown["chart"].data
    assert [t.name for t in traces] == [sft.id, dpo.id] and list(traces[1].y) == [0.9]
    assert (shown["a"]["value"], shown["b"]["value"]) == (str(sft.dir), str(dpo.dir))
    diff = shown["diff"]["value"].set_index("setting")
    assert diff.loc["method"].tolist() == ["sft", "dpo"]
    assert diff.loc["method_args.beta"].tolist() == ["", "0.3"]
    assert "id" not in diff.index and "created_at" not in diff.index
    assert "model.name" not in diff.index  # the same in both: only what differs is listed
    side = shown["samples"]["value"]
    assert list(side.columns) == ["prompt", "reference", sft.id, dpo.id]
    assert side.iloc[1].tolist() == [PROMPTS[1], "ref 1", "sft says 1", "dpo says 1"]
    assert f'"{sft.dir}",\n    "{dpo.dir}",' in shown["code"] and shown["error"] == ""
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):  # the panel's code, run as shown
        exec(compile(shown["code"], "<code panel>", "exec"), namespace)
    assert list(namespace["table"]["id"]) == [sft.id, dpo.id]


def test_no_run_picked_puts_every_run_in_the_table_only(two, runs_dir: Path):
    shown = view(compare.show([], "loss", "step", None, None, runs_dir=runs_dir))
    assert list(shown["table"]["value"]["id"]) == [r.id for r in two]
    assert shown["chart"].data == () and "Pick runs" in str(shown["chart"].layout.annotations)
    assert shown["a"]["choices"] == [] and compare.NO_PAIR in shown["note"]
    assert f'runs_dir="{runs_dir}"' in shown["code"]


def test_curves_over_epochs_and_a_curve_no_run_logged(two, runs_dir: Path):
    picks = [str(r.dir) for r in two]
    chart, error = compare.curves(picks, "loss", "epoch", runs_dir=runs_dir)
    assert error == "" and chart.layout.xaxis.title.text == "epoch"
    assert list(chart.data[0].x) == pytest.approx([i / 6 for i in range(1, 7)])  # fake epochs
    chart, _ = compare.curves(picks, "kl", "step", runs_dir=runs_dir)
    assert all(len(t.x) == 0 for t in chart.data)
    assert "No picked run logged KL" in str(chart.layout.annotations)
    chart, _ = compare.curves(picks, "grad_norm", "step", runs_dir=runs_dir)  # typed in
    assert chart.layout.yaxis.title.text == "grad_norm" and list(chart.data[0].y) == [1.0] * 6


def test_pairs_that_show_no_diff(two, runs_dir: Path):
    sft, dpo = two
    diff, side, note, error = compare.pair(str(sft.dir), None, runs_dir=runs_dir)
    assert diff["visible"] is False and compare.NO_PAIR in note and error == ""
    diff, side, note, _ = compare.pair(str(sft.dir), sft.id, runs_dir=runs_dir)
    assert side["visible"] is False and compare.SAME_PAIR in note
    files.write_samples(dpo.dir, [{"prompt": "something else", "generated": "x"}])
    diff, side, note, _ = compare.pair(str(sft.dir), str(dpo.dir), runs_dir=runs_dir)
    assert side["visible"] is False and compare.NO_SHARED in note and diff["visible"] is True


def test_a_missing_run_is_said_not_raised(two, runs_dir: Path):
    with pytest.warns(UserWarning, match="No run"):
        shown = view(compare.show([str(runs_dir / "gone")], "loss", "step", None, None,
                                  runs_dir=runs_dir))  # fmt: skip
    assert all(shown[k] == SKIP for k in NAMES[:-1]) and "No run" in shown["error"]


def test_best_rows_ties_and_single_values():
    frame = pd.DataFrame({"eval_loss": [0.5, 0.5, 0.7], "reward": [None, 0.2, None]})
    assert compare_view.best_rows(frame, "eval_loss", "lower") == {0, 1}
    assert compare_view.best_rows(frame, "eval_loss", "higher") == {2}
    assert compare_view.best_rows(frame, "reward", "higher") == set()


def test_settings_differ_by_value_not_by_spelling():
    a = {"id": "a", "args": {"weight_decay": 0, "lr": 2e-4, "packing": True, "layers": [1, 2]},
         "seed": 1, "note": "0"}  # fmt: skip
    b = {"id": "b", "args": {"weight_decay": 0.0, "lr": 0.0002, "packing": 1, "layers": [1.0, 2]},
         "seed": 1.0, "note": 0}  # fmt: skip
    diff = compare_view.config_diff(a, b, ("A", "B")).set_index("setting")
    # 0 and 0.0 are the same number; True is not the number 1, nor the text "0" the number 0.
    assert sorted(diff.index) == ["args.packing", "note"]
    assert diff.loc["args.packing"].tolist() == ["true", "1"]
    assert compare_view.config_diff(a, {**a, "extra": None}, ("A", "B"))["B"].tolist() == ["null"]
    assert doctest.testmod(compare_view).failed == 0


def test_the_replies_get_the_room_of_the_samples_table(two, runs_dir: Path):
    sft, dpo = two
    long_prompt = "My e-bike's display shows error 21 after the rain, what can I do? " * 4
    for run in two:
        files.write_samples(run.dir, [
            {"prompt": long_prompt, "reference": "Dry the connector.",
             "generated": f"{run.method}: unplug the display connector and dry it well."}
        ])  # fmt: skip
    _, side, _, _ = compare.pair(str(sft.dir), str(dpo.dir), runs_dir=runs_dir)
    widths = dict(zip(side["value"].columns, side["column_widths"], strict=True))
    share = {column: float(w.rstrip("%")) for column, w in widths.items()}
    assert sum(share.values()) == pytest.approx(100, abs=0.5)
    # Without widths the prompt took the row; now each run's reply has a fair column of it.
    assert share[sft.id] >= 15 and share[dpo.id] >= 15 and share["prompt"] <= 50, share


def test_the_note_counts_settings_in_words_and_says_where_a_and_b_come_from(two, runs_dir: Path):
    """A new user's walk: Run A and Run B's lists were empty under a note saying "pick two runs
    above"; the note now names the Runs picker and Refresh. One difference reads '1 setting
    differs' (was '1 settings differ')."""
    assert "Runs at the top" in compare.NO_PAIR and "Refresh" in compare.NO_PAIR
    sft = two[0]
    twin = runs_dir / "20260101-000000-twin"
    shutil.copytree(sft.dir, twin)
    config = json.loads((twin / "config.json").read_text())
    config["id"] = twin.name
    config["args"]["learning_rate"] = 0.5
    (twin / "config.json").write_text(json.dumps(config))
    diff, _, note, error = compare.pair(str(sft.dir), str(twin), runs_dir=runs_dir)
    assert error == "" and diff["value"]["setting"].tolist() == ["args.learning_rate"]
    assert note.startswith("**1** setting differs between ")
    _, _, note, _ = compare.pair(str(sft.dir), str(two[1].dir), runs_dir=runs_dir)
    assert "** settings differ between " in note


def test_the_figures_the_legend_names_come_right_after_the_id(two, runs_dir: Path):
    """A new user's walk: the losses the ★ legend talks about were the table's last columns,
    off-screen right of 18 columns in a 1400 px window; they now follow the id."""
    shown = view(compare.show([str(r.dir) for r in two], "loss", "step", None, None,
                              runs_dir=runs_dir))  # fmt: skip
    columns = list(shown["table"]["value"].columns)
    figures = [c for c in columns if c.endswith(("↓", "↑"))]
    assert "eval_loss ↓" in figures and "pref_accuracy ↑" in figures
    assert columns[: 1 + len(figures)] == ["id", *figures]
    assert columns[1 + len(figures)] == "name"
    # with widths, so no header breaks mid-word ("meth od"), the table scrolling if it must
    assert shown["table"]["column_widths"] == table_widths.column_widths(shown["table"]["value"])
