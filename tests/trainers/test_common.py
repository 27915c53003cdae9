"""Hardware choice, failure reasons and the status/progress writer."""

from __future__ import annotations

import errno
import json
import os
import time

import pytest
import torch

from dragonfarm_core import memory_estimate
from dragonfarm_core.rundir import files
from dragonfarm_core.settings import Hardware, SettingsError
from dragonfarm_core.trainers import common, placement
from dragonfarm_core.trainers.common import DataError, ModelLoadError, RunReporter


def test_cpu_placement():
    auto = placement.resolve_placement(Hardware(device="cpu"))
    assert auto.device.type == "cpu"
    assert auto.dtype == torch.float32
    assert (
        placement.resolve_placement(Hardware(device="cpu", dtype="float32")).dtype_name == "float32"
    )


def write_shape(folder, hidden: int, layers: int, vocab: int):
    folder.mkdir()
    config = {"hidden_size": hidden, "intermediate_size": 3 * hidden, "num_hidden_layers": layers,
              "num_attention_heads": hidden // 64, "vocab_size": vocab}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("has_bf16", [True, False])
def test_on_a_cpu_a_large_model_trains_on_bf16_weights_where_the_cpu_has_it(
    monkeypatch, tmp_path, has_bf16
):
    monkeypatch.setattr(memory_estimate, "cpu_has_bf16", lambda: has_bf16)
    monkeypatch.setenv(placement.ONEDNN_CACHE[0], "")  # so that monkeypatch restores it
    monkeypatch.delenv(placement.ONEDNN_CACHE[0])
    large = write_shape(tmp_path / "large", 576, 30, 49152)  # 135M parameters
    small = write_shape(tmp_path / "small", 256, 6, 4096)  # 5M
    cpu = Hardware(device="cpu")
    assert placement.resolve_placement(cpu, small).dtype == torch.float32
    assert placement.resolve_placement(cpu, tmp_path).dtype == torch.float32  # no config.json
    assert placement.ONEDNN_CACHE[0] not in os.environ
    chosen = placement.resolve_placement(cpu, large).dtype
    assert chosen == (torch.bfloat16 if has_bf16 else torch.float32)
    # bf16 on a CPU caps oneDNN's kernel cache (its memory grew with every batch width).
    assert (os.environ.get(placement.ONEDNN_CACHE[0]) == "16") == has_bf16
    explicit = Hardware(device="cpu", dtype="float32")
    assert placement.resolve_placement(explicit, large).dtype == torch.float32


def test_a_users_own_onednn_cache_setting_is_kept(monkeypatch):
    monkeypatch.setenv(placement.ONEDNN_CACHE[0], "256")
    placement.resolve_placement(Hardware(device="cpu", dtype="bfloat16"))
    assert os.environ[placement.ONEDNN_CACHE[0]] == "256"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(SettingsError, match="no CUDA GPU"):
        placement.resolve_placement(Hardware(device="cuda"))
    with pytest.raises(SettingsError, match="load_in_4bit needs an NVIDIA GPU"):
        placement.resolve_placement(Hardware(device="auto", load_in_4bit=True))


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), "out_of_memory"),
        (
            RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB"),
            "out_of_memory",
        ),
        (MemoryError(), "out_of_memory"),
        (DataError("data/train.jsonl, line 3 is not valid JSON"), "data_error"),
        (ModelLoadError("Could not load x"), "model_error"),
        (SettingsError("TrainArgs.extra has unknown key(s)"), "config_error"),
        (common.NonFiniteLoss("The training loss became nan"), "nan_loss"),
        (ModuleNotFoundError("No module named 'bitsandbytes'"), "missing_dependency"),
        (OSError(errno.ENOSPC, "No space left on device"), "disk_full"),
        (  # torch.save's wording
            RuntimeError(
                "[enforce fail at inline_container.cc:595] . PytorchStreamWriter failed "
                "writing file data/0: file write failed, No space left on device"
            ),
            "disk_full",
        ),
        (ValueError("something else"), "error"),
    ],
)
def test_failure_reasons(exc, reason):
    assert common.failure_reason(exc) == reason


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), float("-inf")])
def test_a_loss_that_is_not_finite_stops_the_run_before_it_is_counted(loss):
    state = common.TrainState(step=7)
    state.record(1.5, 10, 12)
    with pytest.raises(common.NonFiniteLoss, match=r"became .* at step 7; the run stopped"):
        state.record(loss, 10, 12)
    assert (state.loss_steps, state.loss_sum) == (1, 1.5)


def test_reporter_writes_running_then_heartbeats(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "HEARTBEAT_S", 0.05)
    files.write_status(
        tmp_path,
        {"state": "queued", "queued_at": "2026-01-01T00:00:00+00:00", "reason": "interrupted"},
    )
    reporter = RunReporter(tmp_path)
    reporter.start()
    status = files.read_status(tmp_path)
    assert status["state"] == "running" and status["reason"] is None
    assert status["queued_at"] == "2026-01-01T00:00:00+00:00"  # the launcher's fields stay
    writes = []
    real = files.write_status
    monkeypatch.setattr(files, "write_status", lambda d, s: (writes.append(1), real(d, s)))
    time.sleep(0.4)
    assert len(writes) >= 3  # the heartbeat thread rewrote status.json on its own
    reporter.progress(step=1, loss=float("nan"))
    reporter.finish("succeeded", metrics={"eval_loss": 1.5})
    assert files.read_progress(tmp_path) == [dict.fromkeys(common.PROGRESS_COLUMNS) | {"step": 1}]
    assert files.read_status(tmp_path)["metrics"] == {"eval_loss": 1.5}
    count = len(writes)
    time.sleep(0.2)
    assert len(writes) == count  # the heartbeat stopped


def test_reported_run_records_failure_with_traceback_in_log_tail(tmp_path):
    files.log_path(tmp_path).write_text("loading model\nstep 1\n", encoding="utf-8")
    with pytest.raises(DataError), common.reported_run(tmp_path):
        raise DataError("data/train.jsonl, line 3 is not valid JSON")
    status = files.read_status(tmp_path)
    assert status["state"] == "failed" and status["reason"] == "data_error"
    assert status["error"] == "DataError: data/train.jsonl, line 3 is not valid JSON"
    assert status["log_tail"][:2] == ["loading model", "step 1"]
    assert any("Traceback" in line for line in status["log_tail"])
    assert status["finished_at"]


def test_cancel_request_and_sigterm(tmp_path):
    reporter = RunReporter(tmp_path)
    assert not reporter.cancel_requested()
    files.request_cancel(tmp_path)
    assert reporter.cancel_requested()
    reporter.finish("cancelled")
    assert not files.cancel_requested(tmp_path)  # a resume starts without the old request
    reporter._on_sigterm(15, None)
    assert reporter.cancel_requested()
