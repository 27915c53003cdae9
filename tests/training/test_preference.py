"""dragon.prefer(): refusals, the config it writes, code(run) round trip, and (slow) the whole
path through the launcher: train, then prefer on top, then evaluate."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import code
from dragonfarm_core.evaluation.evaluate import evaluate
from dragonfarm_core.rundir import files
from dragonfarm_core.settings import SettingsError
from dragonfarm_core.training.preference import prefer

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"


def _pairs() -> dragon.Dataset:
    frame = pd.DataFrame(
        {
            "q": [f"question {i}" for i in range(24)],
            "good": [f"Hi,\n\nanswer {i}.\n\nBest regards" for i in range(24)],
            "bad": [f"answer {i} i guess" for i in range(24)],
        }
    )
    return dragon.dataset(frame).map_pairs(prompt="q", chosen="good", rejected="bad")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"method": "ppo"}, ValueError, "'dpo', 'orpo'"),
        ({"beta": 0}, SettingsError, "beta must be a number > 0"),
        ({"beta": -1.0}, SettingsError, "beta must be a number > 0"),
        ({"beta": True}, SettingsError, "beta must be a number > 0"),
        ({"beta": "0.1"}, SettingsError, "beta must be a number > 0"),
        ({"loss_type": "kto"}, SettingsError, "DpoArgs.loss_type = 'kto' is not one of sigmoid"),
        ({"label_smoothing": 0.1}, SettingsError, "set loss_type='robust', or label_smoothing=0"),
        ({"method": "orpo", "loss_type": "ipo"}, ValueError, "ORPO has one loss of its own"),
    ],
)
def test_bad_method_or_beta_is_refused_before_anything_is_written(
    runs_root, model_dir, kwargs, error, message
):
    with pytest.raises(error, match=message):
        prefer(_pairs(), str(model_dir), runs_dir=runs_root, **kwargs)
    assert list(runs_root.iterdir()) == []


def test_a_dataset_not_mapped_as_pairs_is_refused(runs_root, model_dir):
    frame = pd.DataFrame({"q": ["a"] * 3, "a": ["b"] * 3})
    with pytest.raises(ValueError, match=r"map_pairs\(prompt=\.\.\., chosen=\.\.\., rejected"):
        prefer(dragon.dataset(frame).map(prompt="q", response="a"), str(model_dir),
               runs_dir=runs_root)  # fmt: skip
    assert list(runs_root.iterdir()) == []


@pytest.mark.parametrize("method", ["dpo", "orpo"])
def test_prefer_writes_the_method_beta_and_the_stage_defaults(runs_root, model_dir, method):
    run = prefer(_pairs(), str(model_dir), method=method, beta=0.25, runs_dir=runs_root)
    config = files.read_config(run.dir)
    dpo_own = {"loss_type": "sigmoid", "label_smoothing": 0.0} if method == "dpo" else {}
    assert config["method"] == method and config["method_args"] == {"beta": 0.25, **dpo_own}
    assert config["data"]["kind"] == "pairs"
    assert config["args"]["learning_rate"] == 5e-5 and config["args"]["epochs"] == 2
    rows = files.read_jsonl(files.data_path(run.dir, "train"))
    assert rows[0]["prompt"][-1]["role"] == "user"
    assert rows[0]["chosen"][0]["role"] == rows[0]["rejected"][0]["role"] == "assistant"


def _round_trip(run_dir: Path, runs_root: Path) -> str:
    source = code(run_dir)
    before = set(runs_root.iterdir())
    namespace: dict = {}
    exec(compile(source, "<dragon.code>", "exec"), namespace)
    (new,) = [p for p in set(runs_root.iterdir()) - before if files.is_run_dir(p)]
    replayed, original = files.read_config(new), files.read_config(run_dir)
    for key in ("id", "created_at"):
        replayed.pop(key), original.pop(key)
    assert replayed == original
    return source


def test_code_reproduces_a_preference_run(runs_root, model_dir):
    run = prefer(_pairs(), str(model_dir), method="orpo", beta=0.5, runs_dir=runs_root,
                 args=dragon.TrainArgs(learning_rate=1e-4, epochs=1, batch_size=2))  # fmt: skip
    source = _round_trip(run.dir, runs_root)
    assert "dragon.prefer(" in source and 'method="orpo"' in source and "beta=0.5" in source
    assert "dragon.TrainArgs(epochs=1, learning_rate=0.0001, batch_size=2)" in source


def test_code_of_a_default_dpo_run_keeps_the_stage_defaults(runs_root, model_dir):
    run = prefer(_pairs(), str(model_dir), runs_dir=runs_root)
    source = _round_trip(run.dir, runs_root)
    assert 'method="dpo"' in source and "beta=0.1" in source


def test_code_reproduces_a_dpo_run_with_its_loss(runs_root, model_dir):
    run = prefer(_pairs(), str(model_dir), loss_type="robust", label_smoothing=0.1,
                 runs_dir=runs_root)  # fmt: skip
    assert run.config["method_args"] == {"beta": 0.1, "loss_type": "robust", "label_smoothing": 0.1}
    source = _round_trip(run.dir, runs_root)
    assert 'loss_type="robust",\n    label_smoothing=0.1,' in source


@pytest.mark.slow
def test_train_then_prefer_then_evaluate_through_the_launcher(tmp_path, monkeypatch):
    monkeypatch.delenv("DRAGONFARM_TRAINER_MODULE", raising=False)
    if (BUNDLED / "config.json").is_file():
        model = BUNDLED
    else:  # the repository does not have the bundled model yet
        monkeypatch.syspath_prepend(str(ROOT / "tests" / "trainers"))
        from trainer_fixtures import build_tiny_model

        model = build_tiny_model(tmp_path / "tiny-model")
    tickets = pd.read_csv(dragon.example_data()).head(30)
    fast = {"max_steps": 2, "batch_size": 2, "grad_accum": 1, "max_seq_len": 256,
            "extra": {"sample_max_new_tokens": 8}}  # fmt: skip
    hardware = dragon.Hardware(device="cpu")
    sft = dragon.train(
        dragon.dataset(tickets).map(prompt="{subject}\n\n{body}", response="reply"),
        str(model), args=dragon.TrainArgs(**fast), hardware=hardware, n_samples=1,
        runs_dir=tmp_path / "runs", wait=True,
    )  # fmt: skip
    tickets["plain"] = [" ".join(r.split()[2:40]) for r in tickets["reply"]]
    pairs = dragon.dataset(tickets).map_pairs(
        prompt="{subject}\n\n{body}", chosen="reply", rejected="plain"
    )
    run = prefer(pairs, sft, beta=0.1, args=dragon.TrainArgs(**fast), hardware=hardware,
                 n_samples=1, runs_dir=tmp_path / "runs", wait=True)  # fmt: skip
    assert run.status()["state"] == "succeeded"
    assert run.config["continued_from"] == str(sft.dir)
    progress = run.progress()
    assert {"pref_acc", "reward_margin", "eval_pref_acc", "eval_reward_margin"} <= set(progress)
    ev = evaluate(run, n_samples=1, metrics=["token_f1"])
    assert ev.eval_pairs == 2 and 0 <= ev.pref_accuracy <= 1 and not ev.recomputed
    assert list(ev.samples.columns[:4]) == ["prompt", "reference", "generated", "rejected"]
    assert set(ev.metrics) == {"token_f1"}
