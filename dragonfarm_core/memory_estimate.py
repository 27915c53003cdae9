"""Preflight: will a run fit in its device's memory? An estimate before anything is launched.

    est = dragon.preflight(spec)            # Estimate: peak_mib, available_mib, parts, fits, fixes
    print(est.summary())

`start()` refuses a run whose estimate does not fit (PreflightError, with the changes that would
make it fit: a smaller batch with more accumulation, gradient checkpointing, 4-bit, shorter
sequences), before its folder is written. The estimate needs no torch: it reads the model's
config.json and adds up

    runtime      the trainer process before the model loads (Python, torch, transformers, peft)
    weights      the frozen base in its dtype (bf16/fp16 on a GPU; on a CPU bf16 for a model of
                 CPU_BFLOAT16_FROM parameters on a CPU with bf16 instructions, else float32;
                 4-bit)
    lora         LoRA weights, gradients and the two Adam moments, float32
    activations  what a decoder layer keeps for the backward pass, per token, at the batch's
                 length (with gradient checkpointing, the measured share of that);
                 on a CPU also the attention scores and probabilities (torch's math path);
                 SFT on a CPU counts the largest row chunk of a batch up to that
                 length (largest_cpu_chunk)
    logits       the LM head's float32 log-softmax at the learned positions, kept for the
                 backward (the head runs over slices of them: modeling.HEAD_SLICE_BYTES)

The batch's length is the longest training row (characters / CHARS_PER_TOKEN, capped at
max_seq_len): batches are grouped by length, so the longest batch sets the peak. DPO and ORPO
rows carry a chosen and a rejected reply (twice the sequences); GRPO runs batch_size prompts
times group_size completions of max_new_tokens each. The coefficients are checked against
measured peaks (peak RSS on a CPU, in status.json as peak_memory_mib) by bench/preflight.py;
its last line gives the error.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from dragonfarm_core.rundir import (
    allocator,  # ctypes only: no torch in the app
    queue,
)
from dragonfarm_core.settings import SettingsError

MIB = 2**20
CHARS_PER_TOKEN = 3.0  # rows without a tokenizer: a little more tokens than the usual 4
# The process (+ CUDA context) before the model loads: 525 MiB measured on a CPU (2026-12-06).
RUNTIME_MIB = {"cpu": 525.0, "cuda": 1045.0, "mps": 645.0}
LEARNED_FRACTION = 0.5  # the share of positions the LM head is applied at (the replies)
CHECKPOINTED_SHARE = 0.4  # activations kept with gradient checkpointing (see parts_mib)
# The peak over what the layers keep: the backward's gradients and temporaries and the
# allocator's slack. Fitted on bench/preflight.py's six settings (2026-12-06: 1.17-1.31 on five,
# 0.92 on the sixth, the bundled model at 8 x 759 tokens in float32), before the LM head ran in
# slices; with them (and the log-softmax kept once) -5 % to +6 % on five, +26 % on that one.
BACKWARD_SLACK = 1.2
# A trainer on a CPU with tcmalloc or jemalloc preloaded (rundir/allocator.py) peaks at what
# it uses, without glibc heap's holes (which is what the attention term in parts_mib had been
# fitted to): fitted on bench/preflight.py's six settings (2026-12-06, tcmalloc), the activations
# without that term, times 1.3 (measured over counted 1.25-1.51), and 0.22 of them kept with
# gradient checkpointing (0.16 on the 135M shape, 0.29 on the bundled model).
FAST_MALLOC_SLACK = 1.3
FAST_MALLOC_CHECKPOINTED_SHARE = 0.22
# On a CPU the SFT trainer takes a micro-batch's rows through forward and backward in chunks
# when what the layers keep for the backward would pass CHUNK_KEPT_MIB (cpu_chunk_rows): the
# same gradient, summed chunk by chunk, with one chunk's activations alive at a time. The
# SmolLM2-135M shape (bfloat16, LoRA r=16 on all linears, tcmalloc), steps taking turns in one
# process: 4 x 215 tokens whole or in two chunks of 2 rows 3.22 against 3.25 s (peak RSS 1,682
# against 1,319 MiB); chunks of about 300 tokens cost 8-11 % (4 x 150 in 2-row chunks 2.98
# against 2.77 s; 4 x 300 in 1-row chunks 5.25 against 4.74), of 215 tokens 25 %. Chunks
# of at least MIN_CHUNK_TOKENS: bench/train_throughput.py on that shape, whole batches (no
# chunks) 1,792 MiB; at least 400 tokens (batches under 800 tokens stay whole) 223 tokens/s
# and 1,696 MiB; at least 256, 234 tokens/s and 1,410 MiB. The bundled model at 4 x 200 tokens
# keeps ~90 MiB and is not split (two chunks there cost 10 %: 0.275 against 0.25 s a step).
CHUNK_KEPT_MIB = 256
MIN_CHUNK_TOKENS = 256
HEADROOM = 0.9  # a run fits when its estimate is at most this share of the device's memory
# dtype auto on a CPU with bf16 instructions (AVX512-BF16 or AMX): models this large keep their
# frozen weights in bfloat16. bench/train_throughput.py, ours, 2-core AVX512-BF16 VM, bf16 over
# float32: 5.5M parameters (the bundled model) 1.04-1.18x tokens/s at 1.06-1.10x peak RSS;
# 21M (hidden 256, 12 layers, 49k vocabulary) 1.14-1.31x at 0.98x; 38M (hidden 384) 1.28x at
# 0.93x; 135M (SmolLM2's shape) 1.25-1.45x at 0.80-0.85x. Without those instructions bf16 is
# emulated. (The bundled model's RSS figure is with placement.ONEDNN_CACHE; uncapped 1.51x.)
CPU_BFLOAT16_FROM = 20_000_000
LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class PreflightError(SettingsError):
    """The run would not fit in its device's memory; the message lists what would fit."""


@dataclass(frozen=True)
class Estimate:
    device: str  # "cpu", "cuda:0", "mps"
    peak_mib: float
    available_mib: float | None  # None: the device's memory is not known here
    parts: dict[str, float] = field(default_factory=dict)
    fixes: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return self.available_mib is None or self.peak_mib <= HEADROOM * self.available_mib

    def refusal(self) -> str:
        """The sentence a run that does not fit is refused with."""
        fixes = "; ".join(self.fixes) if self.fixes else (
            "none of the usual changes is enough: pick a smaller model or a device with more "
            "memory"
        )  # fmt: skip
        return f"This run would not fit in memory. {self.summary()} What would fit: {fixes}."

    def summary(self) -> str:
        """One line: the estimate, against what the device has."""
        have = (
            f" of {_gib(self.available_mib)} available on {self.device}"
            if self.available_mib is not None
            else f" on {self.device} (its memory is not known here)"
        )
        parts = ", ".join(f"{k} {_gib(v)}" for k, v in self.parts.items())
        return f"Estimated peak memory {_gib(self.peak_mib)}{have} ({parts})."


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


@dataclass(frozen=True)
class Shape:
    """What the estimate needs from a model's config.json (a decoder-only transformer)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    @classmethod
    def read(cls, model_dir: str | os.PathLike[str]) -> Shape | None:
        """The shape in the folder's config.json; None when it does not say its sizes."""
        try:
            config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        config = config.get("text_config", config)  # a multimodal model's language part
        hidden = config.get("hidden_size") or config.get("n_embd") or config.get("d_model")
        if not isinstance(hidden, int) or hidden <= 0:
            return None
        heads = int(config.get("num_attention_heads") or config.get("n_head") or 1)
        return cls(
            hidden=hidden,
            intermediate=int(
                config.get("intermediate_size") or config.get("n_inner") or 4 * hidden
            ),
            layers=int(config.get("num_hidden_layers") or config.get("n_layer") or 1),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            vocab=int(config.get("vocab_size") or 32000),
            tied=bool(config.get("tie_word_embeddings", True)),
        )

    def linears(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one decoder layer."""
        q, kv, h, i = (
            self.heads * self.head_dim,
            self.kv_heads * self.head_dim,
            self.hidden,
            self.intermediate,
        )
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}  # fmt: skip

    def params(self) -> int:
        per_layer = sum(a * b for a, b in self.linears().values()) + 2 * self.hidden
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return embeddings + self.layers * per_layer + self.hidden


def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU has bfloat16 instructions (the avx512_bf16 or amx_bf16 flag). Read
    from /proc/cpuinfo, without torch, so that the app's estimate and the trainer's choice
    agree; False where there is no such file (macOS, Windows: float32 stays their CPU dtype)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return bool({"avx512_bf16", "amx_bf16"} & set(line.split()))
    except OSError:
        pass
    return False


def cpu_weights_dtype(params: int | None) -> str:
    """The frozen weights' dtype for `dtype="auto"` on a CPU: "bfloat16" for a model of
    CPU_BFLOAT16_FROM parameters or more on a CPU with bf16 instructions, else "float32"
    (also when the size is not known)."""
    if params is not None and params >= CPU_BFLOAT16_FROM and cpu_has_bf16():
        return "bfloat16"
    return "float32"


def _weight_bytes(shape: Shape, device: str, dtype: str, load_in_4bit: bool) -> float:
    if load_in_4bit:
        return 0.56  # 4-bit blocks with their scales
    if dtype == "auto":
        dtype = cpu_weights_dtype(shape.params()) if device == "cpu" else "bfloat16"
    return 2.0 if dtype in ("bfloat16", "float16") else 4.0


def _lora_params(shape: Shape, r: int, targets: Any) -> int:
    names = LINEAR_NAMES if targets == "auto" else tuple(targets)
    chosen = [
        (a, b) for name, (a, b) in shape.linears().items() if any(name.endswith(t) for t in names)
    ]
    return shape.layers * sum(r * (a + b) for a, b in chosen)


def _sequences(method: str, batch: int, method_args: Any) -> int:
    if method in ("dpo", "orpo"):
        return 2 * batch
    if method == "grpo":
        return batch * int(getattr(method_args, "group_size", 4))
    return batch


def kept_bytes_per_token(shape: Shape, abytes: float) -> float:
    """What the decoder layers keep for the backward per token, activations `abytes` wide
    (counted on the 135M shape's autograd graph): in each layer each norm's float32 input; in
    the compute dtype the two norms' outputs (what LoRA's A reads, modeling.LoraDelta), q, k,
    v and the attention output, the MLP's gate, activation, up and product; and LoRA's dropout
    masks, one per adapted input, as bits. (On a CPU modeling.SiluMul keeps no activation; the
    count, which the slack was fitted with, still has it.)"""
    h, i = shape.hidden, shape.intermediate
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    per_layer = 2 * h * 4 + abytes * (2 * h + 2 * q + 2 * kv + 4 * i) + (5 * h + q + i) / 8
    return shape.layers * per_layer


def cpu_chunk_rows(rows: int, length: int, kept_per_token: float) -> int:
    """How many of a micro-batch's `rows` (padded to `length` tokens) the SFT trainer takes
    through forward and backward at once on a CPU: all of them, unless what the layers keep
    (`kept_per_token`, kept_bytes_per_token) would pass CHUNK_KEPT_MIB; then as few as keep
    under it, in chunks of at least MIN_CHUNK_TOKENS tokens, split evenly."""
    tokens = rows * length
    chunks = min(
        rows,
        math.ceil(tokens * kept_per_token / (CHUNK_KEPT_MIB * MIB)),
        tokens // MIN_CHUNK_TOKENS,
    )
    return math.ceil(rows / max(1, chunks))


def largest_cpu_chunk(rows: int, length: int, kept_per_token: float) -> int:
    """The most tokens one chunk of `cpu_chunk_rows` holds over batches of `rows` rows padded
    to any length up to `length`: a batch a little shorter than `length` can stay whole (its
    chunks would fall under MIN_CHUNK_TOKENS) where one of `length` tokens is split, so the
    longest batch need not set the peak. The chunk count only grows with the length, so the
    most is at `length` or at the last length before the count grows; each is looked at."""
    ends = {length}
    for chunks in range(1, rows):  # the longest length that still takes `chunks` chunks
        by_memory = math.floor(chunks * CHUNK_KEPT_MIB * MIB / (rows * kept_per_token))
        by_size = math.ceil((chunks + 1) * MIN_CHUNK_TOKENS / rows) - 1
        end = min(length, max(by_memory, by_size))
        ends.update(n for n in (end - 1, end, end + 1) if 1 <= n <= length)
    return max(cpu_chunk_rows(rows, n, kept_per_token) * n for n in ends)


def parts_mib(shape: Shape, settings: dict[str, Any]) -> dict[str, float]:
    """The estimate's parts, in MiB, for settings: device, dtype, load_in_4bit, r, targets,
    method, method_args, batch_size, seq_len, gradient_checkpointing, and fast_malloc (the
    trainer runs on tcmalloc or jemalloc; default False)."""
    device = settings["device"].partition(":")[0]
    wbytes = _weight_bytes(shape, device, settings["dtype"], settings["load_in_4bit"])
    abytes = 4.0 if wbytes == 4.0 else 2.0  # activations in the compute dtype
    sequences = _sequences(settings["method"], settings["batch_size"], settings["method_args"])
    tokens = sequences * settings["seq_len"]
    kept = kept_bytes_per_token(shape, abytes)
    if device == "cpu" and settings["method"] == "sft" and not settings["gradient_checkpointing"]:
        tokens = largest_cpu_chunk(sequences, settings["seq_len"], kept)
    fast_malloc = device == "cpu" and settings.get("fast_malloc", False)
    if device != "cuda" and not fast_malloc:
        # On a CPU (and MPS) the peak also grows with heads x length per token: the
        # attention's buffers (the autograd graph shows torch's flash kernel for CPU, padded
        # batches included, keeping no scores, but without this term the 135M shape's
        # estimates fall 20-28 % under the measured peaks at 512 tokens). CUDA's keep none.
        kept += shape.layers * abytes * 2 * shape.heads * settings["seq_len"]
    if settings["gradient_checkpointing"]:
        # Measured, not the textbook "each layer's input plus one layer": on the 135M shape
        # (batch 4, 512 tokens, CPU) the peak kept CHECKPOINTED_SHARE of the activations the
        # run without checkpointing kept (recomputation's buffers and gradients, and the
        # allocator's slack); bench/preflight.py checks it on another model.
        share = FAST_MALLOC_CHECKPOINTED_SHARE if fast_malloc else CHECKPOINTED_SHARE
        kept = max(shape.layers * shape.hidden * abytes + kept / shape.layers, share * kept)
    slack = FAST_MALLOC_SLACK if fast_malloc else BACKWARD_SLACK
    return {
        "runtime": RUNTIME_MIB.get(device, RUNTIME_MIB["cpu"]),
        "weights": shape.params() * wbytes / MIB,
        "lora": _lora_params(shape, settings["r"], settings["targets"]) * 16 / MIB,
        "activations": tokens * kept * slack / MIB,
        "logits": tokens * LEARNED_FRACTION * shape.vocab * 4 / MIB,
    }


def available_mib(device: str) -> float | None:
    """Memory the device has for a run: the CPU's available RAM (MPS shares it), a GPU's total
    from nvidia-smi (a run waits in the queue for the device, so others' runs have ended)."""
    if device in ("cpu", "mps"):
        return psutil.virtual_memory().available / MIB
    index = device.partition(":")[2] or "0"
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={index}", "--query-gpu=memory.total",
             "--format=csv,noheader,nounits"],  # fmt: skip
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
        return float(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _settings(spec: Any, rows: list[dict[str, Any]] | None) -> dict[str, Any]:
    args, hw, lora = spec.args, spec.hardware, spec.lora
    method_args = spec.method_args
    if spec.method == "grpo":
        longest = _longest_tokens(rows) + int(getattr(method_args, "max_new_tokens", 128))
    else:
        longest = _longest_tokens(rows)
    return {
        "device": queue.resolve_device(hw.device),
        "dtype": hw.dtype,
        "load_in_4bit": hw.load_in_4bit,
        "r": lora.r,
        "targets": lora.target_modules,
        "method": spec.method,
        "method_args": method_args,
        "batch_size": args.batch_size,
        "grad_accum": args.grad_accum,
        "seq_len": min(args.max_seq_len, longest) if longest else args.max_seq_len,
        "max_seq_len": args.max_seq_len,
        "gradient_checkpointing": args.gradient_checkpointing,
        "fast_malloc": allocator.fast_allocator() is not None,  # what the trainer will run on
    }


def _longest_tokens(rows: list[dict[str, Any]] | None) -> int:
    if not rows:
        return 0
    return int(max(len(json.dumps(r, ensure_ascii=False)) for r in rows) / CHARS_PER_TOKEN) + 1


def estimate_for(shape: Shape, settings: dict[str, Any]) -> Estimate:
    """The Estimate for explicit settings (what `preflight` reads from a spec)."""
    parts = parts_mib(shape, settings)
    est = Estimate(settings["device"], sum(parts.values()), available_mib(settings["device"]),
                   {k: round(v, 1) for k, v in parts.items()})  # fmt: skip
    if est.fits:
        return est
    return dataclasses.replace(est, fixes=tuple(_fixes(shape, settings, est.available_mib)))


def fix_options(
    shape: Shape, settings: dict[str, Any], available: float | None
) -> list[tuple[str, dict[str, Any], float]]:
    """Changes that bring the estimate under the device's memory: (what to set, the changed
    settings, the estimate with it)."""
    candidates: list[tuple[str, dict[str, Any]]] = []
    batch, accum = settings["batch_size"], settings["grad_accum"]
    smaller = batch // 2
    while smaller >= 1:
        more = accum * batch // smaller
        candidates.append((f"batch_size={smaller} with grad_accum={more} (the same rows per "
                           "step)", {"batch_size": smaller, "grad_accum": more}))  # fmt: skip
        smaller //= 2
    if not settings["gradient_checkpointing"]:
        candidates.append(("gradient_checkpointing=True", {"gradient_checkpointing": True}))
    if settings["device"].startswith("cuda") and not settings["load_in_4bit"]:
        candidates.append(("Hardware(load_in_4bit=True)", {"load_in_4bit": True}))
    length = settings["seq_len"] // 2
    while length >= 128:
        candidates.append((f"max_seq_len={length} (longer rows are cut)", {"seq_len": length}))
        length //= 2
    found = []
    for text, change in candidates:
        peak = sum(parts_mib(shape, {**settings, **change}).values())
        if available is not None and peak <= HEADROOM * available:
            found.append((text, change, peak))
    return found


def _fixes(shape: Shape, settings: dict[str, Any], available: float | None) -> list[str]:
    return [
        f"{text}: about {_gib(peak)}" for text, _, peak in fix_options(shape, settings, available)
    ]


def preflight(spec: Any, model_dir: str | os.PathLike[str] | None = None,
              rows: list[dict[str, Any]] | None = None) -> Estimate | None:  # fmt: skip
    """The memory estimate for a RunSpec (its model's config.json: `model_dir`, else the
    resolved model; its training rows for the batch length, else max_seq_len); None when the
    model's config does not give its sizes."""
    if model_dir is None:
        from dragonfarm_core.rundir.create import model_block

        model_dir = model_block(spec)["model"]["base"]
    if rows is None and not isinstance(spec.dataset, dict):
        rows = spec.dataset.split_records()[0]
    shape = Shape.read(model_dir)
    return None if shape is None else estimate_for(shape, _settings(spec, rows))


def check(spec: Any, model_dir: str | os.PathLike[str], rows: list[dict[str, Any]]) -> None:
    """Refuse (PreflightError) a run whose estimate does not fit its device's memory."""
    est = preflight(spec, model_dir, rows)
    if est is not None and not est.fits:
        raise PreflightError(est.refusal())
