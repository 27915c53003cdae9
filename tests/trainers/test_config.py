"""config.json as the trainer reads it, and the extra keys it understands."""

from __future__ import annotations

import importlib.util

import pytest
from trainer_fixtures import liger_installed

from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.train_config import ExtraArgs, extra_args, load_config
from dragonfarm_core.settings import SettingsError


def test_extra_defaults_and_values():
    assert extra_args({}) == ExtraArgs()
    extra = extra_args({"lr_scheduler_type": "cosine", "eval_steps": 10, "adam_beta2": 0.95})
    assert extra.lr_scheduler_type == "cosine" and extra.eval_steps == 10
    assert extra.adam_beta2 == 0.95


def test_unknown_extra_key_is_named_with_the_known_ones():
    with pytest.raises(SettingsError, match=r"unknown key\(s\) 'optim', 'use_liger'.*eval_steps"):
        extra_args({"use_liger": True, "optim": "adamw", "eval_steps": 5})


@pytest.mark.parametrize(
    "extra",
    [
        {"lr_scheduler_type": "polynomial"},
        {"eval_steps": 0},
        {"adam_beta1": 1.5},
        {"max_grad_norm": -1},
        {"sample_max_new_tokens": 2.5},
        {"packing": "yes"},
        {"padding_free": 1},
        {"use_liger_kernel": "true"},
    ],
)
def test_bad_extra_values(extra):
    with pytest.raises(SettingsError, match=next(iter(extra))):
        extra_args(extra)


def test_packing_is_sft_only():
    assert extra_args({"packing": True}, "sft").packing is True
    with pytest.raises(SettingsError, match=r"extra\['packing'\] works for sft runs for now"):
        extra_args({"packing": True}, "dpo")
    assert extra_args({"packing": False}, "grpo").packing is False  # off is off anywhere


@pytest.mark.parametrize("key", ["padding_free", "use_liger_kernel"])
def test_gpu_speed_ups_are_sft_only_and_off_by_default(key, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", liger_installed(True))
    assert getattr(ExtraArgs(), key) is False  # not measured to pay yet (docs/BENCHMARKS.md)
    assert getattr(extra_args({key: True}, "sft"), key) is True
    with pytest.raises(SettingsError, match=rf"extra\['{key}'\] works for sft runs for now"):
        extra_args({key: True}, "grpo")


def test_liger_kernel_without_the_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", liger_installed(False))
    with pytest.raises(SettingsError, match="pip install liger-kernel"):
        extra_args({"use_liger_kernel": True}, "sft")


def test_load_config(make_run, tiny_model_dir):
    run_dir = make_run(tiny_model_dir, max_steps=3, extra={"eval_steps": 2})
    config = load_config(run_dir)
    assert config.args.max_steps == 3 and config.extra.eval_steps == 2
    assert config.model.base == str(tiny_model_dir) and config.model.adapters == ()
    assert config.lora.r == 8 and config.n_samples == 3


def test_load_config_refuses_unknown_args_key(make_run, tiny_model_dir):
    run_dir = make_run(tiny_model_dir, warmup_steps=10)  # not a TrainArgs field: lands in extra
    with pytest.raises(SettingsError, match="'warmup_steps'"):
        load_config(run_dir)


def test_load_config_without_model_block(tmp_path):
    files.write_config(tmp_path, {"schema": 1, "method": "sft"})
    with pytest.raises(SettingsError, match="no 'model' field"):
        load_config(tmp_path)
