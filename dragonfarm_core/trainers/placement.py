"""Where a run trains: the device and the dtype of the frozen weights, and which of the run's
processes this one is (a run on several devices runs one process per device under
`accelerate launch`; only rank 0 writes the run's files).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from dragonfarm_core.memory_estimate import Shape, cpu_weights_dtype
from dragonfarm_core.settings import Hardware, SettingsError

# oneDNN (torch's bf16 matmuls on a CPU) caches a kernel per matmul shape, 1,024 of them by
# default. Capped at 16, a bf16 run on the bundled model peaked at 1,012 MiB instead of 1,394
# (36 steps of bench/train_throughput.py; float32 923), 0.95-0.98x the tokens/s; on a 21M model
# 1,537 MiB instead of 1,739 (float32 1,568) at 0.94x. Read when oneDNN first runs, so set here.
ONEDNN_CACHE = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")


@dataclass(frozen=True)
class Placement:
    """Where the model trains: `dtype` holds the frozen weights; LoRA weights are float32."""

    device: torch.device
    dtype: torch.dtype

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def process_rank() -> int:
    """This process's rank in a run of several processes (`accelerate launch` sets RANK, as
    torchrun does); 0 for a run in one process. Only rank 0 writes the run's files."""
    return int(os.environ.get("RANK", "0"))


def process_count() -> int:
    """How many processes train the run together (WORLD_SIZE; 1 alone)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def processes_note() -> str:
    """ ", 2 processes" in a run of several processes, for the run's first line; else ""."""
    return f", {process_count()} processes" if process_count() > 1 else ""


def resolve_placement(hardware: Hardware, base: str | os.PathLike[str] | None = None) -> Placement:
    """Turn `Hardware` into a device and the dtype of the frozen base weights.

    auto: CUDA, then Apple MPS, then CPU. dtype auto: bf16 where the device has it, fp16 on
    CUDA GPUs without bf16; on a CPU, bf16 for a model (`base`, the folder of its config.json)
    of memory_estimate.CPU_BFLOAT16_FROM parameters or more when the CPU has bf16 instructions,
    else float32 (the figures are at that constant).
    """
    cuda, mps = torch.cuda.is_available(), torch.backends.mps.is_available()
    name = hardware.device
    if name == "auto":
        name = "cuda" if cuda else "mps" if mps else "cpu"
    if name.startswith("cuda") and "LOCAL_RANK" in os.environ:
        # One process per GPU: accelerate made the run's GPUs the visible ones, in order.
        name = f"cuda:{os.environ['LOCAL_RANK']}"
    gpu = name.partition(":")[2]  # "cuda:1": that GPU of the visible ones
    if name.startswith("cuda") and not cuda:
        raise SettingsError(
            f"Hardware.device is {name!r} but torch sees no CUDA GPU (no driver, or "
            "a CPU-only torch build); use device='auto' or fix the install."
        )
    if gpu and int(gpu) >= torch.cuda.device_count():
        raise SettingsError(
            f"Hardware.device is {name!r} but torch sees {torch.cuda.device_count()} GPU(s) "
            "(cuda:0 is the first); pick one that exists, or device='auto'."
        )
    if name == "mps" and not mps:
        raise SettingsError(
            "Hardware.device is 'mps' but Apple MPS is not available here; use device='auto'."
        )
    if hardware.load_in_4bit and not name.startswith("cuda"):
        raise SettingsError(
            f"Hardware.load_in_4bit needs an NVIDIA GPU (bitsandbytes), but the "
            f"run trains on {name}; set load_in_4bit=False."
        )
    if hardware.dtype != "auto":
        dtype = getattr(torch, hardware.dtype)
    elif name.startswith("cuda"):
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    elif name == "mps":
        dtype = torch.bfloat16
    else:
        shape = Shape.read(base) if base is not None else None
        dtype = getattr(torch, cpu_weights_dtype(shape.params() if shape else None))
    if name == "cpu" and dtype == torch.bfloat16:
        os.environ.setdefault(*ONEDNN_CACHE)
    return Placement(torch.device(name), dtype)
