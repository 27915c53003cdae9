"""dragon.compare(): one row per run with what it is and every figure its files hold, NaN (never
0) for what a run lacks; the runs as given or every run oldest first; refusals; the code.

The runs are trained by tests/fake_trainer.py (status, progress, adapter), an SFT run, a DPO
and a GRPO run continuing from it; the figures a real trainer, evaluate() and judge() leave
(eval.json, metrics.json, a step-0 progress row, judge.json and the judge summary in
status.json) are then written as those write them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import compare_code
from dragonfarm_core.evaluation.compare import COLUMNS, better
from dragonfarm_core.rundir import create, files, location, refs

TESTS_DIR = Path(__file__).resolve().parents[1]
PAIRWISE = {"mode": "pairwise", "against": "base", "n": 20, "judged": 18, "wins": 12, "ties": 4,
            "losses": 2, "win_rate": 12 / 18, "tie_rate": 4 / 18, "loss_rate": 2 / 18,
            "label": "vs base: 12W 4T 2L (n=18)"}  # fmt: skip
RUBRIC = {"mode": "rubric", "n": 10, "scored": 9, "mean_score": 7.5, "label": "score 7.5/10 (n=9)"}
SAMPLES = [{"prompt": "Device 1 reboots", "reference": "Reset it (1).",
            "generated": "Reset it (1).", "split": "eval"}]  # fmt: skip


def _train_all(root: Path, csv: Path, model: Path) -> dict[str, dragon.Run]:
    """sft, dpo (from sft, beta 0.2), grpo (from sft), each trained by the fake trainer, and
    a failed run that never measured anything."""
    tickets = dragon.dataset(csv)
    sft = dragon.train(tickets.map(prompt="question", response="answer"), str(model),
                       name="1-sft", runs_dir=root, wait=True)  # fmt: skip
    pairs = tickets.map_pairs(prompt="question", chosen="answer", rejected="bad")
    dpo = dragon.prefer(pairs, sft, beta=0.2, name="2-dpo", runs_dir=root, wait=True)
    prompts = tickets.map_prompts(prompt="question", reference="answer")
    grpo = dragon.reinforce(prompts, sft, rewards=[dragon.reward("exact")], group_size=6,
                            name="3-grpo", runs_dir=root, wait=True)  # fmt: skip
    failed = Path(create.create_run("sft", tickets.map(prompt="question", response="answer"),
                                    str(model), name="4-failed", runs_dir=root))  # fmt: skip
    files.write_status(failed, {"state": "failed", "reason": "error", "error": "boom"})
    return {"sft": sft, "dpo": dpo, "grpo": grpo, "failed": dragon.open_run(failed)}


def _measure(runs: dict[str, dragon.Run]) -> None:
    """The files a real trainer, evaluate() and judge() write, for the three trained runs."""
    sft, dpo, grpo = runs["sft"], runs["dpo"], runs["grpo"]
    files.write_eval(sft.dir, {"eval_loss": 1.2, "perplexity": math.exp(1.2),
                               "start_eval_loss": 2.5, "eval_tokens": 90, "step": 6})  # fmt: skip
    files.write_samples(sft.dir, SAMPLES)
    dragon.evaluate(sft, n_samples=1, metrics=["exact", "length_ratio"])  # -> metrics.json
    files.write_eval(dpo.dir, {"eval_loss": 0.6, "pref_accuracy": 0.75, "reward_margin": 1.5,
                               "eval_pairs": 1, "step": 6})  # fmt: skip
    files.append_progress(dpo.dir, {"step": 0, "epoch": 0.0, "eval_loss": 0.69})
    files.update_status(dpo.dir, judge=PAIRWISE)
    files.write_json(dpo.dir / files.JUDGE, {"mode": "pairwise", "summary": PAIRWISE, "rows": []})
    files.write_eval(grpo.dir, {"reward": 0.8, "reward_exact": 0.8, "start_reward": 0.3,
                                "start_reward_exact": 0.3, "eval_prompts": 1, "step": 6})  # fmt: skip
    # Only judge.json: compare() reads it when the status holds no summary.
    files.write_json(grpo.dir / files.JUDGE, {"mode": "rubric", "summary": RUBRIC, "rows": []})


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dragon.Run]:
    base = tmp_path_factory.mktemp("compare")
    model = base / "Tiny-Model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    csv = base / "tickets.csv"
    rows = [{"question": f"Device {i} reboots", "answer": f"Reset it ({i}).", "bad": "No."}
            for i in range(24)]  # fmt: skip
    pd.DataFrame(rows).to_csv(csv, index=False)
    root = base / "runs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRAGONFARM_TRAINER_MODULE", "fake_trainer")
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
        mp.delenv(location.ENV_VAR, raising=False)
        mp.setattr(location, "_configured", None)
        runs = _train_all(root, csv, model)
    _measure(runs)
    return runs


def _root(farm: dict[str, dragon.Run]) -> Path:
    return farm["sft"].dir.parent


@pytest.mark.slow
def test_every_run_oldest_first_with_what_it_is(farm):
    table = dragon.compare(runs_dir=_root(farm))
    assert list(table["id"]) == [farm[k].id for k in ("sft", "dpo", "grpo", "failed")]
    assert list(table.columns[: len(COLUMNS)]) == COLUMNS
    sft, dpo, grpo, failed = (row for _, row in table.iterrows())
    assert (sft["stage"], sft["method"], dpo["stage"], grpo["stage"]) == (
        "train", "sft", "prefer", "reinforce")  # fmt: skip
    assert sft["continued_from"] is None
    assert dpo["continued_from"] == grpo["continued_from"] == farm["sft"].id
    assert sft["dataset"] == "tickets" and sft["n_train"] + sft["n_eval"] == 24
    assert (sft["lr"], sft["epochs"], sft["lora_r"]) == (2e-4, 3, 16)
    assert (dpo["lr"], dpo["epochs"], dpo["beta"]) == (5e-5, 2, 0.2)
    assert (grpo["group_size"], grpo["beta"]) == (6, 0.04)
    assert (sft["state"], failed["state"]) == ("succeeded", "failed")
    assert sft["duration"] >= 0 and sft["started"].tzinfo is not None


def test_every_figure_the_run_files_hold(farm):
    table = dragon.compare(runs_dir=_root(farm)).set_index("id")
    sft, dpo, grpo = (table.loc[farm[k].id] for k in ("sft", "dpo", "grpo"))
    assert sft["train_loss"] == pytest.approx(2 / 6)  # the fake trainer's final loss
    assert (sft["eval_loss"], sft["start_eval_loss"]) == (1.2, 2.5)  # eval.json
    assert sft["perplexity"] == pytest.approx(math.exp(1.2))
    assert (sft["metric_exact"], sft["metric_length_ratio"]) == (1.0, 1.0)  # metrics.json
    assert (dpo["eval_loss"], dpo["pref_accuracy"], dpo["reward_margin"]) == (0.6, 0.75, 1.5)
    assert dpo["start_eval_loss"] == 0.69  # progress.jsonl's step-0 row
    assert (dpo["judge"], dpo["judge_mode"], dpo["judge_against"]) == (
        PAIRWISE["label"], "pairwise", "base")  # fmt: skip
    assert dpo["judge_win_rate"] == pytest.approx(12 / 18) and dpo["judge_n"] == 18
    assert dpo["judge_loss_rate"] == pytest.approx(2 / 18)
    assert (grpo["reward"], grpo["start_reward"]) == (0.8, 0.3)
    assert (grpo["reward_exact"], grpo["start_reward_exact"]) == (0.8, 0.3)
    assert (grpo["judge"], grpo["judge_mean_score"], grpo["judge_n"]) == (RUBRIC["label"], 7.5, 9)


def test_missing_figures_are_nan_never_zero(farm):
    table = dragon.compare(runs_dir=_root(farm)).set_index("id")
    failed, sft, grpo = (table.loc[farm[k].id] for k in ("failed", "sft", "grpo"))
    numbers = [c for c in table.columns if table[c].dtype.kind == "f"]
    assert "eval_loss" in numbers and "metric_exact" in numbers and "reward_exact" in numbers
    assert failed[[c for c in numbers if c not in ("n_train", "n_eval", "lr", "epochs",
                                                   "lora_r")]].isna().all()  # fmt: skip
    assert failed["judge"] is None and failed["judge_mode"] is None
    assert math.isnan(sft["pref_accuracy"]) and math.isnan(sft["reward"])
    assert math.isnan(sft["judge_win_rate"]) and math.isnan(sft["beta"])
    assert math.isnan(grpo["eval_loss"]) and math.isnan(grpo["metric_exact"])
    assert math.isnan(grpo["judge_win_rate"])  # a rubric judgement has no win rate
    measured = [c for c in numbers if c != "duration"]  # a fake run may take 0 s, truly
    assert not (table[measured].fillna(1) == 0).any().any()  # nothing unmeasured reads as 0


def test_which_value_is_best_per_column(farm):
    better_by = dragon.compare(runs_dir=_root(farm)).attrs["better"]
    lower = ("train_loss", "eval_loss", "perplexity", "judge_loss_rate")
    higher = ("pref_accuracy", "reward_margin", "reward", "reward_exact", "metric_exact",
              "judge_win_rate", "judge_mean_score")  # fmt: skip
    assert {better_by[c] for c in lower} == {"lower"}
    assert {better_by[c] for c in higher} == {"higher"}
    for neutral in ("start_eval_loss", "start_reward", "start_reward_exact", "duration", "lr",
                    "metric_length_ratio", "judge_tie_rate", "n_train"):  # fmt: skip
        assert neutral not in better_by and better(neutral) is None
    assert better("metric_exact_2") == "higher" and better("metric_length_ratio_2") is None


def test_runs_as_given_in_order_once_each(farm):
    root = _root(farm)
    sft, dpo, grpo = farm["sft"], farm["dpo"], farm["grpo"]
    table = dragon.compare(dpo, sft.id, [str(grpo.dir), sft], runs_dir=root)
    assert list(table["id"]) == [dpo.id, sft.id, grpo.id]
    assert list(dragon.compare(grpo, sft)["id"]) == [grpo.id, sft.id]  # no runs_dir: folders


def test_refuses_what_is_no_run_of_the_runs_dir(farm, tmp_path):
    root = _root(farm)
    with pytest.raises(FileNotFoundError, match="No run 'no-such-run'"):
        dragon.compare("no-such-run", runs_dir=root)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(farm["sft"].dir, elsewhere / farm["sft"].id)
    with pytest.raises(refs.OutsideFolderError, match="outside the runs directory"):
        dragon.compare(str(elsewhere / farm["sft"].id), runs_dir=root)
    with pytest.raises(refs.OutsideFolderError):
        dragon.compare(f"../{elsewhere.name}/{farm['sft'].id}", runs_dir=root)
    for wrong in (42, {"runs": [farm["sft"]]}, None):
        with pytest.raises(TypeError, match="compare\\(\\) takes runs: a Run, a run id or a run"):
            dragon.compare(farm["sft"], wrong, runs_dir=root)


def test_a_damaged_file_leaves_figures_empty_and_the_run_listed(farm, tmp_path):
    root = tmp_path / "runs"
    run_dir = root / farm["sft"].id
    shutil.copytree(farm["sft"].dir, run_dir)
    (run_dir / files.EVAL).write_text("{not json")
    (run_dir / files.METRICS).write_bytes(b"\xff\xfe")
    with pytest.warns(UserWarning, match="cannot be read"):
        table = dragon.compare(runs_dir=root)
    assert list(table["id"]) == [farm["sft"].id]
    assert math.isnan(table.loc[0, "eval_loss"]) and "metric_exact" not in table
    assert table.loc[0, "train_loss"] == pytest.approx(2 / 6)  # status.json still read


def test_an_empty_runs_dir_is_an_empty_table(tmp_path):
    table = dragon.compare(runs_dir=tmp_path / "none-yet")
    assert table.empty and list(table.columns) == COLUMNS


def test_code_round_trip(farm):
    runs = [farm["dpo"].dir, farm["sft"].dir]
    source = compare_code(runs, _root(farm))
    assert source.startswith("import dragonfarm_core as dragon") and "print(table)" in source
    namespace: dict = {}
    exec(compile(source.replace("print(table)", ""), "<compare>", "exec"), namespace)
    expected = dragon.compare(*runs)
    pd.testing.assert_frame_equal(namespace["table"], expected, check_exact=False)
    every = compare_code([], _root(farm))
    assert f"runs_dir={json.dumps(str(_root(farm)))}" in every
