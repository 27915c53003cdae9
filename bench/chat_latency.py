"""python bench/chat_latency.py [--model PATH] [--max-new-tokens 48] [--prompts 32]

Latency of the local inference worker, all in one run on the bundled model (or --model):

- cold: the first streamed chat call, which starts the worker and loads the model;
- warm: the same call again (median of 5): time to first token and decode tokens/s; also for
  the second model, the same model with a LoRA adapter (random, made here, saved as a run);
- swap: alternating between the two held models, so every call switches; each model's
  first-token time after a switch is compared with its own warm time, and the worker's load
  counter shows whether a switch reloaded anything;
- batched: `generate` with 32 prompts in one call against 32 single calls (greedy, so both do
  the same work).

Tokens are counted with the model's tokenizer on the returned text. Results also go to
bench/out/chat_latency.json. The last line holds the ratios:
warm_over_cold (first-token time, warm / cold; target <= 0.10), swap_over_warm (first-token
time right after a switch / the same model's warm time, mean of both; target ~1, no reload), batched_speedup (32 single calls /
one batched call; target >= 3), swap_reloads (loads during the switches; target 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from dragonfarm_core.inference import ModelSpec, Sampling, backend_local, worker_stop  # noqa: E402
from dragonfarm_core.inference.target import resolve_target  # noqa: E402
from dragonfarm_core.models import bundled_model_path  # noqa: E402
from dragonfarm_core.rundir import files  # noqa: E402

OUT = ROOT / "bench" / "out" / "chat_latency.json"


def make_adapter_run(model_dir: Path, runs_dir: Path) -> Path:
    """A finished run on `model_dir` whose adapter is a random LoRA (all linear layers, r=16)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    run_dir = runs_dir / "20260101-000000-bench-lora"
    config = LoraConfig(
        r=16,
        lora_alpha=32,
        target_modules="all-linear",
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), config)
    model.save_pretrained(run_dir / files.ADAPTER_DIR)
    files.write_config(
        run_dir,
        {
            "schema": 1,
            "id": run_dir.name,
            "method": "sft",
            "model": {"name": str(model_dir), "base": str(model_dir), "adapters": []},
        },
    )
    files.write_status(run_dir, {"state": "succeeded"})
    return run_dir


def prompts(n: int) -> list[str]:
    from support_corpus import build_corpus

    return [next(m["content"] for m in c if m["role"] == "user") for c in build_corpus(n, seed=7)]


def timed_chat(backend, spec: ModelSpec, prompt: str, sampling: Sampling, count) -> dict:
    """One streamed call: time to first piece, total time, decode tokens/s."""
    first: list[float] = []
    start = time.perf_counter()
    reply = backend.chat(
        spec,
        [{"role": "user", "content": prompt}],
        sampling,
        lambda _: first or first.append(time.perf_counter()),
    )
    end = time.perf_counter()
    tokens = count(reply)
    ttft = (first[0] if first else end) - start
    decode = (tokens - 1) / (end - start - ttft) if tokens > 1 and end - start > ttft else 0.0
    return {"ttft_s": ttft, "total_s": end - start, "tokens": tokens, "tokens_per_s": decode}


def summary(calls: list[dict]) -> dict:
    return {k: statistics.median(c[k] for c in calls) for k in calls[0]}


def latency(b, plain: ModelSpec, tuned: ModelSpec, prompt: str, sampling: Sampling, count):
    """Cold, warm (per model) and switched calls, all on one prompt so prefill is the same."""
    worker_stop()
    cold = timed_chat(b, plain, prompt, sampling, count)
    print(f"cold: {cold}", file=sys.stderr, flush=True)
    warm = summary([timed_chat(b, plain, prompt, sampling, count) for _ in range(5)])
    timed_chat(b, tuned, prompt, sampling, count)  # load the second model once
    warm_tuned = summary([timed_chat(b, tuned, prompt, sampling, count) for _ in range(3)])
    loads = b.status()["loads"]
    # Each call below follows a call on the other model: every one is a switch.
    switched = {id(spec): [] for spec in (plain, tuned)}
    for _ in range(4):
        for spec in (plain, tuned):
            switched[id(spec)].append(timed_chat(b, spec, prompt, sampling, count))
    reloads = b.status()["loads"] - loads
    swap, swap_tuned = summary(switched[id(plain)]), summary(switched[id(tuned)])
    print(f"warm: {warm}\nswap: {swap}, reloads {reloads}", file=sys.stderr, flush=True)
    ratio = (swap["ttft_s"] / warm["ttft_s"] + swap_tuned["ttft_s"] / warm_tuned["ttft_s"]) / 2
    return {
        "cold": cold,
        "warm": warm,
        "warm_with_adapter": warm_tuned,
        "swap": swap,
        "swap_with_adapter": swap_tuned,
        "swap_reloads": reloads,
        "swap_over_warm": ratio,
    }


def batching(b, plain: ModelSpec, texts: list[str], greedy: Sampling, count) -> dict:
    """32 single `generate` calls against one call with all 32 prompts (greedy: same work)."""
    start = time.perf_counter()
    singles = [b.generate(plain, [[{"role": "user", "content": t}]], greedy)[0] for t in texts]
    single_s = time.perf_counter() - start
    start = time.perf_counter()
    batched = b.generate(plain, [[{"role": "user", "content": t}] for t in texts], greedy)
    batched_s = time.perf_counter() - start
    same = sum(a == c for a, c in zip(singles, batched, strict=True))
    return {
        "prompts": len(texts),
        "single_calls_s": single_s,
        "one_call_s": batched_s,
        "same_replies": same,
        "tokens": sum(count(r) for r in batched),
    }


def report(results: dict) -> None:
    for name in ("cold", "warm", "warm_with_adapter", "swap", "swap_with_adapter"):
        r = results[name]
        print(
            f"{name:18} first token {r['ttft_s'] * 1000:8.1f} ms   total {r['total_s']:6.2f} s"
            f"   {r['tokens']:4.0f} tokens   decode {r['tokens_per_s']:6.1f} tokens/s"
        )
    batch = results["batched"]
    print(
        f"batched {batch['prompts']} prompts: {batch['single_calls_s']:.2f} s as single calls, "
        f"{batch['one_call_s']:.2f} s in one call; {batch['same_replies']}/{batch['prompts']} "
        "replies identical (greedy)"
    )
    print(" ".join(f"{k}={v:.3g}" for k, v in results["ratios"].items()))


def model_or_exit(model: str) -> Path:
    """The model folder to measure; exits naming how to build the bundled one when it is missing."""
    model_dir = Path(model).resolve()
    if not (model_dir / "config.json").is_file():
        sys.exit(
            f"No model at {model_dir}: build the bundled model with "
            "`python scripts/build_bundled_model.py`, or pass --model PATH."
        )
    return model_dir


def token_counter(model_dir: Path) -> Callable[[str], int]:
    """How many tokens a text is for the model's tokenizer (what a reply is measured in)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(bundled_model_path()))
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--prompts", type=int, default=32)
    args = parser.parse_args()
    model_dir = model_or_exit(args.model)
    count = token_counter(model_dir)
    texts = prompts(args.prompts)
    plain = resolve_target(str(model_dir)).spec
    b = backend_local()
    with tempfile.TemporaryDirectory() as tmp:
        tuned = resolve_target(make_adapter_run(model_dir, Path(tmp))).spec
        results = latency(b, plain, tuned, texts[0], Sampling(args.max_new_tokens), count)
        results["batched"] = batching(b, plain, texts, Sampling(args.max_new_tokens, 0.0), count)
        worker_stop()
    batch = results["batched"]
    results["ratios"] = {
        "warm_over_cold": results["warm"]["ttft_s"] / results["cold"]["ttft_s"],
        "swap_over_warm": results.pop("swap_over_warm"),
        "batched_speedup": batch["single_calls_s"] / batch["one_call_s"],
        "swap_reloads": results["swap_reloads"],
    }
    results.update(model=str(model_dir), max_new_tokens=args.max_new_tokens)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2))
    report(results)


if __name__ == "__main__":
    main()
