"""ORPO: the odds-ratio loss by hand, its score on a model, and runs from a base model and
from a finished SFT run (slow: the bundled model, or the fixture model until it exists)."""

from __future__ import annotations

import math

import pytest
import torch
from test_dpo import _read_back, pairs_dataset, sft_dataset, support_pairs, write_run

from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import Run
from dragonfarm_core.rundir.train_config import ModelSpec
from dragonfarm_core.settings import Lora
from dragonfarm_core.trainers import modeling, orpo, pref_data, sft
from dragonfarm_core.trainers.placement import Placement


def test_orpo_loss_matches_a_hand_computation():
    chosen = torch.tensor([math.log(0.5)])  # p = 0.5: odds 1
    rejected = torch.tensor([math.log(0.2)])  # p = 0.2: odds 0.25
    scores = orpo.orpo_loss(chosen, rejected, beta=0.1)
    # log odds ratio = log(1 / 0.25) = log 4; log sigmoid(log 4) = log(4 / 5)
    expected = -math.log(0.5) - 0.1 * math.log(0.8)
    assert float(scores.loss) == pytest.approx(expected, rel=1e-6)
    assert float(scores.chosen) == pytest.approx(0.1 * math.log(0.5))
    assert float(scores.rejected) == pytest.approx(0.1 * math.log(0.2))
    assert scores.correct().tolist() == [1.0]


def test_orpo_penalty_falls_as_the_chosen_reply_gets_likelier():
    rejected = torch.tensor([math.log(0.3)] * 3)
    chosen = torch.tensor([math.log(0.2), math.log(0.3), math.log(0.6)])
    scores = orpo.orpo_loss(chosen, rejected, beta=1.0)
    penalty = scores.loss - (-chosen)  # the loss minus its supervised part
    assert penalty[1] == pytest.approx(math.log(2))  # equal odds: -log sigmoid(0)
    assert penalty[0] > penalty[1] > penalty[2] > 0
    assert scores.correct().tolist() == [0.0, 0.0, 1.0]  # equal odds: not a win


def test_log1m_exp_is_accurate_near_zero_and_finite_at_zero():
    x = torch.tensor([-5.0, -1e-3, -1e-5], dtype=torch.float32)
    expected = [math.log(-math.expm1(v)) for v in x.tolist()]
    assert orpo.log1m_exp(x).tolist() == pytest.approx(expected, rel=1e-4)
    assert torch.isfinite(orpo.log1m_exp(torch.tensor([0.0]))).all()


def test_orpo_score_uses_mean_token_logps_without_a_reference(tiny_model_dir):
    spec = ModelSpec(name="tiny", base=str(tiny_model_dir))
    tokenizer = modeling.load_tokenizer(spec)
    cpu32 = Placement(torch.device("cpu"), torch.float32)
    model = modeling.add_lora(modeling.load_model(spec, cpu32, False), Lora(r=4, dropout=0.0),
                              seed=0, gradient_checkpointing=False, quantized=False)  # fmt: skip
    data = pref_data.encode_pairs(tokenizer, support_pairs(3), max_len=4096)
    batch = data.batch([0, 1, 2], tokenizer.pad_token_id)
    with torch.no_grad():
        sums, counts = pref_data.reply_logps(model, batch)
        scores = orpo.orpo_score(model, batch, n=3, beta=0.1)
    mean = sums / counts
    assert torch.allclose(scores.chosen, 0.1 * mean[:3]) and torch.allclose(
        scores.rejected, 0.1 * mean[3:]
    )
    assert torch.allclose(scores.loss, orpo.orpo_loss(mean[:3], mean[3:], 0.1).loss)
    assert (scores.loss > -mean[:3]).all()  # the odds-ratio penalty is positive


@pytest.mark.slow
def test_orpo_run_from_a_base_model_writes_every_file(tmp_path, model_dir):
    run_dir = write_run("orpo", pairs_dataset(30), str(model_dir), tmp_path / "orpo",
                        {"beta": 0.1}, max_steps=6, learning_rate=3e-3)  # fmt: skip
    config = files.read_config(run_dir)
    assert config["continued_from"] is None and config["model"]["adapters"] == []
    assert orpo.main(run_dir) == "succeeded"
    got = _read_back(run_dir, n_eval=6)
    assert got["eval"]["method"] == "orpo" and got["eval"]["eval_loss"] > 0
    losses = [r["loss"] for r in got["train_rows"]]
    assert losses[-1] < losses[0]  # the supervised part alone moves it down


@pytest.mark.slow
def test_orpo_continues_from_an_sft_run(tmp_path, model_dir):
    parent = write_run("sft", sft_dataset(24), str(model_dir), tmp_path / "sft", max_steps=2)
    assert sft.main(parent) == "succeeded"
    run_dir = write_run("orpo", pairs_dataset(20), Run(parent), tmp_path / "orpo",
                        {"beta": 0.5}, max_steps=3, learning_rate=2e-3)  # fmt: skip
    config = files.read_config(run_dir)
    assert config["continued_from"] == str(parent)
    assert config["model"]["adapters"] == [str(files.adapter_dir(parent))]
    assert orpo.main(run_dir) == "succeeded"
    got = _read_back(run_dir, n_eval=4)
    assert got["eval"]["beta"] == 0.5 and len(got["train_rows"]) == 3
