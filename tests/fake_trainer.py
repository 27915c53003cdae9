"""A stand-in trainer for the run-lifecycle tests: `main(run_dir)` behaves like a real trainer
(status, progress rows, cancel with a checkpoint, resume, adapter, final state) in milliseconds
and without torch.

Selected with DRAGONFARM_TRAINER_MODULE=fake_trainer and tests/ on PYTHONPATH. Knobs:
  FAKE_TRAINER_STEPS            optimizer steps (default 6)
  FAKE_TRAINER_STEP_S           seconds per step (default 0.01)
  FAKE_TRAINER_SAVE_EVERY       checkpoint every this many steps (default 2)
  FAKE_TRAINER_FAIL_AT          raise RuntimeError at this step (the entry point's catch reports it)
  FAKE_TRAINER_DISK_FULL_AT     at this step, save a checkpoint onto /dev/full (a real ENOSPC)
  FAKE_TRAINER_IGNORE_CANCEL=1  never look at cancel.request (exercises the kill fallback)
  FAKE_TRAINER_IGNORE_TERM=1    also ignore SIGTERM (only SIGKILL stops it)
  FAKE_TRAINER_NO_FINAL=1       return at once without writing a final state
  FAKE_TRAINER_EVAL=1           log a held-out loss every other step and at the end, a function
                                of the run's learning rate and LoRA rank (best at lr 3e-4, r 16)
"""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path

from dragonfarm_core.rundir import files


def _knob(name: str, default: float) -> float:
    return float(os.environ.get(f"FAKE_TRAINER_{name}", default))


def _save_checkpoint(run_dir: Path, step: int) -> None:
    final = files.checkpoint_dir(run_dir, step)
    if final.is_dir() or step == 0:  # saved at this step already, or nothing to save
        return
    tmp = final.with_name(f".tmp-{final.name}")
    tmp.mkdir(parents=True, exist_ok=True)
    files.write_json(tmp / "trainer_state.json", {"step": step})
    files.mark_checkpoint_complete(tmp)
    os.replace(tmp, final)  # visible only when complete, like the real trainer's
    for old in files.checkpoints(run_dir)[:-2]:
        files.remove_checkpoint(old)


def _start_step(run_dir: Path) -> int:
    done = files.checkpoints(run_dir)
    if not done:
        return 0
    step = files.read_json(done[-1] / "trainer_state.json")["step"]
    kept = [r for r in files.read_progress(run_dir) if r.get("step", 0) <= step]
    files.write_progress(run_dir, kept)
    print(f"Resuming from {done[-1].name}", flush=True)
    return step


def held_out_loss(config: dict, step: int, steps: int) -> float:
    """A made-up held-out loss that falls with the steps towards a floor set by the settings:
    the further the learning rate from 3e-4 (in decades) and the smaller the rank, the higher."""
    lr, r = config["args"]["learning_rate"], config["lora"]["r"]
    floor = 1.0 + abs(math.log10(lr / 3e-4)) + 0.1 * math.log2(16 / r)
    return round(floor * (1 + 1.0 / step), 6) if step else round(floor * 3, 6)


def main(run_dir: str) -> None:
    run = Path(run_dir)
    config = files.read_config(run)
    steps, step_s = int(_knob("STEPS", 6)), _knob("STEP_S", 0.01)
    save_every, fail_at = int(_knob("SAVE_EVERY", 2)), int(_knob("FAIL_AT", 0))
    disk_full_at = int(_knob("DISK_FULL_AT", 0))
    ignore_cancel = os.environ.get("FAKE_TRAINER_IGNORE_CANCEL") == "1"
    evaluating = os.environ.get("FAKE_TRAINER_EVAL") == "1"
    if os.environ.get("FAKE_TRAINER_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.environ.get("FAKE_TRAINER_NO_FINAL") == "1":
        return
    start = _start_step(run)
    files.update_status(
        run,
        state="running",
        device="cpu",
        dtype="float32",
        step=start,
        total_steps=steps,
        params_trainable=1000,
        params_total=100000,
        heartbeat=files.now_iso(),
    )
    print(f"fake training {config['id']}: {steps} steps", flush=True)
    began, loss = time.monotonic(), None
    for step in range(start + 1, steps + 1):
        if not ignore_cancel and files.cancel_requested(run):
            _save_checkpoint(run, step - 1)
            files.clear_cancel(run)
            files.update_status(run, state="cancelled", finished_at=files.now_iso())
            print(f"cancelled after step {step - 1}", flush=True)
            return
        time.sleep(step_s)
        if step == fail_at:
            print("about to fail", flush=True)
            raise RuntimeError(f"fake failure at step {step}")
        if step == disk_full_at:  # the kernel answers every write to /dev/full with ENOSPC
            with open("/dev/full", "wb", buffering=0) as weights:
                weights.write(b"fake weights")
        loss = 2.0 / step
        held_out = held_out_loss(config, step, steps) if evaluating and step % 2 == 0 else None
        files.append_progress(
            run,
            {
                "step": step,
                "epoch": step / steps,
                "loss": loss,
                "eval_loss": held_out,
                "lr": 1e-4,
                "grad_norm": 1.0,
                "elapsed_s": time.monotonic() - began,
                "eta_s": (steps - step) * step_s,
                "reward": 0.5,
            },
        )
        files.update_status(run, step=step, epoch=step / steps, heartbeat=files.now_iso())
        if step % save_every == 0:
            _save_checkpoint(run, step)
        print(f"step {step} loss {loss:.3f}", flush=True)
    adapter = files.adapter_dir(run)
    adapter.mkdir(exist_ok=True)
    files.write_json(
        adapter / "adapter_config.json", {"fake": True, "base": config["model"]["base"]}
    )
    (adapter / "adapter_model.safetensors").write_bytes(b"fake adapter")
    # The log's last line comes before the terminal state, as with the real trainer: a reader
    # that sees "succeeded" can rely on the log being complete.
    print("done", flush=True)
    metrics = {"train_loss": loss}
    if evaluating:
        metrics["eval_loss"] = held_out_loss(config, steps, steps)
    files.update_status(run, state="succeeded", finished_at=files.now_iso(), metrics=metrics)
