"""Recompute a finished run's evaluation with its saved adapter: eval.json and samples.json.

    python -m dragonfarm_core.trainers.evaluate_run RUN_DIR --n-samples 10

`dragon.evaluate(run, recompute=True)` runs this as a subprocess (the app process never imports
torch), and so does an evaluation that asks for more samples than training wrote. It measures
what the trainer measures at the end of a run, on the same held-out rows: loss, perplexity and
token count for SFT runs; preference accuracy, reward margin, loss and pair count for DPO and
ORPO runs (the DPO reference is the model with the adapter switched off, as in training). The
first `--n-samples` held-out prompts (training prompts when none were held out) get greedy
replies. Exit status 0 on success; on failure the traceback is in the output (the caller's log).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files
from dragonfarm_core.trainers import evaluation, modeling, pref_data, sft_data
from dragonfarm_core.trainers.common import ModelLoadError, resolve_placement
from dragonfarm_core.trainers.config import TrainConfig, load_config

MESSAGE_METHODS = ("sft",)
PAIR_METHODS = ("dpo", "orpo")


def load_trained(run_dir: Path, config: TrainConfig) -> tuple[Any, Any]:
    """(model with the run's adapter, tokenizer): the base, earlier adapters folded, then ours."""
    from peft import PeftModel

    adapter = files.adapter_dir(run_dir)
    placement = resolve_placement(config.hardware)
    tokenizer = modeling.load_tokenizer(config.model)
    model = modeling.load_model(config.model, placement, config.hardware.load_in_4bit)
    model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    return model, tokenizer


def evaluate_messages(
    run_dir: Path, config: TrainConfig, model: Any, tokenizer: Any, n_samples: int, step: Any
) -> dict[str, Any]:
    """An SFT run: held-out loss and perplexity, and sample replies, as its trainer ends."""
    data = sft_data.load(run_dir, tokenizer, config.args.max_seq_len)
    return evaluation.write_eval_and_samples(
        run_dir, model, data, config.args.batch_size, n_samples,
        config.extra.sample_max_new_tokens, step, config.args.max_seq_len,
    )  # fmt: skip


def evaluate_pairs(
    run_dir: Path, config: TrainConfig, model: Any, tokenizer: Any, n_samples: int, step: Any
) -> dict[str, Any]:
    """A DPO or ORPO run: held-out preference accuracy and margin, and sample replies."""
    from dragonfarm_core.trainers.dpo import dpo_score
    from dragonfarm_core.trainers.orpo import orpo_score

    args = config.args
    beta = pref_data.read_beta(config)
    score_fn = {"dpo": dpo_score, "orpo": orpo_score}[config.method]
    eval_pairs = pref_data.read_pairs(run_dir, "eval")
    held_out = pref_data.encode_pairs(tokenizer, eval_pairs, args.max_seq_len)
    score = functools.partial(score_fn, beta=beta)
    results = pref_data.evaluate_pairs(
        model, held_out, args.batch_size, tokenizer.pad_token_id, score
    )
    pairs = eval_pairs or pref_data.read_pairs(run_dir, "train")
    split = "eval" if eval_pairs else "train"
    max_new = config.extra.sample_max_new_tokens
    pref_data.write_pair_samples(
        run_dir, model, tokenizer, pairs, split, n_samples, max_new, args.max_seq_len
    )
    return {**results, "method": config.method, "beta": beta, "step": step}


def recompute(run_dir: str | os.PathLike[str], n_samples: int) -> dict[str, Any]:
    """Measure the run again and rewrite eval.json and samples.json; returns eval.json."""
    run_dir = Path(run_dir).resolve()
    config = load_config(run_dir)
    if config.method not in MESSAGE_METHODS + PAIR_METHODS:
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
    measure = evaluate_messages if config.method in MESSAGE_METHODS else evaluate_pairs
    results = measure(run_dir, config, model, tokenizer, n_samples, step)
    results["recomputed_at"] = files.now_iso()
    files.write_eval(run_dir, results)
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
    ns = parser.parse_args(argv)
    if not files.is_run_dir(ns.run_dir):
        parser.error(f"{ns.run_dir} is not a run directory: it has no {files.CONFIG}.")
    if ns.n_samples < 0:
        parser.error("--n-samples must be 0 or more.")
    results = recompute(ns.run_dir, ns.n_samples)
    shown = {k: v for k, v in results.items() if isinstance(v, int | float) or v is None}
    print(f"[dragonfarm] evaluation recomputed: {shown}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
