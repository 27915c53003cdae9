"""End to end: a run trains, writes every file, cancels, resumes after kill -9, fails clearly.

Slow tests train the bundled model (the tiny fixture model until the repository has it) for a
few steps and read every file back from the run directory.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainer_fixtures import liger_installed

from dragonfarm_core.rundir import files
from dragonfarm_core.settings import SettingsError
from dragonfarm_core.trainers import sft
from dragonfarm_core.trainers.common import DataError

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["step", "epoch", "loss", "eval_loss", "lr", "grad_norm", "elapsed_s", "eta_s"]


def _train_rows(run_dir: Path) -> list[dict]:
    return [r for r in files.read_progress(run_dir) if r["loss"] is not None]


def _start_subprocess(run_dir: Path) -> subprocess.Popen:
    log = open(files.log_path(run_dir), "a", encoding="utf-8")  # noqa: SIM115 (child owns it)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "dragonfarm_core.trainers.sft", str(run_dir)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.slow
def test_run_writes_and_reads_back_every_file(make_run, model_dir, monkeypatch, capsys):
    phases = []
    write = sft.evaluation.write_eval_and_samples

    def watched(run_dir, *args):  # what a reader of status.json sees while samples are written
        phases.append((files.read_status(run_dir)["state"], files.read_status(run_dir)["phase"]))
        return write(run_dir, *args)

    monkeypatch.setattr(sft.evaluation, "write_eval_and_samples", watched)
    measure = sft.evaluation.eval_loss

    def slow_held_out(*args):  # a held-out measurement that takes at least 0.3 s
        time.sleep(0.3)
        return measure(*args)

    monkeypatch.setattr(sft.evaluation, "eval_loss", slow_held_out)
    run_dir = make_run(
        model_dir,
        n_train=40,
        n_eval=6,
        epochs=2,
        logging_steps=2,
        save_steps=4,
        max_seq_len=128,
        learning_rate=2e-3,
    )
    assert sft.main(run_dir) == "succeeded"

    status = files.read_status(run_dir)
    assert status["state"] == "succeeded" and status["pid"] == os.getpid()
    assert status["device"] == "cpu" and status["dtype"] in ("bfloat16", "float32")
    assert 0 < status["params_trainable"] < status["params_total"]
    assert status["step"] == status["total_steps"] == 10 and status["epoch"] == 2.0
    assert status["truncated_rows"] >= 0
    assert status["started_at"] <= status["heartbeat"] and status["finished_at"]
    # The process's peak RSS (what bench/preflight.py checks the estimate against): at least
    # what torch alone takes.
    assert 150 < status["peak_memory_mib"] < 20_000
    assert phases == [("running", files.FINISHING)] and status["phase"] is None
    metrics = status["metrics"]
    assert metrics["eval_loss"] > 0 and metrics["perplexity"] > 1 and metrics["train_loss"] > 0
    # The held-out measurements of steps 0, 3, 6 and 9 are timed apart: tokens/s is the steps'.
    assert 4 * 0.3 <= metrics["eval_runtime_s"] < metrics["train_runtime_s"]
    stepping = metrics["train_runtime_s"] - metrics["eval_runtime_s"]
    assert metrics["train_tokens_per_s"] == pytest.approx(
        metrics["train_tokens"] / stepping, rel=0.02
    )

    rows = files.read_progress(run_dir)
    assert all(list(r) == COLUMNS for r in rows)
    train_rows = _train_rows(run_dir)
    assert [r["step"] for r in train_rows] == [1, 2, 4, 6, 8, 10]
    assert train_rows[-1]["loss"] < train_rows[0]["loss"]
    assert all(r["lr"] is not None and r["grad_norm"] > 0 for r in train_rows)
    eval_rows = [r for r in rows if r["eval_loss"] is not None]
    # Step 0 is the untrained adapter (the base model's loss), then 4 times a run and the end.
    assert [r["step"] for r in eval_rows] == [0, 3, 6, 9, 10]
    assert eval_rows[-1]["eval_loss"] == pytest.approx(metrics["eval_loss"])
    assert eval_rows[0]["eval_loss"] > eval_rows[-1]["eval_loss"]

    evaluation = files.read_eval(run_dir)
    assert evaluation["eval_loss"] == pytest.approx(metrics["eval_loss"])
    assert evaluation["eval_tokens"] > 0 and evaluation["eval_rows"] == 6
    assert evaluation["start_eval_loss"] == eval_rows[0]["eval_loss"] == metrics["start_eval_loss"]
    # The log's last line reads like the Monitor's figures: rounded, not 0.9403712391853333.
    done = f"Done: train loss {metrics['train_loss']:.4f}, eval loss {metrics['eval_loss']:.4f}."
    assert done in capsys.readouterr().out.splitlines()
    samples = files.read_samples(run_dir)
    assert len(samples) == 3
    eval_data = files.read_jsonl(files.data_path(run_dir, "eval"))
    for sample, row in zip(samples, eval_data, strict=False):
        assert sample["prompt"] == row["messages"][-2]["content"]
        assert sample["reference"] == row["messages"][-1]["content"]
        assert isinstance(sample["generated"], str) and sample["split"] == "eval"
        assert isinstance(sample["before"], str)  # the reply before training (the Monitor's)

    assert [p.name for p in files.checkpoints(run_dir)] == ["checkpoint-4", "checkpoint-8"]
    adapter = files.adapter_dir(run_dir)
    assert (adapter / "adapter_model.safetensors").is_file()
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 8

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), adapter)
    assert loaded.peft_config["default"].r == 8


@pytest.mark.slow
def test_cancel_saves_then_resume_finishes(make_run, model_dir):
    run_dir = make_run(model_dir, n_train=24, n_eval=4, max_steps=4, save_steps=100)
    files.request_cancel(run_dir)
    assert sft.main(run_dir) == "cancelled"
    status = files.read_status(run_dir)
    assert status["state"] == "cancelled" and status["step"] == 1
    assert [p.name for p in files.checkpoints(run_dir)] == ["checkpoint-1"]
    assert (files.adapter_dir(run_dir) / "adapter_model.safetensors").is_file()
    assert not files.cancel_requested(run_dir)
    assert files.read_eval(run_dir) is None  # a cancelled run skips the final evaluation

    assert sft.main(run_dir) == "succeeded"
    assert files.read_status(run_dir)["step"] == 4
    assert [r["step"] for r in _train_rows(run_dir)] == [1, 2, 3, 4]


@pytest.mark.slow
def test_kill_9_then_resume_continues_the_same_run(make_run, model_dir):
    settings = {
        "n_train": 64,
        "n_eval": 4,
        "max_steps": 16,
        "save_steps": 3,
        "logging_steps": 1,
        "batch_size": 2,
        "grad_accum": 2,
        "epochs": 1,
    }
    reference = make_run(model_dir, name="reference", **settings)
    run_dir = make_run(model_dir, name="killed", **settings)
    proc = _start_subprocess(run_dir)
    try:
        deadline = time.monotonic() + 120
        while not files.checkpoint_dir(run_dir, 6).is_dir():
            assert proc.poll() is None, files.read_log_tail(run_dir)
            assert time.monotonic() < deadline, "no checkpoint-6 within 120 s"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    stopped_at = files.read_status(run_dir)["step"]
    assert files.read_status(run_dir)["state"] == "running"  # kill -9 leaves it to the launcher
    assert 6 <= stopped_at < 16

    assert _start_subprocess(run_dir).wait(timeout=300) == 0, files.read_log_tail(run_dir)
    assert "Resuming from checkpoint-" in "\n".join(files.read_log_tail(run_dir, 200))
    assert sft.main(reference) == "succeeded"

    status = files.read_status(run_dir)
    assert status["state"] == "succeeded" and status["step"] == status["total_steps"] == 16
    steps = [r["step"] for r in _train_rows(run_dir)]
    assert steps == list(range(1, 17))  # strictly increasing, no gap, no repeat
    # Same batches, same RNG: the resumed curve is the uninterrupted one.
    ours = [r["loss"] for r in _train_rows(run_dir)]
    theirs = [r["loss"] for r in _train_rows(reference)]
    assert ours == pytest.approx(theirs, rel=1e-3)
    elapsed = [r["elapsed_s"] for r in _train_rows(run_dir)]
    assert elapsed == sorted(elapsed)


@pytest.mark.slow
def test_without_held_out_rows_samples_come_from_training_rows(make_run, model_dir, capsys):
    run_dir = make_run(model_dir, n_train=12, n_eval=0, max_steps=2)
    assert sft.main(run_dir) == "succeeded"
    assert capsys.readouterr().out.splitlines()[-1].endswith(", no held-out rows.")
    assert files.read_eval(run_dir) == {
        "eval_loss": None,
        "perplexity": None,
        "eval_tokens": 0,
        "eval_rows": 0,
        "step": 2,
        "start_eval_loss": None,
    }
    assert all(r["eval_loss"] is None for r in files.read_progress(run_dir))
    samples = files.read_samples(run_dir)
    assert len(samples) == 3 and {s["split"] for s in samples} == {"train"}


def test_bad_data_fails_with_reason_and_log_tail(make_run, tiny_model_dir):
    run_dir = make_run(tiny_model_dir)
    with open(files.data_path(run_dir, "train"), "a", encoding="utf-8") as f:
        f.write('{"messages": [{"role": "user", "content": "no reply"}]}\n')
    with pytest.raises(DataError):
        sft.main(run_dir)
    status = files.read_status(run_dir)
    assert status["state"] == "failed" and status["reason"] == "data_error"
    assert "line 49" in status["error"] and "assistant turn" in status["error"]
    assert any("DataError" in line for line in status["log_tail"])


def test_unknown_extra_key_fails_before_loading(make_run, tmp_path):
    run_dir = make_run(tmp_path / "no-model-needed", extra={"use_kernels": True})
    with pytest.raises(SettingsError):
        sft.main(run_dir)
    status = files.read_status(run_dir)
    assert status["reason"] == "config_error" and "'use_kernels'" in status["error"]


def test_liger_kernels_off_a_gpu_fail_before_loading(make_run, tmp_path, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", liger_installed(True))
    run_dir = make_run(tmp_path / "no-model-needed", extra={"use_liger_kernel": True})
    with pytest.raises(SettingsError, match="needs an NVIDIA GPU"):
        sft.main(run_dir)
    status = files.read_status(run_dir)
    assert status["reason"] == "config_error" and "trains on cpu" in status["error"]


@pytest.mark.slow
def test_packing_trains_every_row_once_in_fewer_fuller_steps(make_run, model_dir, capsys):
    run_dir = make_run(model_dir, n_train=40, n_eval=6, batch_size=2, grad_accum=1,
                       max_seq_len=512, extra={"packing": True, "sample_max_new_tokens": 8})  # fmt: skip
    assert sft.main(run_dir) == "succeeded"
    status = files.read_status(run_dir)
    # 40 rows two to a step would be 20 steps; packed, several rows share a sequence.
    assert status["step"] == status["total_steps"] < 12
    tokenizer = sft.modeling.load_tokenizer(sft.load_config(run_dir).model)
    rows = sft.sft_data.load(run_dir, tokenizer, 512).train
    metrics = status["metrics"]
    assert metrics["train_tokens"] == sum(rows.lengths)  # one epoch: each row's tokens once
    assert metrics["train_padding"] < 0.1
    losses = [r["loss"] for r in _train_rows(run_dir)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    held_out = [r["eval_loss"] for r in files.read_progress(run_dir) if r["eval_loss"] is not None]
    assert held_out[-1] < held_out[0]
    packed = (status["total_steps"] - 1) * 2 + 1, status["total_steps"] * 2  # sequences
    said = capsys.readouterr().out
    assert any(f"40 rows packed into {n}, {status['total_steps']} steps" in said for n in packed)


@pytest.mark.slow
def test_a_loss_that_becomes_nan_stops_the_run_with_that_reason(make_run, model_dir):
    # float16 weights and the largest learning rate allowed overflow within a few steps.
    run_dir = make_run(model_dir, n_train=40, n_eval=4, epochs=3, batch_size=4, grad_accum=1,
                       max_seq_len=128, learning_rate=1.0)  # fmt: skip
    config = files.read_config(run_dir)
    files.write_config(run_dir, {**config, "hardware": {"device": "cpu", "dtype": "float16"}})
    with pytest.raises(Exception):  # noqa: B017, PT011 (the entry point records it)
        sft.main(run_dir)
    status = files.read_status(run_dir)
    assert status["state"] == "failed" and status["reason"] == "nan_loss", status.get("error")
    assert "the run stopped there rather than train on" in status["error"]
    assert status["step"] < status["total_steps"]  # it stopped early


@pytest.mark.slow
def test_a_batch_taken_in_row_chunks_trains_as_the_whole_batch(make_run, model_dir, monkeypatch):
    # The same run twice: batches whole, then (thresholds lowered) each batch of 4 rows in
    # 1-row chunks, each through its own forward and backward.
    def trained(name: str) -> tuple[list[float], list[int]]:
        seen = []
        label_loss = sft.modeling.label_loss

        def counting(model, batch):
            seen.append(batch["input_ids"].shape[0])
            return label_loss(model, batch)

        with monkeypatch.context() as m:
            m.setattr(sft.modeling, "label_loss", counting)
            run_dir = make_run(model_dir, name=name, n_train=24, n_eval=4, grad_accum=2,
                               max_seq_len=128)  # fmt: skip
            assert sft.main(run_dir) == "succeeded"
        return [r["loss"] for r in _train_rows(run_dir)], seen

    whole, whole_rows = trained("whole")
    monkeypatch.setattr(sft.memory_estimate, "CHUNK_KEPT_MIB", 1e-6)
    monkeypatch.setattr(sft.memory_estimate, "MIN_CHUNK_TOKENS", 1)
    chunked, chunked_rows = trained("chunked")
    assert set(whole_rows) == {4} and set(chunked_rows) == {1}
    assert len(chunked_rows) == 4 * len(whole_rows)
    assert chunked == pytest.approx(whole, rel=1e-4)
