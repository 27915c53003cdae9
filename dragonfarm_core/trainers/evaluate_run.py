"""Recompute a finished run's evaluation with its saved adapter: eval.json and samples.json.

    python -m dragonfarm_core.trainers.evaluate_run RUN_DIR --n-samples 10 [--job JOB_DIR]

`dragon.evaluate(run, recompute=True)` runs this as a background job (`--job`: the job's folder,
<run>/jobs/evaluate-<time>/, where `rundir.jobs.run_job` keeps its status; the app process never
imports torch), and so does an evaluation that asks for more samples than training wrote. It
measures
what the trainer measures at the end of a run, on the same held-out rows: loss, perplexity and
token count for SFT runs; preference accuracy, reward margin, loss and pair count for DPO and
ORPO runs (the DPO reference is the model with the adapter switched off, as in training). The
first `--n-samples` held-out prompts (training prompts when none were held out) get greedy
replies. The run's metrics.json is emptied: its scores were of the samples just replaced. Exit
status 0 on success; on failure the traceback is in the output (the job's log).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path
from typing import Any

from dragonfarm_core.methods import METHODS
from dragonfarm_core.rundir import files, jobs
from dragonfarm_core.rundir.train_config import TrainConfig, load_config
from dragonfarm_core.trainers.log_noise import quiet_library_noise

# The modules that import torch are imported inside the functions below: as a queued trainer
# does, a queued evaluator waits for its device turn (jobs.run_job) with nothing heavy loaded.


def load_trained(run_dir: Path, config: TrainConfig) -> tuple[Any, Any]:
    """(model with the run's adapter, tokenizer): the base, earlier adapters folded, then ours."""
    from peft import PeftModel

    from dragonfarm_core.trainers import modeling
    from dragonfarm_core.trainers.placement import resolve_placement

    adapter = files.adapter_dir(run_dir)
    placement = resolve_placement(config.hardware, config.model.base)
    tokenizer = modeling.load_tokenizer(config.model)
    model = modeling.load_model(config.model, placement, config.hardware.load_in_4bit)
    model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    return model, tokenizer


def evaluate_messages(
    run_dir: Path, config: TrainConfig, model: Any, tokenizer: Any, n_samples: int, step: Any
) -> dict[str, Any]:
    """An SFT run: held-out loss and perplexity, and sample replies, as its trainer ends."""
    from dragonfarm_core.trainers import evaluation, sft_data

    data = sft_data.load(run_dir, tokenizer, config.args.max_seq_len)
    return evaluation.write_eval_and_samples(
        run_dir, model, data, config.args.batch_size, n_samples,
        config.extra.sample_max_new_tokens, step, config.args.max_seq_len,
    )  # fmt: skip


def evaluate_pairs(
    run_dir: Path, config: TrainConfig, model: Any, tokenizer: Any, n_samples: int, step: Any
) -> dict[str, Any]:
    """A DPO or ORPO run: held-out preference accuracy and margin, and sample replies."""
    from dragonfarm_core.trainers import pref_data
    from dragonfarm_core.trainers.dpo import dpo_score
    from dragonfarm_core.trainers.orpo import orpo_score

    args = config.args
    settings = pref_data.read_settings(config)
    score_fn = {"dpo": dpo_score, "orpo": orpo_score}[config.method]
    eval_pairs = pref_data.read_pairs(run_dir, "eval")
    held_out = pref_data.encode_pairs(tokenizer, eval_pairs, args.max_seq_len)
    score = functools.partial(score_fn, **settings.to_dict())
    results = pref_data.evaluate_pairs(
        model, held_out, args.batch_size, tokenizer.pad_token_id, score
    )
    pairs = eval_pairs or pref_data.read_pairs(run_dir, "train")
    split = "eval" if eval_pairs else "train"
    max_new = config.extra.sample_max_new_tokens
    pref_data.write_pair_samples(
        run_dir, model, tokenizer, pairs, split, n_samples, max_new, args.max_seq_len
    )
    return {**results, "method": config.method, **settings.to_dict(), "step": step}


def recompute(run_dir: str | os.PathLike[str], n_samples: int) -> dict[str, Any]:
    """Measure the run again and rewrite eval.json and samples.json; returns eval.json."""
    from dragonfarm_core.trainers.common import ModelLoadError

    run_dir = Path(run_dir).resolve()
    config = load_config(run_dir)
    row = METHODS.get(config.method)
    if row is None or not row.recomputable:
        raise ValueError(
            f"{run_dir}: recomputing the evaluation of a {config.method} run is not supported; "
            f"its trainer's {files.EVAL} is the evaluation (dragon.evaluate(run) reads it)."
        )
    adapter = files.adapter_dir(run_dir)
    if not (adapter / "adapter_config.json").is_file():
        raise ModelLoadError(
            f"{adapter} holds no saved adapter, so there is nothing to evaluate. Finish (or "
            "resume) the run first."
        )
    model, tokenizer = load_trained(run_dir, config)
    step = files.read_status(run_dir).get("step")
    measure = evaluate_pairs if row.data_kind == "pairs" else evaluate_messages
    results = measure(run_dir, config, model, tokenizer, n_samples, step)
    results["recomputed_at"] = files.now_iso()
    files.write_eval(run_dir, results)
    if (run_dir / files.METRICS).exists():
        files.write_json(run_dir / files.METRICS, {})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dragonfarm_core.trainers.evaluate_run",
        description="Recompute a run's eval.json and samples.json with its saved adapter.",
    )
    parser.add_argument("run_dir", help="the run directory (a folder with config.json)")
    parser.add_argument(
        "--n-samples", type=int, default=10, help="held-out prompts to generate replies for"
    )
    parser.add_argument("--job", help="run as the job in this folder (status, heartbeat, cancel)")
    ns = parser.parse_args(argv)
    if not files.is_run_dir(ns.run_dir):
        parser.error(f"{ns.run_dir} is not a run directory: it has no {files.CONFIG}.")
    if ns.n_samples < 0:
        parser.error("--n-samples must be 0 or more.")
    quiet_library_noise()  # the job's log is shown in the app: no library internals in it
    if ns.job:
        return jobs.run_job(ns.job, lambda: _recompute(ns.run_dir, ns.n_samples))
    _recompute(ns.run_dir, ns.n_samples)
    return 0


def _recompute(run_dir: str, n_samples: int) -> None:
    results = recompute(run_dir, n_samples)
    shown = {k: v for k, v in results.items() if isinstance(v, int | float) or v is None}
    print(f"[dragonfarm] evaluation recomputed: {shown}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
