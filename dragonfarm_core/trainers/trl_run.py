"""What a trainer built on TRL shares: its TrainingArguments from the run spec, and the one
TrainerCallback through which a TRL trainer keeps the run directory's contract.

    callback = trl_run.RunCallback(run_dir, report, config, evaluate, columns, logged)
    args = trl_run.arguments(SFTConfig, config, placement, run_dir)
    trainer = trl_run.counted(SFTTrainer)(model=model, args=args, callbacks=[callback], ...)
    cancelled = trl_run.train(trainer, run_dir, callback)

The callback writes the progress rows (the mean loss since the last row, learning rate,
gradient norm, elapsed time and ETA, and a method's own columns from TRL's logged metrics; the
held-out measures at the start and four times a run), the step into status.json, and turns a
cancel request (the cancel file, or SIGTERM) into a checkpoint and a stop. Trainer writes each checkpoint; the callback adds the run's own state
(elapsed time and token counters, the settings it was trained with) and then the COMPLETE
marker, last, and prunes to the last two itself (marker first), so a kill at any moment leaves
no checkpoint that looks complete with a file missing (checkpoint.latest_checkpoint removes the
rest). A NaN or infinite step loss stops the run with NonFiniteLoss.

In a run of several processes (`Hardware(devices=...)`, under `accelerate launch`) every
process has the callback, and only rank 0 writes: the progress rows, status.json, the held-out
measures and the checkpoint marker (after every process has written its part). Each step's
loss and token counts are summed over the processes, and so is the cancel request, so that
all of them stop at the same step.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.train_config import TrainConfig
from dragonfarm_core.trainers import checkpoint
from dragonfarm_core.trainers.batching import PAD_MULTIPLE
from dragonfarm_core.trainers.common import RunReporter, Stopwatch, TrainState
from dragonfarm_core.trainers.placement import Placement, process_count

RUN_STATE = "dragonfarm_state.json"  # in each checkpoint: TrainState and the run's settings


def tracker_places(run_dir: Path) -> dict[str, str]:
    """Where the trackers that write files write them: into the run."""
    return {
        "TENSORBOARD_LOGGING_DIR": str(run_dir / "tensorboard"),
        "WANDB_DIR": str(run_dir),
        "MLFLOW_TRACKING_URI": (run_dir / "mlruns").as_uri(),
    }


# The user's own settings (passed to the trainer through DRAGONFARM_PASS_ENV) win; read once, so
# a second run in one process (tests, benchmarks) does not inherit the first run's folder.
GIVEN_TRACKER_ENV = frozenset(os.environ) & set(tracker_places(Path("/")))


def arguments(
    config_class: type, config: TrainConfig, placement: Placement, run_dir: Path, **method: Any
) -> Any:
    """The TRL config (SFTConfig, DPOConfig, ...) for this run: every TrainArgs and extra
    setting under its transformers name, plus the method's own options in `method` (which
    win: GRPO's batch counts completions, not prompts)."""
    args, extra = config.args, config.extra
    for name, where in tracker_places(run_dir).items():
        if name not in GIVEN_TRACKER_ENV:
            os.environ[name] = where
    common = dict(
        output_dir=str(run_dir / files.CHECKPOINTS_DIR),
        num_train_epochs=args.epochs,
        max_steps=args.max_steps or -1,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=args.learning_rate,
        weight_decay=args.weight_decay,
        warmup_steps=args.warmup_ratio,  # a float below 1 is a share of the steps
        lr_scheduler_type=extra.lr_scheduler_type,
        adam_beta1=extra.adam_beta1,
        adam_beta2=extra.adam_beta2,
        adam_epsilon=extra.adam_epsilon,
        max_grad_norm=extra.max_grad_norm,
        optim="adamw_torch",
        seed=args.seed,
        data_seed=args.seed,
        activation_checkpointing=args.gradient_checkpointing,
        activation_checkpointing_kwargs={"use_reentrant": False},
        bf16=placement.dtype_name == "bfloat16",
        fp16=placement.dtype_name == "float16",
        use_cpu=placement.device.type == "cpu",
        # Several CPU processes talk over gloo (one process has no process group at all).
        ddp_backend="gloo" if placement.device.type == "cpu" and process_count() > 1 else None,
        ddp_find_unused_parameters=False,  # every LoRA weight takes part in every forward
        # Rows of similar length share a batch: almost no padding, still a random order.
        train_sampling_strategy="group_by_length",
        # oneDNN caches a kernel per matmul shape: with exact widths bf16 training on a CPU
        # grew ~12 MB per new length (batching.PAD_MULTIPLE).
        pad_to_multiple_of=PAD_MULTIPLE,
        logging_steps=args.logging_steps,
        logging_first_step=True,
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=None,  # RunCallback prunes, marker first
        eval_strategy="no",  # the held-out loss is the callback's (token-level, as eval.json)
        report_to=extra.trackers or "none",
        neftune_noise_alpha=extra.neftune_noise_alpha,
        disable_tqdm=True,  # train.log is what the Monitor shows
        dataloader_pin_memory=placement.device.type == "cuda",
        remove_unused_columns=False,
    )
    if "pad_to_multiple_of" not in {f.name for f in dataclasses.fields(config_class)}:
        # ORPOConfig has no such option: its batches come from our collate, which pads so.
        del common["pad_to_multiple_of"]
    return config_class(**(common | method))


class RunCallback(TrainerCallback):
    """The run directory's side of a TRL training loop (the module docstring says what)."""

    def __init__(
        self,
        run_dir: Path,
        report: RunReporter,
        config: TrainConfig,
        evaluate: Callable[[Any], dict[str, Any]] | None = None,
        columns: tuple[str, ...] = (),
        logged: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.run_dir, self.report, self.config = run_dir, report, config
        # model -> held-out columns ({"eval_loss": ...}); None: no held-out rows
        self.evaluate = evaluate
        self.columns = columns  # the method's columns, in every row (null when not measured)
        self.logged = logged  # TRL's logged metrics -> the method's training columns
        self.state = TrainState()
        self.cancelled = False
        self._step_loss = 0.0
        self._step_tokens = [0, 0]  # real tokens, token slots
        self._clock = Stopwatch(0.0, 0)
        self._eval_every = 1

    # -- what the trainer reports between callbacks -------------------------------------------

    def add_micro_batch(self, loss: float, tokens: int, slots: int) -> None:
        """One forward/backward: its share of the step loss, real tokens and token slots."""
        self._step_loss += loss
        self._step_tokens[0] += tokens
        self._step_tokens[1] += slots

    def add_tokens(self, tokens: int, slots: int) -> None:
        """Tokens counted outside a micro-batch (GRPO's rollouts: the completions)."""
        self.state.tokens += tokens
        self.state.slots += slots

    def resume_from(self, path: Path) -> None:
        """Continue the counters saved with the checkpoint at `path` (refused when the
        checkpoint was trained with other settings)."""
        self.state = checkpoint.read_state(path / RUN_STATE, self.config.raw)

    # -- TrainerCallback ----------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any):
        self._clock = Stopwatch(self.state.elapsed_s, self.state.step)
        self._eval_every = self.config.extra.eval_steps or max(1, math.ceil(state.max_steps / 4))
        self.report.update(total_steps=state.max_steps, step=state.global_step,
                           epoch=round(state.epoch or 0.0, 4))  # fmt: skip
        if state.global_step == 0 and self.evaluate and state.is_world_process_zero:
            # the untrained adapter
            self._progress(step=0, epoch=0.0, elapsed_s=0.0, **self._held_out(model))

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any):
        loss, tokens, slots, cancel = _summed(
            args, self._step_loss, *self._step_tokens, self.report.cancel_requested()
        )
        self._step_loss, self._step_tokens = 0.0, [0, 0]
        self.state.step = state.global_step
        # Trainer scales each process's loss by the process count (DDP averages the gradients):
        # their mean is the step's loss.
        loss /= args.world_size
        self.state.record(loss, int(tokens), int(slots))  # NonFiniteLoss on NaN/inf
        self.state.elapsed_s = self._clock.elapsed()
        if state.global_step == state.max_steps:
            control.should_log = True  # the curve always ends at the last step
            # Trainer also saves at the end; the adapter is saved then anyway, and a finished
            # run is not resumed, so only the save_steps checkpoints are kept, as before.
            control.should_save = state.global_step % args.save_steps == 0
        if cancel:  # any process's request stops them all at the same step
            self.cancelled = True
            control.should_save = control.should_training_stop = True
        step = state.global_step
        self.report.update(step=step, epoch=round(state.epoch, 4))
        due = step % self._eval_every == 0 and step < state.max_steps
        if due and self.evaluate and state.is_world_process_zero:
            self._progress(step=step, epoch=round(state.epoch, 4),
                           elapsed_s=round(self._clock.elapsed(), 2),
                           **self._held_out(model))  # fmt: skip

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any):
        if "loss" not in (logs or {}):  # the summary Trainer logs at the end, or an eval
            return
        step = state.global_step
        self._progress(
            step=step,
            epoch=round(state.epoch, 4),
            loss=self.state.take_log_loss(),
            lr=logs.get("learning_rate"),
            grad_norm=logs.get("grad_norm"),
            elapsed_s=round(self.state.elapsed_s, 2),
            eta_s=self._clock.eta(step, state.max_steps),
            **(self.logged(logs) if self.logged else {}),
        )

    def _held_out(self, model: Any) -> dict[str, Any]:
        """The held-out columns; their time is counted apart (TrainState.eval_s), so tokens/s
        measures the training steps."""
        assert self.evaluate is not None
        started = time.monotonic()
        columns = self.evaluate(model)
        self.state.eval_s += time.monotonic() - started
        return columns

    def _progress(self, **values: Any) -> None:
        self.report.progress(**(dict.fromkeys(self.columns) | values))

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any):
        if args.world_size > 1:
            import torch

            # Every process writes its part of the checkpoint (its RNG state): the marker
            # comes once all of them have.
            torch.distributed.barrier()
        if not state.is_world_process_zero:
            return
        path = files.checkpoint_dir(self.run_dir, state.global_step)
        checkpoint.write_state(path / RUN_STATE, self.state, self.config.raw)
        checkpoint.fsync_tree(path)
        files.mark_checkpoint_complete(path)
        checkpoint.prune(self.run_dir)


def _summed(args: Any, *values: float) -> list[float]:
    """`values` added up over the run's processes (one all-reduce a step); as they are when
    the run has one process."""
    if args.world_size == 1:
        return [float(v) for v in values]
    import torch

    summed = torch.tensor(values, dtype=torch.float64, device=args.device)
    torch.distributed.all_reduce(summed)
    return summed.tolist()


def _tokens(inputs: Any) -> tuple[int, int]:
    """(real tokens, slots) of a training batch. A padding-free batch (packed rows) is one row
    with its padding at the end, where the positions are 0 (a row of SFT data has at least two
    tokens, so the last real one has a position above 0). GRPO's inputs are prompt rows until it
    samples: its rollouts count their tokens."""
    if not isinstance(inputs, dict):
        return 0, 0
    if inputs.get("attention_mask") is not None:
        return int(inputs["attention_mask"].sum()), inputs["attention_mask"].numel()
    if inputs.get("position_ids") is not None:
        positions = inputs["position_ids"][0]
        return int(positions.nonzero().max()) + 1, positions.numel()
    return 0, 0


def counted(trainer_class: type) -> type:
    """`trainer_class` whose every micro-batch tells the RunCallback its loss and tokens."""

    class Counted(trainer_class):
        def training_step(self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None):
            tokens, slots = _tokens(inputs)
            loss = super().training_step(model, inputs, num_items_in_batch)
            for callback in self.callback_handler.callbacks:
                if isinstance(callback, RunCallback):
                    callback.add_micro_batch(float(loss), tokens, slots)
            return loss

    Counted.__name__ = Counted.__qualname__ = f"Counted{trainer_class.__name__}"
    return Counted


def train(trainer: Any, run_dir: Path, callback: RunCallback) -> bool:
    """Train from the newest complete checkpoint (or from the start); True when cancelled.
    The progress rows logged after that checkpoint are dropped, so the curve goes on without
    a gap or a repeat."""
    # Rank 0 removes what a killed save left, then the other processes look.
    with trainer.args.main_process_first(local=False, desc="finding the checkpoint"):
        latest = checkpoint.latest_checkpoint(run_dir)
    if latest is not None:
        callback.resume_from(latest)
        if trainer.is_world_process_zero():
            checkpoint.trim_progress(run_dir, latest, callback.state.step)
    trainer.train(resume_from_checkpoint=str(latest) if latest else None)
    return callback.cancelled
