"""python bench/dpo_throughput.py [--method dpo|orpo] [--steps 12] [--model PATH]

LoRA DPO (or ORPO) speed and memory: dragonfarm's DPO trainer against a plain TRL `DPOTrainer`
script with its defaults (ORPO: ours against `trl.experimental.orpo.ORPOTrainer`), on the bundled model and pairs made from the example tickets (chosen: the ticket's
reply; rejected: the same advice as a rambling paragraph, bench/outcomes.py's `rambling`). Both
arms get the same LoRA (r=16, alpha=32, dropout 0.05, all linear layers), beta 0.1, seed,
max_length, batch size (pairs), gradient accumulation, learning rate and number of optimizer
steps; the reference is the model with the adapter off on both sides (ORPO has none). Each arm runs in its own
subprocess, so peak RSS is its own. Pairs/s counts the pairs trained on over the training loop
(model loading and tokenization excluded). TRL's fused LM head scores every position on a CPU,
for the policy and for the reference; ORPOTrainer's forward projects every position too. The
last line holds the ratios, ours over TRL.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from dragonfarm_core.rundir import allocator, files  # noqa: E402  (no torch: ctypes only)

BUNDLED = ROOT / "assets" / "models" / "tiny-support"
TICKETS = ROOT / "assets" / "example_tickets.csv"
OUT = ROOT / "bench" / "out" / "dpo_throughput"
LORA = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "auto"}
BETA = 0.1


def ticket_pairs() -> list[dict[str, Any]]:
    """Every example ticket as a pair in TRL's conversational preference format."""
    import pandas as pd
    from outcomes import rambling

    frame = pd.read_csv(TICKETS)
    return [
        {
            "prompt": [{"role": "user", "content": f"{r.subject}\n\n{r.body}"}],
            "chosen": [{"role": "assistant", "content": r.reply}],
            "rejected": [{"role": "assistant", "content": rambling(r.reply)}],
        }
        for r in frame.itertuples()
    ]


def run_ours(opts: argparse.Namespace, work: Path, device: str = "cpu") -> dict[str, Any]:
    """dragonfarm's DPO or ORPO trainer, in this process, through the main() a run executes."""
    import importlib

    trainer = importlib.import_module(f"dragonfarm_core.trainers.{opts.method}")

    run_dir = work / "ours-run"
    files.write_jsonl(files.data_path(run_dir, "train"), ticket_pairs())
    files.write_config(
        run_dir,
        {
            "schema": 1, "id": "bench", "name": "bench", "method": opts.method,
            "model": {"name": opts.model.name, "base": str(opts.model), "adapters": []},
            "lora": LORA, "hardware": {"device": device, "dtype": "auto"}, "n_samples": 0,
            "method_args": {"beta": BETA},
            "args": {
                "max_steps": opts.steps, "batch_size": opts.batch_size,
                "grad_accum": opts.grad_accum, "max_seq_len": opts.max_length,
                "learning_rate": opts.lr, "seed": opts.seed, "logging_steps": 5,
                "save_steps": 10**6, "extra": {"eval_steps": 10**6},
            },
        },
    )  # fmt: skip
    trainer.main(run_dir)
    metrics = files.read_status(run_dir)["metrics"]
    return {"seconds": metrics["train_runtime_s"], "train_loss": metrics["train_loss"]}


def run_trl(opts: argparse.Namespace, work: Path, device: str = "cpu") -> dict[str, Any]:
    """A plain TRL script: DPOTrainer (or ORPOTrainer) with its defaults and the shared
    settings."""
    import math

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import DPOConfig, DPOTrainer
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    config_class, trainer_class = {"dpo": (DPOConfig, DPOTrainer),
                                   "orpo": (ORPOConfig, ORPOTrainer)}[opts.method]  # fmt: skip
    config = config_class(
        output_dir=str(work / "trl-out"),
        max_steps=opts.steps,
        seed=opts.seed,
        per_device_train_batch_size=opts.batch_size,
        gradient_accumulation_steps=opts.grad_accum,
        learning_rate=opts.lr,
        warmup_steps=math.ceil(0.03 * opts.steps),
        max_length=opts.max_length,
        beta=BETA,
        logging_steps=5,
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        use_cpu=device == "cpu",  # a GPU: bench/gpu_check.py
    )
    lora = LoraConfig(
        r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
        target_modules="all-linear", task_type="CAUSAL_LM",
    )  # fmt: skip
    trainer = trainer_class(
        model=str(opts.model),
        args=config,
        train_dataset=Dataset.from_list(ticket_pairs()),
        processing_class=AutoTokenizer.from_pretrained(opts.model),
        peft_config=lora,
    )
    result = trainer.train()
    return {"seconds": result.metrics["train_runtime"], "train_loss": result.training_loss}


def child(opts: argparse.Namespace, arm: str, work: Path) -> dict[str, Any]:
    """Run one arm in a fresh interpreter; it writes <arm>.json in `work`."""
    argv = [sys.executable, __file__, "--arm", arm, "--work", str(work)] + [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(opts).items() if k not in ("arm", "work")
    ]
    # ours on the malloc a trainer process gets (allocator), TRL's on the system's
    env = allocator.with_fast_allocator(dict(os.environ)) if arm == "ours" else None
    with open(work / f"{arm}.log", "w") as log:
        done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    if done.returncode:
        sys.exit(f"the {arm} arm failed; see {work / (arm + '.log')}")
    return json.loads((work / f"{arm}.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=("dpo", "orpo"), default="dpo")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--grad-accum", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--model", type=Path, default=BUNDLED)
    parser.add_argument("--arm", choices=("ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, default=OUT, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.arm:
        result = {"ours": run_ours, "trl": run_trl}[opts.arm](opts, opts.work)
        result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        (opts.work / f"{opts.arm}.json").write_text(json.dumps(result))
        return
    import shutil

    shutil.rmtree(opts.work, ignore_errors=True)
    opts.work.mkdir(parents=True)
    started = time.perf_counter()
    arms = {arm: child(opts, arm, opts.work) for arm in ("ours", "trl")}
    pairs = opts.steps * opts.batch_size * opts.grad_accum
    print(
        f"{opts.method}: model {opts.model}, {opts.steps} steps of {opts.batch_size} x {opts.grad_accum} pairs, "
        f"max_length {opts.max_length}, lr {opts.lr}, beta {BETA} ({time.perf_counter() - started:.0f} s)"
    )
    for name, arm in arms.items():
        print(f"{name:<6}{pairs / arm['seconds']:>8.2f} pairs/s{arm['peak_rss_mib']:>8.0f} MiB"
              f"  train loss {arm['train_loss']:.4f}  ({arm['seconds']:.1f} s)")  # fmt: skip
    ours, trl = arms["ours"], arms["trl"]
    print(
        f"pairs_per_s={trl['seconds'] / ours['seconds']:.2f} "
        f"peak_rss={ours['peak_rss_mib'] / trl['peak_rss_mib']:.2f}"
    )


if __name__ == "__main__":
    main()
