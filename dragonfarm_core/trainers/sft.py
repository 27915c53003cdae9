"""LoRA supervised fine-tuning on TRL's SFTTrainer: what a run with method "sft" executes.

    python -m dragonfarm_core.trainers.sft RUN_DIR

That command skips the queue (tests, debugging); the launcher runs
`python -m dragonfarm_core.trainers RUN_DIR`, which waits its turn and then calls `main`.
Reads top to bottom: config, data, model with its adapter, the TRL config and trainer, train
(resuming from a complete checkpoint), adapter, final eval and samples. Everything it writes
goes into the run directory (docs/ARCHITECTURE.md); trl_run.RunCallback keeps that contract
inside TRL's loop.

The rows are tokenized here (sft_data: the chat template, the loss on the last assistant turn
only, truncation counted) and given to SFTTrainer as `input_ids` and `labels`, so it skips its
own preparation. SFTTrainer applies the LM head only where a label is learned (its fused head),
and batches rows of similar length (train_sampling_strategy="group_by_length"). With
`TrainArgs.extra["packing"]` TRL's `pack_dataset` puts several whole rows into each
max_seq_len sequence and its collator flattens a batch into one padding-free row, whose
position_ids restart at each row, so a row attends to itself only; `batch_size` then counts
packed sequences. `extra["padding_free"]` flattens each batch so without packing, and
`extra["use_liger_kernel"]` (a CUDA GPU) swaps in Liger's Triton kernels for RMSNorm, RoPE and
SwiGLU; both are off by default until bench/gpu_check.py measures them paying on a GPU.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from dragonfarm_core import memory_estimate
from dragonfarm_core.rundir.train_config import load_config
from dragonfarm_core.settings import SettingsError
from dragonfarm_core.trainers import evaluation, lifecycle, modeling, sft_data, trl_run
from dragonfarm_core.trainers.common import reported_run
from dragonfarm_core.trainers.placement import processes_note, resolve_placement
from dragonfarm_core.trainers.sft_data import Encoded


def learned_positions_loss(trainer_class: type, kept_per_token: float | None) -> type:
    """`trainer_class` (SFTTrainer) with its loss from the LM head applied only where a label
    is learned (modeling.label_loss). SFTTrainer's fused head does that only on Triton devices;
    on a CPU it projects every position, prompt and padding included, and recomputes the
    logits in its backward: bench/train_throughput.py measured this override 1.3x faster on
    the bundled model (2,644 -> 3,504 real tokens/s; the hand-written loop before it: 3,452).
    In a run of several processes the model is wrapped in DistributedDataParallel, whose own
    forward must run for the gradients to be averaged: there SFTTrainer's loss is used (the
    same loss, every position projected).

    With `kept_per_token` (a CPU without gradient checkpointing: what the layers keep for the
    backward per token, memory_estimate.kept_bytes_per_token) a micro-batch whose kept
    activations would be large goes through forward and backward in row chunks
    (modeling.row_chunks), each chunk's loss divided by the whole batch's token count as
    Trainer divides it: the same gradient, with one chunk's activations alive at a time (the
    SmolLM2-135M shape's bench: 1,792 -> 1,410 MiB peak; memory_estimate says when)."""

    class LearnedPositions(trainer_class):
        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            chunks = [inputs]
            if kept_per_token and num_items_in_batch is not None and self.is_one_process:
                chunks = modeling.row_chunks(inputs, kept_per_token)
            loss = super().training_step(model, chunks[0], num_items_in_batch)
            for chunk in chunks[1:]:
                loss = loss + super().training_step(model, chunk, num_items_in_batch)
            return loss

        def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:  # fmt: skip
            if return_outputs or not model.training or not self.is_one_process:
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            loss, learned = modeling.label_loss(model, inputs)
            return loss / (learned if num_items_in_batch is None else num_items_in_batch)

        @property
        def is_one_process(self) -> bool:
            return self.accelerator.num_processes == 1

    return LearnedPositions


def as_dataset(data: Encoded) -> Any:
    """The encoded rows as SFTTrainer takes them (a datasets.Dataset): ids, and labels with
    the context masked."""
    from datasets import Dataset

    labels = [data.labels(i) for i in range(len(data))]
    return Dataset.from_dict({"input_ids": data.input_ids, "labels": labels})


def main(run_dir: str | os.PathLike[str]) -> str:
    """Train the run in `run_dir`; returns "succeeded" or "cancelled".

    On any error status.json says failed (with reason, error and log tail) and the exception
    propagates. A complete checkpoint in the run directory is resumed from.
    """
    run_dir = Path(run_dir)
    with reported_run(run_dir) as report:
        config = load_config(run_dir)
        args = config.args
        placement = resolve_placement(config.hardware, config.model.base)
        if config.extra.use_liger_kernel and placement.device.type != "cuda":
            raise SettingsError(
                f"TrainArgs.extra['use_liger_kernel'] needs an NVIDIA GPU (Liger's kernels are "
                f"Triton's), but the run trains on {placement.device}; leave it out there."
            )
        tokenizer = modeling.load_tokenizer(config.model)
        data = sft_data.load(run_dir, tokenizer, args.max_seq_len)

        from transformers import PrinterCallback
        from trl import SFTConfig, SFTTrainer, pack_dataset

        rows, packing = as_dataset(data.train), config.extra.packing
        if packing:  # best-fit decreasing: rows whole, several to a max_seq_len sequence
            rows = pack_dataset(rows, args.max_seq_len, "bfd")
        truncated = data.train.truncated_rows + data.held_out.truncated_rows
        model, plan, trainable, total = lifecycle.model_and_plan(
            report, config, placement, len(rows), truncated
        )

        def held_out_loss(model: Any) -> dict[str, Any]:
            loss = evaluation.eval_loss(model, data.held_out, args.batch_size, data.pad_id)[0]
            return {"eval_loss": loss}

        shape = memory_estimate.Shape.read(config.model.base)
        chunk_kept = None  # row chunks: a CPU, no gradient checkpointing (learned_positions_loss)
        if shape and placement.device.type == "cpu" and not args.gradient_checkpointing:
            chunk_kept = memory_estimate.kept_bytes_per_token(shape, placement.dtype.itemsize)
        callback = trl_run.RunCallback(
            run_dir, report, config, held_out_loss if len(data.held_out) else None
        )
        padding_free = config.extra.padding_free and not packing
        sft_args = trl_run.arguments(
            SFTConfig, config, placement, run_dir,
            # TRL refuses padding-free batches with a max_length it cannot enforce; sft_data
            # has cut the rows to max_seq_len already
            max_length=None if padding_free else args.max_seq_len,
            dataset_kwargs={"skip_prepare_dataset": True},  # sft_data tokenized and truncated
            packing=packing,  # TRL's collator then flattens each batch (padding-free)
            padding_free=config.extra.padding_free,  # the same flattening, without packing
            use_liger_kernel=config.extra.use_liger_kernel,
        )  # fmt: skip
        trainer = trl_run.counted(learned_positions_loss(SFTTrainer, chunk_kept))(
            model=model,
            args=sft_args,
            train_dataset=rows,
            processing_class=tokenizer,
            callbacks=[callback],
        )
        # progress.jsonl has the rows; train.log stays readable without Trainer's printed dicts
        trainer.remove_callback(PrinterCallback)
        processes = processes_note()
        if report.writes:
            print(
                f"Training {config.model.name} on {placement.device} ({placement.dtype_name}"
                f"{processes}): "
                f"{len(data.train)} rows{f' packed into {len(rows)}' if packing else ''}, "
                f"{plan.total_steps} steps, "
                f"{trainable:,} of {total:,} parameters trainable.",
                flush=True,
            )

        cancelled = trl_run.train(trainer, run_dir, callback)
        state = callback.state
        if not report.writes:  # one of several processes: rank 0 writes the results
            return "cancelled" if cancelled else "succeeded"
        metrics = lifecycle.stop(run_dir, report, model, state, cancelled)
        if metrics is None:
            return "cancelled"

        results = evaluation.write_eval_and_samples(
            run_dir,
            model,
            data,
            args.batch_size,
            config.n_samples,
            config.extra.sample_max_new_tokens,
            state.step,
            args.max_seq_len,
        )
        if len(data.held_out):
            report.progress(
                step=state.step,
                epoch=plan.epoch_at(state.step),
                eval_loss=results["eval_loss"],
                elapsed_s=round(state.elapsed_s, 2),
            )
        metrics.update({k: results[k] for k in ("eval_loss", "perplexity", "eval_tokens")})
        metrics["start_eval_loss"] = results.get("start_eval_loss")
        report.finish("succeeded", metrics=metrics)
        held_out = results["eval_loss"]
        eval_part = "no held-out rows" if held_out is None else f"eval loss {held_out:.4f}"
        print(f"Done: train loss {metrics['train_loss']:.4f}, {eval_part}.", flush=True)
        return "succeeded"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m dragonfarm_core.trainers.sft RUN_DIR")
    main(sys.argv[1])
