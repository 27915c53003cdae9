"""python bench/gpu_check.py [--smoke] [--out PATH] [--only SECTION ...] [--budget-s 510]

The GPU check: one command for one call on a machine with an NVIDIA GPU (docs/DEPLOY.md's GPU
section gives the call), writing every figure to $OUT/gpu_check.json (or --out; without $OUT,
bench/out/gpu_check.json) and ending with one key=value line. Its sections:

- check: `dragon.check()` (device, driver, free disk), torch's view of the GPU (name,
  capability, memory, bf16, which sdpa kernels are on), the library versions, and the bf16
  matrix-product rate measured here (8192^3, median of 10 after 3 warm-ups);
- sft_bundled, sft_qwen: LoRA SFT on the bundled model and on a Qwen2.5-0.5B-shaped model
  (QWEN_05B: its config, random weights, the bundled tokenizer; built here, never
  downloaded), bf16, rows of 1,024-2,048 tokens (the example tickets, each reply repeated):
  ours (bench/train_throughput.py's run_ours) against a plain TRL SFTTrainer with its defaults
  (run_trl) on the same rows in the same process: real tokens/s, peak CUDA memory (reserved
  by the caching allocator, plus the CUDA context), held-out loss by one evaluator
  (held_out_losses), and ours' model FLOPs utilisation (`train_flops`). On the 0.5B shape ours
  also runs with each GPU speed-up the trainer offers and keeps off until measured:
  gradient checkpointing, packing, padding_free, use_liger_kernel. Each of ours' arms has the
  preflight memory estimate (memory_estimate.parts_mib at the arm's settings and longest row)
  beside its measured peak;
- dpo, grpo: a few steps of each on the 0.5B shape, ours against TRL's defaults
  (bench/dpo_throughput.py, bench/grpo_throughput.py): pairs/s, completion tokens/s;
- qlora: ours on the 0.5B shape with 4-bit frozen weights (bitsandbytes), where it imports;
- worker: the inference worker's model load (worker.Models), its first token, and its decode
  (worker_decode.decode) at batch 1 and 8 against plain `generate` (bench/decode.py's
  timed_arms); on a GPU also the first token of the worker process as chat calls it;
- merge: a short run merged (trainers.merge_run, which reloads the merged folder with plain
  transformers and compares greedy tokens with base + adapter).

Each section runs in its own process with its own time budget (SECTIONS; the remaining
--budget-s caps each), so that one that fails, hangs or breaks the CUDA context costs only
itself: its error and the tail of its log go into the JSON, and the check goes on. The JSON is
rewritten after every section. Every figure is a ratio against a baseline measured in the same
process, or a reading with its card; none is asserted anywhere.

`--smoke` runs the same sections on tiny shapes (a 2-layer Qwen2 shape, 128-token rows, a
step or two), in this process, on the GPU where there is one, else on the CPU: seconds, and
the fast tier runs it (tests/bench/test_gpu_check.py) so the check cannot rot between GPU
sessions.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "scripts")]

MIB = 2**20
# Qwen2.5-0.5B's config.json (widths, depth, heads, vocabulary); the weights are random.
QWEN_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
            "num_attention_heads": 14, "num_key_value_heads": 2, "head_dim": 64,
            "vocab_size": 151936, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0, "tie_word_embeddings": True, "use_sliding_window": False,
            "initializer_range": 0.02}  # fmt: skip
# --smoke's stand-in: the same family, a few hundred thousand parameters.
QWEN_TINY = QWEN_05B | {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                        "vocab_size": 4096, "max_position_embeddings": 2048}  # fmt: skip
# Dense bf16 rates from the datasheets (TFLOP/s), by the name torch gives the card; MFU is
# also given against the rate measured in `check` (8192^3 products).
DATASHEET_TFLOPS = {"H100 PCIe": 756.0, "H100": 989.4, "H200": 989.4, "A100": 312.0}
# The sizes of a full check and of --smoke.
FULL = {"steps": 24, "batch_size": 4, "max_seq_len": 2048, "repeat": (8, 16), "train_rows": 160,
        "held_out": 16, "dpo_steps": 6, "dpo_max_length": 1024, "grpo_steps": 3,
        "grpo_prompts": 4, "group_size": 8, "max_new_tokens": 128, "decode_new": 128,
        "decode_batch": 8, "decode_prompts": 2, "merge_steps": 4, "matmul": 8192}  # fmt: skip
SMOKE = {"steps": 1, "batch_size": 2, "max_seq_len": 128, "repeat": (1, 1), "train_rows": 4,
         "held_out": 2, "dpo_steps": 1, "dpo_max_length": 96, "grpo_steps": 1,
         "grpo_prompts": 1, "group_size": 2, "max_new_tokens": 4, "decode_new": 4,
         "decode_batch": 2, "decode_prompts": 1, "merge_steps": 1, "matmul": 256}  # fmt: skip


def _now() -> float:
    return time.perf_counter()


# -- the machine -------------------------------------------------------------------------------


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def matmul_tflops(size: int, dev: str) -> float:
    """bf16 matrix-product rate, TFLOP/s: median of 10 products of random size^3 matrices
    after 3 warm-ups (never zeros: they run faster than real data)."""
    import torch

    a = torch.randn(size, size, dtype=torch.bfloat16, device=dev)
    b = torch.randn(size, size, dtype=torch.bfloat16, device=dev)
    times = []
    for i in range(13):
        if dev == "cuda":
            torch.cuda.synchronize()
        start = _now()
        a @ b
        if dev == "cuda":
            torch.cuda.synchronize()
        if i >= 3:
            times.append(_now() - start)
    return 2 * size**3 / statistics.median(times) / 1e12


def datasheet_tflops(name: str) -> float | None:
    """The card's dense bf16 rate from DATASHEET_TFLOPS (the longest name that matches)."""
    found = [k for k in DATASHEET_TFLOPS if k in name]
    return DATASHEET_TFLOPS[max(found, key=len)] if found else None


def section_check(ctx: argparse.Namespace) -> dict[str, Any]:
    """dragon.check(), torch's view of the device, library versions, the matmul rate."""
    from importlib import metadata

    import torch

    import dragonfarm_core as dragon

    facts = dragon.check(verbose=False)
    names = ("torch", "transformers", "trl", "datasets", "peft", "accelerate",
             "huggingface-hub", "tokenizers", "safetensors", "pyarrow", "pandas", "fsspec",
             "triton", "liger-kernel", "bitsandbytes")  # fmt: skip
    versions = {}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    out: dict[str, Any] = {"dragon_check": facts, "versions": versions, "device": ctx.device,
                           "torch_cuda": torch.version.cuda}  # fmt: skip
    if ctx.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        out |= {
            "gpu": props.name, "capability": list(torch.cuda.get_device_capability(0)),
            "multiprocessors": props.multi_processor_count,
            "total_mib": total / MIB, "free_mib": free / MIB,
            "bf16": torch.cuda.is_bf16_supported(),
            "sdpa_flash": torch.backends.cuda.flash_sdp_enabled(),
            "sdpa_mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "datasheet_bf16_tflops": datasheet_tflops(props.name),
        }  # fmt: skip
    out["matmul_bf16_tflops"] = matmul_tflops(ctx.sizes["matmul"], ctx.device)
    return out


# -- models and rows ---------------------------------------------------------------------------


def qwen_folder(ctx: argparse.Namespace) -> Path:
    """The Qwen2.5-0.5B shape (--smoke: QWEN_TINY), built once under bench/out/."""
    from decode import shaped_model

    if ctx.smoke:
        return shaped_model("qwen2-tiny", "qwen2", QWEN_TINY)
    return shaped_model("qwen2.5-0.5b", "qwen2", QWEN_05B)


def long_rows(ctx: argparse.Namespace) -> tuple[list, list]:
    """(train, held-out) conversations: the example tickets split as train_throughput splits
    them, each reply repeated `repeat` times (row i: low + i % (high - low + 1)), so that the
    rows run from about 1,100 to 2,000 tokens in a full check."""
    from train_throughput import ticket_conversations

    low, high = ctx.sizes["repeat"]

    def longer(rows: list[list[dict]]) -> list[list[dict]]:
        out = []
        for i, (ask, reply) in enumerate(rows):
            times = low + i % (high - low + 1)
            out.append([ask, {**reply, "content": "\n\n".join([reply["content"]] * times)}])
        return out

    train, held_out = ticket_conversations(42)
    return longer(train[: ctx.sizes["train_rows"]]), longer(held_out[: ctx.sizes["held_out"]])


def bench_opts(ctx: argparse.Namespace, model: Path, **more: Any) -> argparse.Namespace:
    """The options the bench scripts' run_ours and run_trl read."""
    s = ctx.sizes
    base = {"model": model, "steps": s["steps"], "batch_size": s["batch_size"], "grad_accum": 1,
            "max_seq_len": s["max_seq_len"], "lr": 2e-4, "seed": 42}  # fmt: skip
    return argparse.Namespace(**(base | more))


# -- memory and FLOPs --------------------------------------------------------------------------


@contextlib.contextmanager
def peak_memory(dev: str, into: dict[str, Any]) -> Any:
    """Measure the CUDA memory a block peaks at into `into`: the caching allocator's reserved
    and allocated peaks, and the CUDA context and other processes' use beside them (what the
    device had in use at the end, less what this process's allocator held)."""
    if dev != "cuda":
        yield
        return
    import torch

    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    yield
    free, total = torch.cuda.mem_get_info()
    context = (total - free - torch.cuda.memory_reserved()) / MIB
    into |= {"peak_reserved_mib": torch.cuda.max_memory_reserved() / MIB,
             "peak_allocated_mib": torch.cuda.max_memory_allocated() / MIB,
             "context_mib": context,
             "peak_mib": torch.cuda.max_memory_reserved() / MIB + context}  # fmt: skip


def token_lengths(model: Path, rows: list[list[dict]], max_seq_len: int) -> list[int]:
    """Each row's length in tokens as the trainer encodes it (cut at max_seq_len)."""
    from dragonfarm_core.rundir.train_config import ModelSpec
    from dragonfarm_core.trainers import modeling, sft_data

    tokenizer = modeling.load_tokenizer(ModelSpec(name="bench", base=str(model)))
    return list(sft_data.encode(tokenizer, rows, max_seq_len).lengths)


def train_flops(model: Path, lengths: list[int]) -> float:
    """Model FLOPs a trained token costs in LoRA training, averaged over the rows' tokens:
    4 N (2 N forward through the linear layers and the LM head, 2 N back to the activations:
    the frozen weights take no gradient; the adapters' own FLOPs are left out) plus causal
    attention, 2 q L a layer forward (half the score matrix, row length L) and twice that back.
    The LM head is counted at every position, where ours applies it only at learned ones."""
    from dragonfarm_core.memory_estimate import Shape

    shape = Shape.read(model)
    assert shape is not None
    linear = shape.layers * sum(a * b for a, b in shape.linears().values())
    head = shape.vocab * shape.hidden
    mean_context = sum(n * n for n in lengths) / sum(lengths)  # per token, rows weighted
    attention = 6 * shape.layers * shape.heads * shape.head_dim * mean_context
    return 4 * (linear + head) + attention


def arm_estimate(ctx: argparse.Namespace, model: Path, longest: int,
                 arm: tuple[dict, dict]) -> dict[str, Any]:  # fmt: skip
    """The preflight estimate (memory_estimate.parts_mib) of one of ours' SFT arms: its
    settings ((Hardware fields, TrainArgs fields)), the longest row as the batch length (a
    packed sequence's: max_seq_len)."""
    from dragonfarm_core import memory_estimate
    from dragonfarm_core.rundir import allocator

    shape = memory_estimate.Shape.read(model)
    assert shape is not None
    hardware, args = arm
    packed = args.get("extra", {}).get("packing", False)
    settings = {"device": ctx.device, "dtype": "auto",
                "load_in_4bit": hardware.get("load_in_4bit", False), "r": 16,
                "targets": "auto", "method": "sft", "method_args": None,
                "batch_size": ctx.sizes["batch_size"], "grad_accum": 1,
                "seq_len": ctx.sizes["max_seq_len"] if packed else longest,
                "max_seq_len": ctx.sizes["max_seq_len"],
                "gradient_checkpointing": args.get("gradient_checkpointing", False),
                "fast_malloc": allocator.fast_allocator() is not None}  # fmt: skip
    parts = memory_estimate.parts_mib(shape, settings)
    return {"estimate_mib": sum(parts.values()), "estimate_parts": parts}


# -- SFT -----------------------------------------------------------------------------------------

# Ours' arms on the 0.5B shape: (name, Hardware fields, TrainArgs fields). "ours" is the
# default; the others add one GPU speed-up each, all off by default until measured.
SPEED_UPS: list[tuple[str, dict, dict]] = [
    ("ours", {}, {}),
    ("ours_checkpointing", {}, {"gradient_checkpointing": True}),
    ("ours_packing", {}, {"extra": {"packing": True}}),
    ("ours_padding_free", {}, {"extra": {"padding_free": True}}),
    ("ours_liger", {}, {"extra": {"use_liger_kernel": True}}),
]


def liger_skip(ctx: argparse.Namespace) -> str | None:
    import importlib.util

    if ctx.device != "cuda":
        return "Liger's kernels are Triton's: a CUDA GPU only"
    if importlib.util.find_spec("liger_kernel") is None:
        return "liger-kernel is not installed (scripts/device_wheels.sh carries it)"
    return None


def sft_section(ctx: argparse.Namespace, model: Path, arms: list[tuple],
                trl: bool = True) -> dict[str, Any]:  # fmt: skip
    """Ours' arms (and TRL's) on the same rows, one evaluator, the ratios and ours' MFU."""
    import train_throughput

    train, held_out = long_rows(ctx)
    opts = bench_opts(ctx, model)
    lengths = token_lengths(model, train, ctx.sizes["max_seq_len"])
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    if ctx.device != "cuda":
        skipped["peak_mib"] = ("on a CPU the arms share this process's peak RSS "
                               "(bench/train_throughput.py measures them apart)")  # fmt: skip
    hardware = {"device": ctx.device}
    arms_by_name = {name: (hw, args) for name, hw, args in arms}
    runs: list[tuple[str, Callable[[], dict]]] = []
    for name, more_hw, args in arms:
        if name == "ours_liger" and (why := liger_skip(ctx)):
            skipped[name] = why
            continue
        runs.append((name, lambda hw=hardware | more_hw, a=args, n=name: (
            train_throughput.run_ours(opts, ctx.work, rows=(train, held_out), hardware=hw,
                                      args=a, name=n))))  # fmt: skip
    if trl:
        runs.append(("trl", lambda: train_throughput.run_trl(
            opts, ctx.work, rows=(train, held_out), device=ctx.device)))  # fmt: skip
    for name, run in runs:
        arm: dict[str, Any] = {}
        start = _now()
        try:
            with peak_memory(ctx.device, arm):
                arm |= run()
        except Exception as exc:  # noqa: BLE001 - an arm's failure is a finding; the rest go on
            results[name] = {"error": describe(exc), "traceback": traceback_tail(exc)}
            continue
        arm["wall_s"] = _now() - start  # model load, tokenization and evaluations included
        arm["tokens_per_s"] = arm["tokens"] / arm["seconds"]
        if name != "trl":
            arm |= arm_estimate(ctx, model, max(lengths), arms_by_name[name])
            if "peak_mib" in arm:
                arm["estimate_error"] = arm["estimate_mib"] / arm["peak_mib"] - 1
        results[name] = arm
    adapters = {n: r["adapter"] for n, r in results.items() if "adapter" in r}
    try:
        losses = train_throughput.held_out_losses(model, adapters, held_out,
                                                  ctx.sizes["max_seq_len"], ctx.device)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the speeds stand without it
        losses = {}
        skipped["eval_loss"] = f"the evaluator failed: {describe(exc)}"
    for name, loss in losses.items():
        results[name]["eval_loss"] = loss
    out: dict[str, Any] = {"arms": results, "rows": len(train),
                           "row_tokens": [min(lengths), max(lengths)]}  # fmt: skip
    ours, baseline = results.get(arms[0][0], {}), results.get("trl", {})
    if "tokens_per_s" in ours and "tokens_per_s" in baseline:
        out["tokens_per_s_ratio"] = ours["tokens_per_s"] / baseline["tokens_per_s"]
        if "eval_loss" in ours and "eval_loss" in baseline:
            out["eval_loss_ratio"] = ours["eval_loss"] / baseline["eval_loss"]
        if "peak_mib" in ours and "peak_mib" in baseline:
            out["peak_memory_ratio"] = ours["peak_mib"] / baseline["peak_mib"]
    if "tokens_per_s" in ours:
        achieved = ours["tokens_per_s"] * train_flops(model, lengths) / 1e12
        out["ours_tflops"] = achieved
        if ctx.peak_tflops:
            out["mfu"] = achieved / ctx.peak_tflops
    errors = [r["estimate_error"] for r in results.values() if "estimate_error" in r]
    if errors:
        out["estimate_worst_error"] = max(errors, key=abs)
    if skipped:
        out["skipped"] = skipped
    return out


def section_sft_bundled(ctx: argparse.Namespace) -> dict[str, Any]:
    from dragonfarm_core.models import bundled_model_path

    # --smoke: TRL's arm runs in sft_qwen (the fast tier's time is precious)
    return sft_section(ctx, bundled_model_path(), SPEED_UPS[:1], trl=not ctx.smoke)


def section_sft_qwen(ctx: argparse.Namespace) -> dict[str, Any]:
    # --smoke leaves out gradient checkpointing, a setting the trainer tests cover on a CPU
    arms = [a for a in SPEED_UPS if not (ctx.smoke and a[0] == "ours_checkpointing")]
    return sft_section(ctx, qwen_folder(ctx), arms)


# -- DPO, GRPO, QLoRA ----------------------------------------------------------------------------


def two_arms(ctx: argparse.Namespace, module: Any, opts: argparse.Namespace,
             rate: Callable[[dict], float]) -> dict[str, Any]:  # fmt: skip
    """A bench script's run_ours and run_trl, one after the other in this process: each
    arm's `rate`, peak memory and error, and ours over TRL."""
    out: dict[str, Any] = {}
    for name in ("ours", "trl"):
        arm: dict[str, Any] = {}
        work = ctx.work / name
        work.mkdir(parents=True, exist_ok=True)
        try:
            with peak_memory(ctx.device, arm):
                arm |= getattr(module, f"run_{name}")(opts, work, ctx.device)
            arm["rate"] = rate(arm)
        except Exception as exc:  # noqa: BLE001 - recorded; the other arm still runs
            arm = {"error": describe(exc), "traceback": traceback_tail(exc)}
        out[name] = arm
    if "rate" in out["ours"] and "rate" in out["trl"]:
        out["ratio"] = out["ours"]["rate"] / out["trl"]["rate"]
        if "peak_mib" in out["ours"] and "peak_mib" in out["trl"]:
            out["peak_memory_ratio"] = out["ours"]["peak_mib"] / out["trl"]["peak_mib"]
    return out


def section_dpo(ctx: argparse.Namespace) -> dict[str, Any]:
    """Pairs/s of DPO, ours against TRL's DPOTrainer with its defaults."""
    import dpo_throughput

    s = ctx.sizes
    opts = bench_opts(ctx, qwen_folder(ctx), method="dpo", steps=s["dpo_steps"],
                      max_length=s["dpo_max_length"], lr=5e-4)  # fmt: skip
    pairs = opts.steps * opts.batch_size * opts.grad_accum
    return {"unit": "pairs/s"} | two_arms(ctx, dpo_throughput, opts,
                                          lambda arm: pairs / arm["seconds"])  # fmt: skip


def section_grpo(ctx: argparse.Namespace) -> dict[str, Any]:
    """Completion tokens/s of GRPO steps, ours against TRL's GRPOTrainer with its defaults."""
    import grpo_throughput

    s = ctx.sizes
    opts = bench_opts(ctx, qwen_folder(ctx), steps=s["grpo_steps"], prompts=s["grpo_prompts"],
                      group_size=s["group_size"], max_new_tokens=s["max_new_tokens"],
                      beta=0.04, lr=2e-3, lora_dropout=0.05)  # fmt: skip
    return {"unit": "completion tokens/s"} | two_arms(
        ctx, grpo_throughput, opts, lambda arm: arm["tokens"] / arm["seconds"]
    )


def section_qlora(ctx: argparse.Namespace) -> dict[str, Any]:
    """Ours with 4-bit frozen weights (bitsandbytes) on the 0.5B shape."""
    import importlib.util

    if ctx.device != "cuda":
        return {"skipped": "QLoRA needs an NVIDIA GPU (bitsandbytes' 4-bit kernels)"}
    if importlib.util.find_spec("bitsandbytes") is None:
        return {"skipped": "bitsandbytes is not installed (scripts/device_wheels.sh carries it)"}
    return sft_section(ctx, qwen_folder(ctx), [("ours_4bit", {"load_in_4bit": True}, {})],
                       trl=False)  # fmt: skip


# -- the worker and merge ------------------------------------------------------------------------


def section_worker(ctx: argparse.Namespace) -> dict[str, Any]:
    """The worker's load, first token and decode against plain generate() on the 0.5B
    shape, in this process; on a GPU also the worker process's first token, as chat calls it."""
    import torch
    from chat_latency import prompts
    from decode import prompt_ids, timed_arms, worker_first_token
    from transformers import AutoModelForCausalLM

    from dragonfarm_core.inference import worker
    from dragonfarm_core.inference.target import resolve_target
    from dragonfarm_core.inference.worker_decode import Decoding, cpu_threads, decode

    s, folder = ctx.sizes, qwen_folder(ctx)
    dev, dtype = worker.pick_device(ctx.device, "auto")
    models = worker.Models(dev, dtype, worker.cpu_half_from(dev, "auto"), worker.cpu_half_dtype())
    start = _now()
    model, tokenizer = models.load(resolve_target(str(folder)).spec.as_dict())
    load_s = _now() - start
    texts = prompts(s["decode_prompts"])
    rows = prompt_ids(folder, texts)
    pad = tokenizer.pad_token_id
    plain_model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(dev).eval()

    def plain(ids: torch.Tensor, mask: torch.Tensor, new: int = s["decode_new"]) -> None:
        with torch.inference_mode():
            plain_model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                                 min_new_tokens=new, do_sample=False, pad_token_id=pad)  # fmt: skip

    def ours(ids: torch.Tensor, mask: torch.Tensor, new: int = s["decode_new"]) -> None:
        with torch.inference_mode(), cpu_threads(model, len(ids)):
            decode(model, ids, mask, Decoding(), max_new_tokens=new, stop=[], pad_id=pad)

    speeds = timed_arms({"plain": plain, "ours": ours}, rows, s["decode_batch"],
                        s["decode_new"], pad, dev)  # fmt: skip
    firsts = timed_arms({"first": lambda i, m: ours(i, m, 1)}, rows, 1, 1, pad, dev)
    out: dict[str, Any] = {"device": dev, "dtype": str(dtype), "load_s": load_s,
                           "first_token_s": 1 / firsts["first_b1"], **speeds}  # fmt: skip
    for size in (1, s["decode_batch"]):
        out[f"ours_over_plain_b{size}"] = speeds[f"ours_b{size}"] / speeds[f"plain_b{size}"]
    if ctx.smoke:
        out["skipped"] = {"worker_process_first_token_s": "--smoke: the worker process is "
                          "timed in a full check only"}  # fmt: skip
    else:
        out["worker_process_first_token_s"] = worker_first_token(folder, texts)
    return out


def section_merge(ctx: argparse.Namespace) -> dict[str, Any]:
    """sft_bundled's run of ours (a short one of its own when that section did not run or
    failed), merged; merge_run reloads the merged folder with plain transformers and compares
    its greedy tokens with base + adapter."""
    import train_throughput

    from dragonfarm_core.models import bundled_model_path
    from dragonfarm_core.rundir import files
    from dragonfarm_core.trainers.merge_run import merge_run

    run_dir = ctx.root_work / "sft_bundled" / "ours-run"
    if (files.read_status(run_dir) or {}).get("state") != "succeeded":
        opts = bench_opts(ctx, bundled_model_path(), steps=ctx.sizes["merge_steps"])
        run_dir = Path(train_throughput.run_ours(opts, ctx.work, rows=long_rows(ctx),
                                                 hardware={"device": ctx.device},
                                                 name="merge")["run_dir"])  # fmt: skip
    start = _now()
    check = merge_run(run_dir, ctx.work / "merged")
    return {"identical": check["identical"], "prompts": check["prompts"],
            "dtype": check["dtype"], "device": check["device"],
            "merge_s": _now() - start}  # fmt: skip


# Each section: (function, time budget in seconds on a GPU), in the order they run.
SECTIONS: dict[str, tuple[Callable[[argparse.Namespace], dict[str, Any]], int]] = {
    "check": (section_check, 40),
    "sft_bundled": (section_sft_bundled, 45),
    "sft_qwen": (section_sft_qwen, 150),
    "dpo": (section_dpo, 50),
    "grpo": (section_grpo, 60),
    "qlora": (section_qlora, 45),
    "worker": (section_worker, 60),
    "merge": (section_merge, 45),
}


# -- running the sections ------------------------------------------------------------------------


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:500]


def traceback_tail(exc: BaseException, lines: int = 12) -> list[str]:
    return "".join(traceback.format_exception(exc)).splitlines()[-lines:]


def run_here(ctx: argparse.Namespace, name: str) -> dict[str, Any]:
    """One section in this process: its figures, or its error and traceback."""
    ctx.work = ctx.root_work / name
    ctx.work.mkdir(parents=True, exist_ok=True)
    start = _now()
    try:
        figures = SECTIONS[name][0](ctx)
    except Exception as exc:  # noqa: BLE001 - recorded; the next section runs
        return {"status": "error", "error": describe(exc), "traceback": traceback_tail(exc),
                "seconds": _now() - start}  # fmt: skip
    status = "skipped" if set(figures) == {"skipped"} else "ok"
    return {"status": status, "seconds": _now() - start, **figures}


def run_apart(ctx: argparse.Namespace, name: str, budget: float) -> dict[str, Any]:
    """One section in a child process of this script, killed past `budget` seconds."""
    result = ctx.root_work / f"{name}.json"
    log = ctx.root_work / f"{name}.log"
    result.unlink(missing_ok=True)
    argv = [sys.executable, __file__, "--section", name, "--work", str(ctx.root_work)]
    if ctx.smoke:
        argv.append("--smoke")
    if ctx.peak_tflops:
        argv.append(f"--peak-tflops={ctx.peak_tflops}")
    start = _now()
    with open(log, "w") as out:
        # its own process group, so that what it started (a worker process, a probe) goes too
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                 start_new_session=True)  # fmt: skip
        try:
            code: int | None = child.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            code = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)  # what is left of it, the child included
        child.wait()
    if code == 0 and result.is_file():
        return json.loads(result.read_text())
    tail = log.read_text(errors="replace").splitlines()[-12:]
    error = f"ran past its budget of {budget:.0f} s" if code is None else f"exited with {code}"
    return {"status": "error", "error": error, "log_tail": tail, "seconds": _now() - start}


def headline(report: dict[str, Any]) -> str:
    """The last line: the figures the issue's targets name, key=value."""
    sections = report["sections"]

    def get(section: str, *keys: str) -> Any:
        value: Any = sections.get(section, {})
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    line = {
        "sections_ok": sum(s.get("status") == "ok" for s in sections.values()),
        "sections": len(sections),
        "sft_tokens_per_s": get("sft_qwen", "tokens_per_s_ratio"),
        "sft_peak_memory": get("sft_qwen", "peak_memory_ratio"),
        "sft_eval_loss": get("sft_qwen", "eval_loss_ratio"),
        "mfu": get("sft_qwen", "mfu"),
        "estimate_worst_error": get("sft_qwen", "estimate_worst_error"),
        "dpo_pairs_per_s": get("dpo", "ratio"),
        "grpo_completion_tokens_per_s": get("grpo", "ratio"),
        "decode_b1": get("worker", "ours_over_plain_b1"),
        "merge_identical": get("merge", "identical"),
    }
    return " ".join(f"{k}={_short(v)}" for k, v in line.items())


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "none" if value is None else str(value)


def finite_json(value: Any) -> Any:
    """`value` with NaN and infinities as null (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def default_out() -> Path:
    where = os.environ.get("OUT")
    return Path(where) / "gpu_check.json" if where else ROOT / "bench" / "out" / "gpu_check.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes, in this process: seconds on a CPU")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    parser.add_argument("--only", nargs="+", choices=list(SECTIONS), help="these sections only")
    parser.add_argument("--budget-s", type=float, default=510,
                        help="all sections together stop within this many seconds")  # fmt: skip
    parser.add_argument(
        "--apart",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="each section in its own process (default: unless --smoke)",
    )
    parser.add_argument("--section", choices=list(SECTIONS), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "out" / "gpu_check",
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--peak-tflops", type=float, default=None, help=argparse.SUPPRESS)
    ctx = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the Hub; a GPU has no net
    if ctx.smoke:
        # One CPU thread: the smoke's figures mean nothing, and beside other tests two threads
        # spinning in OpenMP's waits made each tiny forward pass 0.4 s (merge's greedy check)
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    ctx.sizes, ctx.root_work = (SMOKE if ctx.smoke else FULL), ctx.work
    ctx.device = device()
    if ctx.section:  # a child of run_apart
        result = run_here(ctx, ctx.section)
        (ctx.root_work / f"{ctx.section}.json").write_text(json.dumps(finite_json(result)))
        return
    import shutil

    shutil.rmtree(ctx.root_work, ignore_errors=True)
    ctx.root_work.mkdir(parents=True)
    out = ctx.out or default_out()
    out.parent.mkdir(parents=True, exist_ok=True)
    apart = not ctx.smoke if ctx.apart is None else ctx.apart
    report: dict[str, Any] = {"smoke": ctx.smoke, "device": ctx.device, "apart": apart,
                              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "sections": {}}  # fmt: skip
    started = _now()
    for name in ctx.only or SECTIONS:
        left = ctx.budget_s - (_now() - started)
        budget = min(SECTIONS[name][1], left) if not ctx.smoke else left
        if budget < 5:
            report["sections"][name] = {"status": "error", "error": "no time left in --budget-s"}
            continue
        print(f"[gpu_check] {name} (budget {budget:.0f} s)", file=sys.stderr, flush=True)
        result = run_apart(ctx, name, budget) if apart else run_here(ctx, name)
        result["budget_s"] = budget
        report["sections"][name] = result
        if name == "check" and not ctx.peak_tflops:
            # MFU's denominator for the later sections: the datasheet's, else the measured rate
            ctx.peak_tflops = result.get("datasheet_bf16_tflops") or result.get(
                "matmul_bf16_tflops"
            )
        report["seconds"] = _now() - started
        out.write_text(json.dumps(finite_json(report), indent=1))
        print(f"[gpu_check] {name}: {result['status']} in {result.get('seconds', 0):.1f} s"
              + (f" ({result['error']})" if "error" in result else ""),
              file=sys.stderr, flush=True)  # fmt: skip
    print(f"[gpu_check] wrote {out}", file=sys.stderr)
    print(headline(report))


if __name__ == "__main__":
    main()
