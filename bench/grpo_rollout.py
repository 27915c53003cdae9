"""python bench/grpo_rollout.py [--model PATH] [--prompts 4] [--group-size 4] [--max-new-tokens 128]

Rollout speed of one GRPO step, measured on the trainer's own code (grpo_rollout.generate_rollout,
LoRA adapter on, sampling at temperature 1 with top_p 1, stopping at the end-of-turn token),
the same prompts (example tickets) and the same token budget in every arm:

- single: every completion in a call of its own (prompts x group_size calls);
- group:  one call per prompt that samples its whole group;
- step:   one call for all prompts of the step (what the trainer does per micro-batch);
- step_forward: the same call with every token through model.forward, the decode loop's
  trimmed step (inference/worker_step.py) switched off: what the trainer did before it.

The model is the bundled one (or --model; without either, the tests' tiny random model), its
frozen weights in the dtype the trainer would pick on this CPU. Each arm runs --repeats times
after one warm-up call; completions/s and completion tokens/s are medians. Results also go to
bench/out/grpo_rollout.json. The last line holds the ratio of the trainer's arm to one at a
time: batched_speedup=<step completions/s / single completions/s> (target >= 4), and
trimmed_step_speedup=<step tokens/s / step_forward tokens/s>.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from dragonfarm_core.chat_template import stop_ids  # noqa: E402
from dragonfarm_core.models import bundled_model_path  # noqa: E402
from dragonfarm_core.rundir.train_config import ModelSpec  # noqa: E402
from dragonfarm_core.settings import Hardware, Lora  # noqa: E402
from dragonfarm_core.trainers import grpo_rollout as rl  # noqa: E402
from dragonfarm_core.trainers import modeling  # noqa: E402
from dragonfarm_core.trainers.placement import resolve_placement  # noqa: E402

OUT = ROOT / "bench" / "out" / "grpo_rollout.json"


def pick_model(given: str | None) -> Path:
    if given:
        return Path(given)
    if (bundled_model_path() / "config.json").is_file():
        return bundled_model_path()
    print("The bundled model is missing: using the tests' tiny random model.", flush=True)
    path = ROOT / "tests" / "trainers" / "trainer_fixtures.py"
    spec = importlib.util.spec_from_file_location("trainer_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.build_tiny_model(Path(tempfile.mkdtemp(prefix="grpo-bench-")))


def ticket_prompts(n: int) -> list[rl.Prompt]:
    frame = pd.read_csv(ROOT / "assets" / "example_tickets.csv", dtype=str).head(n)
    return [
        rl.Prompt([{"role": "user", "content": f"{s}\n\n{b}"}], None, {})
        for s, b in zip(frame["subject"], frame["body"], strict=True)
    ]


@contextlib.contextmanager
def forward_only(on: bool):
    """With `on`, the rollout's decode runs without its trimmed step (trimmed=False)."""
    real = rl.decode
    if on:
        rl.decode = functools.partial(real, trimmed=False)
    try:
        yield
    finally:
        rl.decode = real


def run_arm(model, tokenizer, calls: list[tuple[list[list[int]], int]], args, stop) -> dict:
    """Time the calls (prompt ids, group size) once; completions and tokens made."""
    start = time.perf_counter()
    completions = tokens = 0
    for ids, group in calls:
        rollout = rl.generate_rollout(model, tokenizer, ids, group, args.max_new_tokens, 1.0, stop)
        completions += len(rollout.texts)
        tokens += rollout.n_tokens
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "completions": completions, "tokens": tokens}


def measure(model, tokenizer, ids: list[list[int]], args, stop) -> dict[str, dict]:
    g = args.group_size
    arms = {
        "single": [([p], 1) for p in ids for _ in range(g)],
        "group": [([p], g) for p in ids],
        "step": [(ids, g)],
        "step_forward": [(ids, g)],
    }
    results = {}
    for name, calls in arms.items():
        with forward_only(name == "step_forward"):
            rl.generate_rollout(model, tokenizer, calls[0][0], calls[0][1], 4, 1.0, stop)  # warm
            runs = [run_arm(model, tokenizer, calls, args, stop) for _ in range(args.repeats)]
        results[name] = {
            "calls": len(calls),
            "completions_per_s": statistics.median(r["completions"] / r["seconds"] for r in runs),
            "tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in runs),
            "seconds": statistics.median(r["seconds"] for r in runs),
            "mean_completion_tokens": statistics.mean(r["tokens"] / r["completions"] for r in runs),
        }
        print(f"{name:>6}: {results[name]}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model folder (default: the bundled model)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (batch_size)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    model_dir = pick_model(args.model)
    spec = ModelSpec(name=model_dir.name, base=str(model_dir))
    placement = resolve_placement(Hardware(device="cpu"))
    tokenizer = modeling.load_tokenizer(spec)
    model = modeling.add_lora(modeling.load_model(spec, placement, False), Lora(), 0, False, False)
    _, ids, _ = rl.encode_prompts(tokenizer, ticket_prompts(args.prompts), 512)
    stop = stop_ids(model, tokenizer)
    torch.manual_seed(0)
    print(
        f"{model_dir} ({placement.dtype_name}, {torch.get_num_threads()} threads): "
        f"{args.prompts} prompts x {args.group_size} completions, "
        f"{args.max_new_tokens} new tokens at most",
        flush=True,
    )
    results = measure(model, tokenizer, ids, args, stop)
    step, single = results["step"], results["single"]
    ratios = {
        "group_speedup": results["group"]["completions_per_s"] / single["completions_per_s"],
        "batched_speedup": step["completions_per_s"] / single["completions_per_s"],
        "trimmed_step_speedup": step["tokens_per_s"] / results["step_forward"]["tokens_per_s"],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"model": str(model_dir), "dtype": placement.dtype_name,
                               "args": vars(args), "arms": results, **ratios}, indent=2))  # fmt: skip
    print(f"group_speedup={ratios['group_speedup']:.2f}")
    print(f"batched_speedup={ratios['batched_speedup']:.2f}")
    print(f"trimmed_step_speedup={ratios['trimmed_step_speedup']:.2f}")


if __name__ == "__main__":
    main()
