"""Training settings: LoRA, the optimisation loop, and the hardware.

Frozen dataclasses, one source of truth: the trainer reads them back from config.json, the
app builds its widgets from each field's metadata (label, help, limits, choices), and
`dragon.code(run)` prints them. Validation lives in `__post_init__` and every error names the
field, says what is wrong and what to do; every int and float field is checked the same way
(`check_numbers`: its declared type and its metadata's limits, NaN and None refused).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal


class SettingsError(ValueError):
    """A setting is out of range or of the wrong kind."""


def _meta(
    label: str,
    help: str,
    *,
    min: float | None = None,
    max: float | None = None,
    choices: tuple[str, ...] | None = None,
    step: float | None = None,
) -> dict[str, Any]:
    return {"label": label, "help": help, "min": min, "max": max, "choices": choices, "step": step}


def setting(default: Any, label: str, help: str, **limits: Any) -> Any:
    """A settings field: its default and the metadata the app builds its widget from (label,
    help, and min/max/choices/step as `limits`)."""
    return field(default=default, metadata=_meta(label, help, **limits))


@functools.cache
def _numeric_fields(cls: Any) -> dict[str, tuple[bool, bool]]:
    """{field: (whole, optional)} for each field declared int, float or `int | None`: what a
    value must be follows from the declared type alone, so a new field is checked too."""
    out = {}
    for name, hint in typing.get_type_hints(cls).items():
        kinds = set(typing.get_args(hint)) if isinstance(hint, types.UnionType) else {hint}
        if kinds & {int, float} and kinds <= {int, float, type(None)}:
            out[name] = (float not in kinds, type(None) in kinds)
    return out


def _between(meta: Any) -> str:
    lo, hi = meta.get("min"), meta.get("max")
    return f"a value between {lo} and {hi}" if lo is not None and hi is not None else "a number"


def check_numbers(obj: Any, prefix: str | None = None) -> None:
    """Check every int and float field of the settings dataclass `obj` against its declared
    type and its metadata's min and max; whole floats (8.0) of an int field become ints.

    Refused, with the field named: None where the type has no None, a bool, a str, NaN and
    the infinities (a comparison with NaN is always False, so a range check alone lets it
    through and the trainer then learns nothing, or diverges).
    """
    cls: Any = type(obj)
    prefix = cls.__name__ if prefix is None else prefix
    meta = {f.name: f.metadata for f in dataclasses.fields(cls)}
    for name, (whole, optional) in _numeric_fields(cls).items():
        value, where = getattr(obj, name), f"{prefix}.{name}"
        kind = "a whole number" if whole else "a number"
        use = _between(meta[name])
        if value is None:
            if optional:
                continue
            raise SettingsError(f"{where} is None; it must be {kind} ({use}).")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise SettingsError(f"{where} must be {kind}, got {value!r}.")
        if not math.isfinite(value):
            raise SettingsError(f"{where} = {value} is not a finite number; use {use}.")
        if whole and not isinstance(value, numbers.Integral) and not float(value).is_integer():
            raise SettingsError(f"{where} must be a whole number, got {value!r}.")
        # A Real is int()-able (Integral, or a whole float checked above).
        value = int(value) if whole else value if isinstance(value, int) else float(value)  # type: ignore[call-overload]
        object.__setattr__(obj, name, value)  # a plain int or float, as JSON writes it
        lo, hi = meta[name].get("min"), meta[name].get("max")
        if lo is not None and value < lo:
            raise SettingsError(f"{where} = {value} is below the minimum {lo}; use {use}.")
        if hi is not None and value > hi:
            raise SettingsError(f"{where} = {value} is above the maximum {hi}; use {use}.")


def check_choice(obj: Any, name: str) -> None:
    """Refuse a value of the field `name` that is not one of its metadata's choices."""
    meta = next(f.metadata for f in dataclasses.fields(obj) if f.name == name)
    value = getattr(obj, name)
    if value not in meta["choices"]:
        raise SettingsError(
            f"{type(obj).__name__}.{name} = {value!r} is not one of {', '.join(meta['choices'])}."
        )


@dataclass(frozen=True)
class Lora:
    """LoRA adapter settings."""

    r: int = setting(16, "Rank (r)", min=1, max=512, step=1, help=
        "Size of the low-rank update. 8-32 is typical; higher learns more and costs "
        "more.")  # fmt: skip
    alpha: float = setting(32, "Alpha", min=1, max=4096, help=
        "Scale of the update (alpha / r multiplies it). Usually 2 x r.")  # fmt: skip
    dropout: float = setting(0.05, "Dropout", min=0.0, max=0.9, step=0.01, help=
        "Dropout on the adapter input during training.")  # fmt: skip
    target_modules: str | tuple[str, ...] = setting("auto", "Target modules", help=
        "'auto' adapts every linear projection of the model; or a list of module "
        "names such as q_proj, v_proj.")  # fmt: skip

    def __post_init__(self) -> None:
        check_numbers(self)
        tm = self.target_modules
        if isinstance(tm, list):
            object.__setattr__(self, "target_modules", tuple(tm))
            tm = self.target_modules
        if isinstance(tm, str):
            if not tm.strip():
                raise SettingsError("Lora.target_modules is empty; use 'auto' or module names.")
        elif not tm or not all(isinstance(m, str) and m for m in tm):
            raise SettingsError("Lora.target_modules must be 'auto' or a list of module names.")


@dataclass(frozen=True)
class TrainArgs:
    """How long and how fast to train. `extra` passes further keywords to the trainer."""

    epochs: float = setting(3, "Epochs", min=0.01, max=1000, step=1, help=
        "Passes over the training rows.")  # fmt: skip
    learning_rate: float = setting(2e-4, "Learning rate", min=1e-8, max=1.0, help=
        "Peak learning rate of the adapter (linear decay after warm-up).")  # fmt: skip
    batch_size: int = setting(4, "Batch size", "Rows per forward pass.", min=1, max=1024, step=1)
    grad_accum: int = setting(4, "Gradient accumulation", min=1, max=1024, step=1, help=
        "Forward passes per optimizer step; the effective batch is batch_size x "
        "grad_accum.")  # fmt: skip
    max_seq_len: int = setting(1024, "Max sequence length", min=16, max=131072, step=16, help=
        "Tokens per row; longer rows are truncated and counted.")  # fmt: skip
    max_steps: int | None = setting(None, "Max steps", min=1, max=10_000_000, step=1, help=
        "Stop after this many optimizer steps (empty: run all epochs).")  # fmt: skip
    warmup_ratio: float = setting(0.03, "Warm-up ratio", min=0.0, max=0.5, step=0.01, help=
        "Fraction of steps spent ramping the learning rate up.")  # fmt: skip
    weight_decay: float = setting(0.0, "Weight decay", min=0.0, max=1.0, step=0.01, help=
        "AdamW weight decay on the adapter.")  # fmt: skip
    logging_steps: int = setting(5, "Logging steps", min=1, max=100_000, step=1, help=
        "Write a progress row every this many optimizer steps.")  # fmt: skip
    save_steps: int = setting(100, "Save steps", min=1, max=1_000_000, step=1, help=
        "Save a resumable checkpoint every this many optimizer steps.")  # fmt: skip
    gradient_checkpointing: bool = setting(False, "Gradient checkpointing", help=
        "Recompute activations in the backward pass: less memory, a little slower on "
        "a GPU.")  # fmt: skip
    seed: int = setting(42, "Seed", min=0, max=2**32 - 1, step=1, help=
        "Seed for data order, adapter init and sampling.")  # fmt: skip
    extra: dict[str, Any] = field(
        default_factory=dict,
        metadata=_meta("Extra", "Further keyword arguments passed through to the trainer."),
    )

    def __post_init__(self) -> None:
        check_numbers(self)
        if not isinstance(self.gradient_checkpointing, bool):
            raise SettingsError("TrainArgs.gradient_checkpointing must be True or False.")
        if not isinstance(self.extra, dict):
            raise SettingsError("TrainArgs.extra must be a dict of keyword arguments.")

    def __init__(
        self,
        epochs: float = 3,
        learning_rate: float = 2e-4,
        batch_size: int = 4,
        grad_accum: int = 4,
        max_seq_len: int = 1024,
        max_steps: int | None = None,
        warmup_ratio: float = 0.03,
        weight_decay: float = 0.0,
        logging_steps: int = 5,
        save_steps: int = 100,
        gradient_checkpointing: bool = False,
        seed: int = 42,
        extra: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # Like the manual's `...`: unknown keywords travel to the trainer in `extra`.
        values = dict(locals())
        for name in ("self", "kwargs", "__class__"):
            values.pop(name, None)
        values["extra"] = {**(extra or {}), **kwargs}
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self.__post_init__()


Device = Literal["auto", "cuda", "mps", "cpu"]
_ONE_GPU = re.compile(r"cuda:\d+")
DType = Literal["auto", "bfloat16", "float16", "float32"]


@dataclass(frozen=True)
class Hardware:
    """Where and in what precision to train."""

    device: str = setting("auto", "Device", choices=("auto", "cuda", "mps", "cpu"), help=
        "auto picks CUDA, then Apple MPS, then the CPU; cuda:1 is the second GPU.")  # fmt: skip
    dtype: str = setting("auto", "Precision", choices=("auto", "bfloat16", "float16", "float32"), help=
        "auto: bfloat16 where supported, float16 on older CUDA GPUs; on a CPU bfloat16 "
        "for a model of 20M parameters or more when the CPU has bf16 instructions, else "
        "float32. The trainable adapter is float32.")  # fmt: skip
    load_in_4bit: bool = setting(False, "Load in 4-bit", help=
        "QLoRA: keep the frozen base in 4-bit (bitsandbytes, CUDA only).")  # fmt: skip
    devices: int | str | None = setting(None, "Devices", help=
        "Train data-parallel on several devices through `accelerate launch`: a count "
        "(2: the first two GPUs, or two CPU processes with device='cpu') or GPUs "
        "('cuda:0,1'). batch_size is per device. Empty: one device.")  # fmt: skip
    accelerate_config: str | None = setting(None, "Accelerate config", help=
        "An accelerate config file (`accelerate config` writes one) for FSDP, DeepSpeed or "
        "several machines; it decides how the processes start, devices what the queue "
        "reserves here.")  # fmt: skip

    def __post_init__(self) -> None:
        # "cuda:1": one GPU of several, each its own queue (the Train tab lists those found).
        if not (isinstance(self.device, str) and _ONE_GPU.fullmatch(self.device)):
            check_choice(self, "device")
        check_choice(self, "dtype")
        if not isinstance(self.load_in_4bit, bool):
            raise SettingsError("Hardware.load_in_4bit must be True or False.")
        if self.load_in_4bit and self.device in ("cpu", "mps"):
            raise SettingsError(
                f"Hardware.load_in_4bit needs an NVIDIA GPU (bitsandbytes), but device is "
                f"{self.device!r}; set load_in_4bit=False or device='cuda'."
            )
        _check_devices(self)
        if self.accelerate_config is not None:
            _check_accelerate_config(self)

    @property
    def processes(self) -> int:
        """How many training processes this machine starts: 1, the count, or the GPUs listed."""
        if self.devices is None:
            return 1
        return self.devices if isinstance(self.devices, int) else len(gpu_ids(self.devices))


_GPU_LIST = re.compile(r"cuda:(\d+(?:,\d+)*)")


def gpu_ids(devices: str) -> list[int]:
    """The GPUs of a Hardware.devices list: 'cuda:0,1' -> [0, 1]."""
    found = _GPU_LIST.fullmatch(devices)
    return [int(i) for i in found.group(1).split(",")] if found else []


def _check_devices(hw: Hardware) -> None:
    devices, write = hw.devices, "write a count (devices=2) or GPUs (devices='cuda:0,1')"
    if devices is None:
        return
    if isinstance(devices, str):
        ids = gpu_ids(devices.replace(" ", ""))
        if not ids:
            raise SettingsError(f"Hardware.devices = {devices!r} is not understood; {write}.")
        if len(set(ids)) != len(ids):
            raise SettingsError(f"Hardware.devices = {devices!r} names a GPU twice; {write}.")
        if hw.device not in ("auto", "cuda"):
            raise SettingsError(
                f"Hardware.devices = {devices!r} lists GPUs but device is {hw.device!r}; set "
                "device='cuda' (or 'auto'), or give a count of CPU processes (devices=2)."
            )
        object.__setattr__(hw, "devices", devices.replace(" ", ""))
        return
    if isinstance(devices, bool) or not isinstance(devices, int):
        raise SettingsError(f"Hardware.devices = {devices!r} is not understood; {write}.")
    if not 1 <= devices <= 1024:
        raise SettingsError(f"Hardware.devices = {devices} is not a count from 1 to 1024.")
    if devices > 1 and hw.device == "mps":
        raise SettingsError(
            "Hardware.devices: Apple MPS is one device; leave devices empty, or use "
            "device='cpu' for several CPU processes."
        )
    if devices > 1 and _ONE_GPU.fullmatch(hw.device):
        raise SettingsError(
            f"Hardware.device = {hw.device!r} is one GPU but devices = {devices}; list the "
            "GPUs in devices (devices='cuda:0,1') and set device='cuda'."
        )


def _check_accelerate_config(hw: Hardware) -> None:
    given = hw.accelerate_config
    if not isinstance(given, str) or not given.strip():
        raise SettingsError("Hardware.accelerate_config must be the path of a config file.")
    path = Path(given).expanduser().resolve()
    if not path.is_file():
        raise SettingsError(
            f"Hardware.accelerate_config: {path} is not a file; write one with "
            "`accelerate config --config_file PATH`, or leave it empty."
        )
    if hw.devices is None:
        raise SettingsError(
            "Hardware.accelerate_config needs devices too (what this machine's queue reserves "
            "for the run: devices=2 or devices='cuda:0,1')."
        )
    object.__setattr__(hw, "accelerate_config", str(path))


def to_dict(settings: Lora | TrainArgs | Hardware) -> dict[str, Any]:
    """Plain JSON-ready dict of a settings object (tuples become lists)."""
    out = dataclasses.asdict(settings)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def from_dict(cls: type, values: dict[str, Any]) -> Any:
    """Rebuild a settings object from `to_dict` output (config.json)."""
    return cls(**values)
