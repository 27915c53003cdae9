"""TrainArgs.extra's TRL options for SFT: `report_to` (trackers, each an optional install) and
`neftune_noise_alpha`. Refusals are checked where the API checks a spec, before anything is
launched; a real SFT run reports to TensorBoard (the tracker that works offline) in the run."""

from __future__ import annotations

import json

import pytest

from dragonfarm_core.rundir import train_config as config
from dragonfarm_core.settings import SettingsError
from dragonfarm_core.trainers import sft


def test_trackers_and_noise_are_checked_before_a_run_starts(monkeypatch):
    assert config.extra_args({"report_to": "tensorboard"}).trackers == ["tensorboard"]
    assert config.extra_args({"report_to": "none"}).trackers == []
    with pytest.raises(SettingsError, match="the trackers are tensorboard, trackio, wandb"):
        config.extra_args({"report_to": ["tensorboard", "comet"]})
    monkeypatch.setitem(config.TRACKERS, "wandb", ("no_such_module_for_this_test",))
    with pytest.raises(SettingsError, match="wandb, which is not installed here: pip install"):
        config.extra_args({"report_to": "wandb"})
    with pytest.raises(SettingsError, match="a tracker's name or a list"):
        config.extra_args({"report_to": 3})
    with pytest.raises(SettingsError, match="above 0"):
        config.extra_args({"neftune_noise_alpha": -1})
    for key, value in (("report_to", "tensorboard"), ("neftune_noise_alpha", 5)):
        with pytest.raises(SettingsError, match="works for sft runs for now: dpo"):
            config.extra_args({key: value}, "dpo")


@pytest.mark.slow
def test_an_sft_run_reports_to_tensorboard_in_its_folder(make_run, tiny_model_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = make_run(
        tiny_model_dir, n_train=16, n_eval=4, logging_steps=1,
        extra={"sample_max_new_tokens": 8, "report_to": "tensorboard", "neftune_noise_alpha": 5},
    )  # fmt: skip
    assert sft.main(run_dir) == "succeeded"
    logs = list((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    assert logs, "no TensorBoard event file in the run"
    events = EventAccumulator(str(logs[0].parent))
    events.Reload()
    losses = [e.value for e in events.Scalars("train/loss")]
    assert len(losses) == 2  # 16 rows, batch 4 x 2: two steps, each logged
    assert all(loss > 0 for loss in losses)
    # The settings TensorBoard records are the ones the trainer ran with: NEFTune included.
    settings = json.loads(events.Tensors("args/text_summary")[0].tensor_proto.string_val[0])
    assert settings["neftune_noise_alpha"] == 5 and settings["report_to"] == ["tensorboard"]
