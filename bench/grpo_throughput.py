"""python bench/grpo_throughput.py [--steps 6] [--group-size 8] [--max-new-tokens 48] [--model PATH]
                                 [--lora-dropout 0.05]

End-to-end GRPO steps: dragonfarm's GRPO trainer (TRL's GRPOTrainer with our rollouts, the
batched decode of inference/worker_decode.py, through `rollout_func`) against a plain TRL
`GRPOTrainer` script with its defaults (rollouts from transformers' `generate`), on the bundled
model and the example tickets as prompts. Both arms get the same LoRA (r=16, alpha=32, dropout
0.05 or --lora-dropout, all linear layers), rewards (bench/outcomes.py's: 0.3 for any
T-<digits>, 0.7 for a four-digit id), group size, prompts per step, completion length, beta,
learning rate, seed and number of optimizer steps; the reference is the model with the adapter
off on both sides. Each arm runs in its own subprocess, so peak RSS is its own. Completion
tokens/s counts the tokens sampled over the training loop (model loading excluded), from each
arm's logged mean completion length. The last line holds the ratios, ours over TRL (target:
completion_tokens_per_s >= 1.5).
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

from dragonfarm_core.rundir import allocator, files  # noqa: E402  (no torch: ctypes only)

BUNDLED = ROOT / "assets" / "models" / "tiny-support"
TICKETS = ROOT / "assets" / "example_tickets.csv"
OUT = ROOT / "bench" / "out" / "grpo_throughput"
LORA = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "auto"}
PATTERNS = {"cites_ticket": (r"\bT-\d+", 0.3), "four_digit_id": (r"\bT-\d{4}\b", 0.7)}


def ticket_prompts() -> list[list[dict[str, str]]]:
    """Every example ticket as a one-turn conversation."""
    import pandas as pd

    frame = pd.read_csv(TICKETS)
    return [[{"role": "user", "content": f"{r.subject}\n\n{r.body}"}] for r in frame.itertuples()]


def run_ours(opts: argparse.Namespace, work: Path, device: str = "cpu") -> dict[str, Any]:
    """dragonfarm's GRPO trainer, in this process, through the same main() a run executes."""
    from dragonfarm_core.rewards import reward
    from dragonfarm_core.trainers import grpo

    run_dir = work / "ours-run"
    rows = [{"prompt": p, "reference": None, "fields": {}} for p in ticket_prompts()]
    files.write_jsonl(files.data_path(run_dir, "train"), rows)
    rewards = [reward("regex", pattern=p, name=n, weight=w).to_dict()
               for n, (p, w) in PATTERNS.items()]  # fmt: skip
    files.write_config(
        run_dir,
        {
            "schema": 1, "id": "bench", "name": "bench", "method": "grpo",
            "model": {"name": opts.model.name, "base": str(opts.model), "adapters": []},
            "lora": LORA | {"dropout": opts.lora_dropout},
            "hardware": {"device": device, "dtype": "auto"}, "n_samples": 0,
            "method_args": {"rewards": rewards, "group_size": opts.group_size,
                            "beta": opts.beta, "temperature": 1.0,
                            "max_new_tokens": opts.max_new_tokens},
            "args": {
                "max_steps": opts.steps, "batch_size": opts.prompts, "grad_accum": 1,
                "max_seq_len": 384 + opts.max_new_tokens, "learning_rate": opts.lr,
                "seed": opts.seed, "logging_steps": 1, "save_steps": 10**6,
            },
        },
    )  # fmt: skip
    grpo.main(run_dir)
    rows = files.read_progress(run_dir)
    completions = opts.prompts * opts.group_size
    return {
        "seconds": files.read_status(run_dir)["metrics"]["train_runtime_s"],
        "tokens": sum(
            r["completion_tokens"] * completions for r in rows if r["completion_tokens"] is not None
        ),
        "reward": rows[-1]["reward"],
    }


def run_trl(opts: argparse.Namespace, work: Path, device: str = "cpu") -> dict[str, Any]:
    """A plain TRL script: GRPOTrainer with its defaults and the shared settings."""
    import math
    import re

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    def regex_reward(name: str, pattern: str) -> Any:
        def score(completions: list[Any], **_: Any) -> list[float]:
            return [float(bool(re.search(pattern, c[0]["content"]))) for c in completions]

        score.__name__ = name
        return score

    config = GRPOConfig(
        output_dir=str(work / "trl-out"),
        max_steps=opts.steps,
        seed=opts.seed,
        per_device_train_batch_size=opts.prompts * opts.group_size,
        num_generations=opts.group_size,
        max_completion_length=opts.max_new_tokens,
        learning_rate=opts.lr,
        warmup_steps=math.ceil(0.03 * opts.steps),
        beta=opts.beta,
        reward_weights=[w for _, w in PATTERNS.values()],
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=device == "cpu",  # a GPU: bench/gpu_check.py
    )
    lora = LoraConfig(
        r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=opts.lora_dropout,
        target_modules="all-linear", task_type="CAUSAL_LM",
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=str(opts.model),
        reward_funcs=[regex_reward(n, p) for n, (p, _) in PATTERNS.items()],
        args=config,
        train_dataset=Dataset.from_list([{"prompt": p} for p in ticket_prompts()]),
        processing_class=AutoTokenizer.from_pretrained(opts.model, padding_side="left"),
        peft_config=lora,
    )
    result = trainer.train()
    logged = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    completions = opts.prompts * opts.group_size
    return {
        "seconds": result.metrics["train_runtime"],
        "tokens": sum(h["completions/mean_length"] * completions for h in logged),
        "reward": logged[-1]["reward"],
    }


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
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per optimizer step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--model", type=Path, default=BUNDLED)
    parser.add_argument(
        "--lora-dropout",
        type=float,
        default=LORA["dropout"],
        help="both arms' (0 lets ours read each group's prompt once in the loss)",
    )
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
    print(
        f"model {opts.model}, {opts.steps} steps of {opts.prompts} prompts x {opts.group_size} "
        f"completions, up to {opts.max_new_tokens} new tokens, beta {opts.beta}, lr {opts.lr} "
        f"({time.perf_counter() - started:.0f} s)"
    )
    for name, arm in arms.items():
        print(f"{name:<6}{arm['tokens'] / arm['seconds']:>8.1f} completion tokens/s"
              f"{arm['peak_rss_mib']:>8.0f} MiB  last reward {arm['reward']:.3f}"
              f"  ({arm['seconds']:.1f} s)")  # fmt: skip
    ours, trl = arms["ours"], arms["trl"]
    rate = (ours["tokens"] / ours["seconds"]) / (trl["tokens"] / trl["seconds"])
    print(
        f"completion_tokens_per_s={rate:.2f} "
        f"peak_rss={ours['peak_rss_mib'] / trl['peak_rss_mib']:.2f}"
    )


if __name__ == "__main__":
    main()
