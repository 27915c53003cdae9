"""Checkpoints keep the settings they were trained with; the final adapter is replaced whole.
(Saving, pruning and the COMPLETE marker: test_checkpoint_marker.py; resuming a real run:
the cancel-then-resume tests of each trainer.)"""

from __future__ import annotations

import pytest
import torch

from dragonfarm_core.rundir.train_config import ModelSpec
from dragonfarm_core.settings import Lora, SettingsError
from dragonfarm_core.trainers import checkpoint, modeling
from dragonfarm_core.trainers.common import TrainState
from dragonfarm_core.trainers.placement import Placement

CONFIG = {"model": {"base": "tiny"}, "lora": {"r": 4}, "args": {"seed": 1}}


def test_the_state_comes_back_and_other_settings_are_refused(tmp_path):
    state = TrainState(step=3, elapsed_s=1.5, loss_sum=6.0, loss_steps=3, tokens=90, slots=96)
    checkpoint.write_state(tmp_path / "state.json", state, CONFIG)
    assert checkpoint.read_state(tmp_path / "state.json", CONFIG) == state
    changed = {**CONFIG, "args": {"seed": 2}}
    with pytest.raises(SettingsError, match="different args settings"):
        checkpoint.read_state(tmp_path / "state.json", changed)


def test_adapter_replaced_atomically(tmp_path, tiny_model_dir):
    spec = ModelSpec(name="tiny", base=str(tiny_model_dir))
    model = modeling.load_model(spec, Placement(torch.device("cpu"), torch.float32), False)
    model = modeling.add_lora(model, Lora(r=4, dropout=0.0), 0, False, False)
    first = checkpoint.save_adapter(tmp_path, model)
    assert (first / "adapter_model.safetensors").is_file()
    assert (first / "adapter_config.json").is_file()
    checkpoint.save_adapter(tmp_path, model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]
