"""python bench/train_throughput.py [--steps 36] [--model PATH | --shape smollm2-135m]

LoRA SFT speed and memory: dragonfarm's trainer against a plain TRL `SFTTrainer` script with its
defaults, on the bundled model and the example tickets (prompt "{subject}\\n\\n{body}", response
"reply"). Both arms get the same LoRA (r=16, alpha=32, dropout 0.05, all linear layers), seed,
max_seq_len, batch size, gradient accumulation, learning rate and schedule, and the same number
of optimizer steps; everything else is each side's default (TRL: random order with dynamic
padding, no packing, completion-only loss from the prompt-completion format, gradient
checkpointing, bf16 autocast). Each arm runs in its own subprocess, so peak RSS is its own; ours
on the malloc a trainer process runs on (rundir/allocator.py: tcmalloc or jemalloc where the
machine has one), TRL's script on the system's. Real tokens/s counts non-padding tokens over the
training loop's steps (model loading, tokenization and held-out measurements excluded on both
sides: ours measures the held-out loss at step 0, the curve's start, inside its loop and times
it apart as eval_runtime_s; TRL's script evaluates after train()). Held-out loss is measured on
both final adapters by one evaluator (float32 base weights, the loss on reply tokens), so
precision differences in each trainer's own evaluation do not count. The last line holds the
ratios, ours over TRL.

`--shape smollm2-135m` trains a model built here with SmolLM2-135M's configuration (30 layers,
hidden 576, 9 heads, 3 key-value heads, a 49,152-token vocabulary) and random weights, stored in
bfloat16 as SmolLM2-135M's are (TRL's script reads them into float32, its default), with the
bundled model's tokenizer: speed and memory do not depend on the weights, and the Hub is not
needed. Its held-out loss compares the two trainers on the same start, nothing more.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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
OUT = ROOT / "bench" / "out" / "train_throughput"
LORA = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "auto"}
N_EVAL = 40
# Measured in this order. "ours" uses the default dtype (on a CPU: bfloat16 frozen weights for a
# model of memory_estimate.CPU_BFLOAT16_FROM parameters on a CPU with bf16 instructions, else
# float32); "ours-other" the other one of the two, to show what that choice costs or saves here.
ARMS = ("ours", "ours-other", "trl")
# Other jobs on the machine skew every arm; the report shows how busy it was.
LOAD: list[float] = []


def ticket_conversations(seed: int) -> tuple[list[list[dict]], list[list[dict]]]:
    """(train, held-out) conversations from the example tickets, split by a seeded shuffle."""
    import pandas as pd

    frame = pd.read_csv(TICKETS)
    rows = [
        [
            {"role": "user", "content": f"{r.subject}\n\n{r.body}"},
            {"role": "assistant", "content": r.reply},
        ]
        for r in frame.itertuples()
    ]
    random.Random(seed).shuffle(rows)
    return rows[N_EVAL:], rows[:N_EVAL]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_ours(
    opts: argparse.Namespace, work: Path, dtype: str = "auto", *,
    rows: tuple[list, list] | None = None, hardware: dict | None = None,
    args: dict | None = None, name: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """dragonfarm's trainer, in this process, through the same main() a run executes: on the
    example tickets split by `opts.seed` (or `rows`, (train, held-out) conversations) on the
    CPU, with `hardware` and `args` (extra included) laid over those defaults
    (bench/gpu_check.py trains on a GPU, with its speed-ups)."""
    from dragonfarm_core.trainers import sft

    train, held_out = rows or ticket_conversations(opts.seed)
    run_dir = work / f"{name or f'ours-{dtype}'}-run"
    files.write_jsonl(files.data_path(run_dir, "train"), [{"messages": m} for m in train])
    files.write_jsonl(files.data_path(run_dir, "eval"), [{"messages": m} for m in held_out])
    extra = {"eval_steps": 10**6, **(args or {}).get("extra", {})}
    files.write_config(
        run_dir,
        {
            "schema": 1,
            "id": "bench",
            "name": "bench",
            "method": "sft",
            "model": {"name": opts.model.name, "base": str(opts.model), "adapters": []},
            "lora": LORA,
            "hardware": {"device": "cpu", "dtype": dtype, **(hardware or {})},
            "n_samples": 0,
            "args": {
                "max_steps": opts.steps,
                "batch_size": opts.batch_size,
                "grad_accum": opts.grad_accum,
                "max_seq_len": opts.max_seq_len,
                "learning_rate": opts.lr,
                "seed": opts.seed,
                "logging_steps": 5,
                "save_steps": 10**6,
                **(args or {}),
                "extra": extra,
            },
        },
    )
    sft.main(run_dir)
    status = files.read_status(run_dir)
    metrics = status["metrics"]
    return {
        "tokens": metrics["train_tokens"],
        "seconds": metrics["train_runtime_s"] - metrics["eval_runtime_s"],
        "padding": metrics["train_padding"],
        "own_eval_loss": metrics["eval_loss"],
        "adapter": str(files.adapter_dir(run_dir)),
        "run_dir": str(run_dir),
        "dtype": status["dtype"],
        "malloc": allocator.allocator_in_use(),
        "truncated_rows": status["truncated_rows"],
    }


class CountingCollator:
    """Wraps TRL's collator to count real tokens and padded slots of every training batch."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.tokens, self.slots = inner, 0, 0

    def __call__(self, examples: list[dict]) -> dict:
        batch = self.inner(examples)
        self.tokens += int(batch["attention_mask"].sum())
        self.slots += batch["attention_mask"].numel()
        return batch


def other_dtype(model: Path) -> str:
    """The CPU dtype that auto does not pick for this model."""
    from dragonfarm_core.memory_estimate import Shape, cpu_weights_dtype

    shape = Shape.read(model)
    chosen = cpu_weights_dtype(shape.params() if shape else None)
    return "float32" if chosen == "bfloat16" else "bfloat16"


def run_trl(
    opts: argparse.Namespace, work: Path, *, rows: tuple[list, list] | None = None,
    device: str = "cpu",
) -> dict[str, Any]:  # fmt: skip
    """A plain TRL script: SFTTrainer with its defaults and the shared settings (on the rows
    run_ours takes; on a GPU where `device` is not "cpu")."""
    import math

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    train, held_out = rows or ticket_conversations(opts.seed)

    def as_dataset(rows: list[list[dict]]) -> Dataset:
        return Dataset.from_list([{"prompt": m[:-1], "completion": m[-1:]} for m in rows])

    config = SFTConfig(
        output_dir=str(work / "trl-out"),
        max_steps=opts.steps,
        seed=opts.seed,
        per_device_train_batch_size=opts.batch_size,
        per_device_eval_batch_size=opts.batch_size,
        gradient_accumulation_steps=opts.grad_accum,
        learning_rate=opts.lr,
        warmup_steps=math.ceil(0.03 * opts.steps),
        max_length=opts.max_seq_len,
        logging_steps=5,
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        use_cpu=device == "cpu",
    )  # TRL refuses its bf16 default on a CPU-only machine without use_cpu
    lora = LoraConfig(
        r=LORA["r"],
        lora_alpha=LORA["alpha"],
        lora_dropout=LORA["dropout"],
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    trainer = SFTTrainer(
        model=str(opts.model),
        args=config,
        train_dataset=as_dataset(train),
        eval_dataset=as_dataset(held_out),
        processing_class=AutoTokenizer.from_pretrained(opts.model),
        peft_config=lora,
    )
    counter = CountingCollator(trainer.data_collator)
    trainer.data_collator = counter
    result = trainer.train()
    tokens, slots = counter.tokens, counter.slots  # before evaluate() uses the collator too
    own_eval = trainer.evaluate()["eval_loss"]
    adapter = work / "trl-adapter"
    trainer.model.save_pretrained(adapter)
    # TRL's own count of non-padding training tokens; the collator count can include a batch
    # the dataloader fetched ahead, so it only gives the padding fraction.
    return {
        "tokens": trainer._total_train_tokens,
        "seconds": result.metrics["train_runtime"],
        "padding": 1 - tokens / slots,
        "own_eval_loss": own_eval,
        "adapter": str(adapter),
        "dtype": "float32 weights, bf16 autocast",
        "malloc": allocator.allocator_in_use(),
    }


def held_out_losses(model_dir: Path, adapters: dict[str, str], held_out: list[list[dict]],
                    max_seq_len: int, device: str = "cpu") -> dict[str, float]:  # fmt: skip
    """One evaluator for every adapter: float32 base on `device`, the loss on the held-out
    replies."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from dragonfarm_core.rundir.train_config import ModelSpec
    from dragonfarm_core.trainers import evaluation, modeling, sft_data

    tokenizer = modeling.load_tokenizer(ModelSpec(name="bench", base=str(model_dir)))
    encoded = sft_data.encode(tokenizer, held_out, max_seq_len)
    losses = {}
    for arm, adapter in adapters.items():
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model = PeftModel.from_pretrained(base.to(device), adapter)
        losses[arm] = evaluation.eval_loss(model, encoded, 8, tokenizer.pad_token_id)[0]
        del base, model
    return losses


def run_eval(opts: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One evaluator for both adapters: float32 base, loss on the held-out replies."""
    adapters = {arm: json.loads((work / f"{arm}.json").read_text())["adapter"] for arm in ARMS}
    held_out = ticket_conversations(opts.seed)[1]
    return held_out_losses(opts.model, adapters, held_out, opts.max_seq_len)


def matmul_peaks() -> str:
    import torch

    out = []
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(1024, 1024, dtype=dtype)
        a @ a
        t, n = time.perf_counter(), 0
        while time.perf_counter() - t < 0.5:
            a @ a
            n += 1
        out.append(f"{str(dtype)[6:]} {2 * 1024**3 * n / (time.perf_counter() - t) / 1e9:.0f}")
    return "matmul peak GFLOP/s (torch threads: " + f"{torch.get_num_threads()}): " + ", ".join(out)


def child(opts: argparse.Namespace, arm: str, work: Path) -> dict[str, Any]:
    """Run one arm in a fresh interpreter; it writes <arm>.json in `work`."""
    argv = [sys.executable, __file__, "--arm", arm, "--work", str(work)] + [
        f"--{k.replace('_', '-')}={v}"
        for k, v in vars(opts).items()
        if k not in ("arm", "work") and v is not None
    ]
    # Our arms run on the malloc a trainer process gets (allocator: tcmalloc or jemalloc where the
    # machine has one); TRL's script on the system's, as a plain script would.
    env = allocator.with_fast_allocator(dict(os.environ)) if arm.startswith("ours") else None
    started = time.perf_counter()
    with open(work / f"{arm}.log", "w") as log:
        done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    if done.returncode:
        sys.exit(f"the {arm} arm failed; see {work / (arm + '.log')}")
    result = json.loads((work / f"{arm}.json").read_text())
    return {**result, "wall_s": time.perf_counter() - started}


def report(opts: argparse.Namespace, arms: dict[str, dict], losses: dict) -> None:
    print(
        f"model {opts.model}, {opts.steps} steps, batch {opts.batch_size} x accum "
        f"{opts.grad_accum}, max_seq_len {opts.max_seq_len}, lr {opts.lr}, seed {opts.seed}"
    )
    print(matmul_peaks())
    print("load average (1 min) at start and end: " + ", ".join(f"{x:.1f}" for x in LOAD))
    print(
        f"{'arm':<10}{'tokens/s':>10}{'padding':>9}{'peak RSS':>11}{'eval loss':>11}"
        f"{'own eval':>10}{'train s':>9}{'wall s':>8}  dtype; malloc"
    )
    for name, arm in arms.items():
        print(
            f"{name:<10}{arm['tokens'] / arm['seconds']:>10.0f}{arm['padding']:>9.1%}"
            f"{arm['peak_rss_mib']:>8.0f} MiB{losses[name]:>11.4f}{arm['own_eval_loss']:>10.4f}"
            f"{arm['seconds']:>9.1f}{arm['wall_s']:>8.1f}  {arm['dtype']}; {arm['malloc']}"
        )

    def speed(arm: dict) -> float:
        return arm["tokens"] / arm["seconds"]

    ours, other, trl = arms["ours"], arms["ours-other"], arms["trl"]
    print(
        f"ours with {other['dtype']} frozen weights over the default ({ours['dtype']}): "
        f"tokens/s {speed(other) / speed(ours):.2f}, eval loss "
        f"{losses['ours-other'] / losses['ours']:.3f}, peak RSS "
        f"{other['peak_rss_mib'] / ours['peak_rss_mib']:.2f}"
    )
    print(
        f"tokens_per_s={speed(ours) / speed(trl):.2f} eval_loss={losses['ours'] / losses['trl']:.3f} "
        f"peak_rss={ours['peak_rss_mib'] / trl['peak_rss_mib']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=36)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--grad-accum", type=int, default=4)
    parser.add_argument("--max-seq-len", type=int, default=512)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--model", type=Path, default=BUNDLED)
    parser.add_argument(
        "--shape",
        choices=("smollm2-135m",),
        default=None,
        help="train a locally built model of this shape instead of --model",
    )
    parser.add_argument("--arm", choices=(*ARMS, "eval"), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, default=OUT, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.shape and not opts.arm:
        from decode import smol_model  # the 135M shape, built once under bench/out/

        opts.model = smol_model()
    if not (opts.model / "config.json").is_file():
        sys.exit(
            f"{opts.model} has no model; build it with scripts/build_bundled_model.py "
            "or pass --model PATH."
        )
    if opts.arm:
        run = {
            "ours": run_ours,
            "ours-other": lambda o, w: run_ours(o, w, other_dtype(o.model)),
            "trl": run_trl,
            "eval": run_eval,
        }[opts.arm]
        result = run(opts, opts.work)
        result["peak_rss_mib"] = peak_rss_mib()
        (opts.work / f"{opts.arm}.json").write_text(json.dumps(result))
        return
    import shutil

    shutil.rmtree(opts.work, ignore_errors=True)
    opts.work.mkdir(parents=True)
    LOAD.append(os.getloadavg()[0])
    arms = {arm: child(opts, arm, opts.work) for arm in ARMS}
    LOAD.append(os.getloadavg()[0])
    report(opts, arms, child(opts, "eval", opts.work))


if __name__ == "__main__":
    main()
