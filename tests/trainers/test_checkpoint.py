"""Checkpoints: complete or invisible, the last two kept, everything restored on load."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from dragonfarm_core.rundir import files
from dragonfarm_core.settings import Lora, SettingsError, TrainArgs
from dragonfarm_core.trainers import checkpoint, modeling, optim
from dragonfarm_core.trainers.common import Placement, TrainState
from dragonfarm_core.trainers.config import ExtraArgs, ModelSpec

CONFIG = {"model": {"base": "tiny"}, "lora": {"r": 4}, "args": {"seed": 1}}


def _trainable(tiny_model_dir):
    spec = ModelSpec(name="tiny", base=str(tiny_model_dir))
    model = modeling.load_model(spec, Placement(torch.device("cpu"), torch.float32), False)
    model = modeling.add_lora(model, Lora(r=4, dropout=0.0), 0, False, False)
    opt = optim.build_optimization(
        model, TrainArgs(learning_rate=1e-2), ExtraArgs(), total_steps=20, dtype=torch.float32
    )
    return model, opt


def _step(model, opt):
    ids = torch.arange(1, 17).unsqueeze(0)
    opt.backward(model(input_ids=ids, labels=ids).loss)
    opt.step()


def _adapter(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_save_then_load_restores_weights_optimizer_schedule_and_rng(tmp_path, tiny_model_dir):
    model, opt = _trainable(tiny_model_dir)
    for _ in range(3):
        _step(model, opt)
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    state = TrainState(step=3, elapsed_s=1.5, loss_sum=6.0, loss_steps=3)
    path = checkpoint.save_checkpoint(tmp_path, model, opt, state, CONFIG)
    assert path == files.checkpoint_dir(tmp_path, 3)
    assert (path / "adapter" / "adapter_model.safetensors").is_file()
    saved, draws = _adapter(model), (random.random(), np.random.rand(), torch.rand(1))
    _step(model, opt)  # move on, then come back

    fresh, opt2 = _trainable(tiny_model_dir)
    assert checkpoint.load_checkpoint(path, fresh, opt2, CONFIG) == state
    for name, value in _adapter(fresh).items():
        assert torch.equal(value, saved[name]), name
    assert opt2.scheduler.last_epoch == 3
    assert opt2.lr == pytest.approx(1e-2 * optim.lr_factor(3, 1, 20, "linear"))
    assert opt2.optimizer.state_dict()["state"][0]["step"] == 3
    assert (random.random(), np.random.rand(), torch.rand(1)) == draws


def test_keeps_last_two_and_ignores_half_written(tmp_path, tiny_model_dir):
    model, opt = _trainable(tiny_model_dir)
    for step in (2, 4, 6):
        checkpoint.save_checkpoint(tmp_path, model, opt, TrainState(step=step), CONFIG)
    assert [p.name for p in files.checkpoints(tmp_path)] == ["checkpoint-4", "checkpoint-6"]
    killed = files.checkpoint_temp_dir(tmp_path, 8)  # a save cut short by kill -9
    (killed / "adapter").mkdir(parents=True)
    assert [p.name for p in files.checkpoints(tmp_path)] == ["checkpoint-4", "checkpoint-6"]
    assert checkpoint.latest_checkpoint(tmp_path) == files.checkpoint_dir(tmp_path, 6)
    assert not killed.exists()


def test_refuses_a_checkpoint_from_other_settings(tmp_path, tiny_model_dir):
    model, opt = _trainable(tiny_model_dir)
    path = checkpoint.save_checkpoint(tmp_path, model, opt, TrainState(step=1), CONFIG)
    changed = {**CONFIG, "args": {"seed": 2}}
    with pytest.raises(SettingsError, match="different args settings"):
        checkpoint.load_checkpoint(path, model, opt, changed)


def test_adapter_replaced_atomically(tmp_path, tiny_model_dir):
    model, *_ = _trainable(tiny_model_dir)
    first = checkpoint.save_adapter(tmp_path, model)
    assert (first / "adapter_model.safetensors").is_file()
    assert (first / "adapter_config.json").is_file()
    checkpoint.save_adapter(tmp_path, model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]
