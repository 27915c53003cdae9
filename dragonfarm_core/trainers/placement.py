"""Where a run trains: the device and the dtype of the frozen weights, and which of the run's
processes this one is (a run on several devices runs one process per device under
`accelerate launch`; only rank 0 writes the run's files).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from dragonfarm_core.settings import Hardware, SettingsError


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
    """", 2 processes" in a run of several processes, for the run's first line; else ""."""
    return f", {process_count()} processes" if process_count() > 1 else ""


def resolve_placement(hardware: Hardware) -> Placement:
    """Turn `Hardware` into a device and the dtype of the frozen base weights.

    auto: CUDA, then Apple MPS, then CPU. dtype auto: bf16 where the device has it, fp16 on
    CUDA GPUs without bf16, fp32 on a CPU (bf16 frozen weights ran 0.79x as fast there even on
    a CPU with AMX, and used more memory: bench/train_throughput.py).
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
        return Placement(torch.device(name), getattr(torch, hardware.dtype))
    if name.startswith("cuda"):
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    elif name == "mps":
        dtype = torch.bfloat16
    else:
        dtype = torch.float32
    return Placement(torch.device(name), dtype)
