"""A failed run's triage: its kind in words and the fixes, each applied by `retry` as a new run
with the change next to the old one (or, for an interrupted run, a resume). Runs use the fake
trainer (tests/fake_trainer.py); the trainer's own NaN stop is tested in tests/trainers."""

from __future__ import annotations

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files
from dragonfarm_core.training.triage import Fix, retry, triage


def failed_run(runs_root, sft_data, model_dir, monkeypatch, **args):
    monkeypatch.setenv("FAKE_TRAINER_FAIL_AT", "3")
    run = dragon.train(sft_data, str(model_dir), runs_dir=runs_root,
                       args=dragon.TrainArgs(**args), wait=False)  # fmt: skip
    with pytest.raises(dragon.RunFailedError):
        run.wait(timeout=30)
    monkeypatch.delenv("FAKE_TRAINER_FAIL_AT")
    return run


@pytest.mark.slow
def test_a_run_that_did_not_fail_has_no_triage(runs_root, sft_data, model_dir):
    run = dragon.train(sft_data, str(model_dir), runs_dir=runs_root, wait=True)
    assert triage(run) is None


@pytest.mark.slow
def test_a_failed_run_with_a_checkpoint_is_offered_a_resume_that_finishes(
    runs_root, sft_data, model_dir, monkeypatch
):
    run = failed_run(runs_root, sft_data, model_dir, monkeypatch)
    found = triage(run)
    assert found is not None and found.kind == "error"
    assert [f.action for f in found.fixes] == ["resume"]
    resumed = retry(run, found.fixes[0], wait=True)
    assert resumed.dir == run.dir and resumed.status()["state"] == "succeeded"


@pytest.mark.slow
def test_out_of_memory_offers_smaller_batches_checkpointing_and_shorter_rows(
    runs_root, sft_data, model_dir, monkeypatch
):
    run = failed_run(runs_root, sft_data, model_dir, monkeypatch, batch_size=4, grad_accum=2,
                     max_seq_len=512)  # fmt: skip
    files.update_status(run.dir, reason="out_of_memory", error="CUDA out of memory.")
    found = triage(run)
    assert found is not None and found.kind == "out_of_memory"
    assert "ran out of memory" in found.explanation
    labels = [f.label for f in found.fixes]
    assert labels[:3] == ["Batch size 2, gradient accumulation 4", "Gradient checkpointing on",
                          "Max sequence length 256"]  # fmt: skip
    new = retry(run, found.fixes[0], wait=True)
    assert new.dir != run.dir and new.dir.parent == run.dir.parent
    args = new.config["args"]
    assert (args["batch_size"], args["grad_accum"], args["max_seq_len"]) == (2, 4, 512)
    assert new.status()["state"] == "succeeded"
    assert run.status()["state"] == "failed"  # the old run is left as it was


@pytest.mark.slow
def test_a_nan_loss_offers_a_tenth_of_the_learning_rate_and_float32(
    runs_root, sft_data, model_dir, monkeypatch
):
    run = failed_run(runs_root, sft_data, model_dir, monkeypatch, learning_rate=5e-3)
    files.update_status(run.dir, reason="nan_loss", dtype="bfloat16",
                        error="NonFiniteLoss: The training loss became nan at step 3")  # fmt: skip
    found = triage(run)
    assert found is not None and found.kind == "nan_loss"
    assert [f.label for f in found.fixes] == ["Learning rate 0.0005", "float32 weights"]
    new = retry(run, found.fixes[1], wait=True)
    assert new.config["hardware"]["dtype"] == "float32"


@pytest.mark.slow
def test_errors_the_trainer_cannot_tell_apart_are_read_from_the_error_text(
    runs_root, sft_data, model_dir, monkeypatch
):
    run = failed_run(runs_root, sft_data, model_dir, monkeypatch)
    cases = {
        "ValueError: Cannot use chat template functions because tokenizer.chat_template is not "
        "set": "template_error",
        "ModuleNotFoundError: No module named 'bitsandbytes'": "missing_dependency",
    }
    for error, kind in cases.items():
        files.update_status(run.dir, reason="error", error=error)
        found = triage(run)
        assert found is not None and found.kind == kind, error
    with pytest.raises(ValueError, match="args, lora or hardware"):
        retry(run, Fix("bad", {"method_args": {"beta": 1}}))
