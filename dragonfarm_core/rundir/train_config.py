"""What a trainer reads from config.json, checked before any model is loaded.

Pure standard library (no torch), so the public API can call `extra_args(args.extra)` when it
writes config.json and refuse an unknown key before a run is launched, and the trainer repeats
the same check when it starts. `TrainArgs.extra` keys use the names of Hugging Face
`TrainingArguments`, so settings copied from a transformers script mean the same thing here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from dataclasses import dataclass, field
from typing import Any

from dragonfarm_core.rundir import files
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs

SCHEDULERS = ("linear", "cosine", "constant")
# report_to's trackers, each an optional install: the module transformers looks for.
TRACKERS = {"tensorboard": ("tensorboard", "tensorboardX"), "trackio": ("trackio",),
            "wandb": ("wandb",), "mlflow": ("mlflow",)}  # fmt: skip
# Keys passed to TRL by the methods listed only; the others refuse them (not yet wired there).
TRL_ONLY = {"report_to": ("sft",), "neftune_noise_alpha": ("sft",), "packing": ("sft",),
            "padding_free": ("sft",), "use_liger_kernel": ("sft",)}  # fmt: skip
# GPU speed-ups a run turns on by name. Off by default until bench/gpu_check.py measures them
# paying on a GPU (docs/BENCHMARKS.md lists them as unmeasured until then).
FLAGS = ("packing", "padding_free", "use_liger_kernel")


@dataclass(frozen=True)
class ExtraArgs:
    """The `TrainArgs.extra` keys the trainers understand; any other key is refused."""

    lr_scheduler_type: str = field(
        default="linear",
        metadata={
            "help": "Learning-rate shape after warm-up: linear (decay to 0), cosine, or constant."
        },
    )
    eval_steps: int | None = field(
        default=None,
        metadata={
            "help": "Evaluate on the held-out rows every this many steps (default: 4 times a run)."
        },
    )
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1."})
    adam_beta2: float = field(default=0.999, metadata={"help": "AdamW beta2."})
    adam_epsilon: float = field(default=1e-8, metadata={"help": "AdamW epsilon."})
    max_grad_norm: float = field(
        default=1.0,
        metadata={"help": "Clip the gradient norm to this value; 0 turns clipping off."},
    )
    sample_max_new_tokens: int = field(
        default=256, metadata={"help": "Tokens generated per held-out prompt for samples.json."}
    )
    report_to: str | list[str] | None = field(
        default=None,
        metadata={
            "help": "Trackers that also get the run's metrics: tensorboard, trackio, wandb, "
            "mlflow, or a list of them (each its own install). SFT runs only, for now."
        },
    )
    neftune_noise_alpha: float | None = field(
        default=None,
        metadata={
            "help": "NEFTune: noise on the input embeddings while training (e.g. 5). SFT only."
        },
    )
    packing: bool = field(
        default=False,
        metadata={
            "help": "Pack several rows into each max_seq_len sequence (TRL's best-fit packing, "
            "padding-free; each row still attends to itself only): fewer, fuller steps. SFT only."
        },
    )
    padding_free: bool = field(
        default=False,
        metadata={
            "help": "Flatten each batch into one row without padding (TRL's padding_free; each "
            "row still attends to itself only): no compute on padding. SFT only."
        },
    )
    use_liger_kernel: bool = field(
        default=False,
        metadata={
            "help": "Liger's Triton kernels for RMSNorm, RoPE and SwiGLU (TRL's "
            "use_liger_kernel): an NVIDIA GPU and pip install liger-kernel. SFT only."
        },
    )

    def __post_init__(self) -> None:
        for name in FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise SettingsError(
                    f"TrainArgs.extra['{name}'] must be true or false, got {getattr(self, name)!r}."
                )
        if self.use_liger_kernel and not importlib.util.find_spec("liger_kernel"):
            raise SettingsError(
                "TrainArgs.extra['use_liger_kernel'] needs the liger-kernel package, which is not "
                "installed here: pip install liger-kernel (on a machine with an NVIDIA GPU), or "
                "leave it out."
            )
        if self.lr_scheduler_type not in SCHEDULERS:
            raise SettingsError(
                f"TrainArgs.extra['lr_scheduler_type'] = {self.lr_scheduler_type!r}"
                f" is not one of {', '.join(SCHEDULERS)}."
            )
        for name in ("eval_steps", "sample_max_new_tokens"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise SettingsError(
                    f"TrainArgs.extra['{name}'] must be a whole number >= 1, got {value!r}."
                )
        for name in ("adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)  # NaN passes `value < 0`
                or value < 0
            ):
                raise SettingsError(
                    f"TrainArgs.extra['{name}'] must be a finite number >= 0, got {value!r}."
                )
        for name in ("adam_beta1", "adam_beta2"):
            if getattr(self, name) >= 1:
                raise SettingsError(f"TrainArgs.extra['{name}'] must be below 1.")
        alpha = self.neftune_noise_alpha
        if alpha is not None and (
            isinstance(alpha, bool) or not isinstance(alpha, int | float)
            or not math.isfinite(alpha) or alpha <= 0
        ):  # fmt: skip
            raise SettingsError(
                f"TrainArgs.extra['neftune_noise_alpha'] must be a number above 0 (5 is usual), "
                f"got {alpha!r}."
            )
        for tracker in self.trackers:
            if tracker not in TRACKERS:
                raise SettingsError(
                    f"TrainArgs.extra['report_to'] names {tracker!r}; the trackers are "
                    f"{', '.join(TRACKERS)} (or a list of them)."
                )
            if not any(importlib.util.find_spec(m) for m in TRACKERS[tracker]):
                raise SettingsError(
                    f"TrainArgs.extra['report_to'] names {tracker}, which is not installed here: "
                    f"pip install {tracker}, or leave it out."
                )

    @property
    def trackers(self) -> list[str]:
        """report_to as a list; [] for none."""
        value = self.report_to
        if value is None or value == "none":
            return []
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise SettingsError(
                f"TrainArgs.extra['report_to'] must be a tracker's name or a list of them, "
                f"got {value!r}."
            )
        return list(value)


def extra_args(extra: dict[str, Any], method: str = "sft") -> ExtraArgs:
    """Check `TrainArgs.extra` for a run of `method` and fill in defaults; an unknown key, or
    one that method's trainer does not read yet, raises SettingsError naming it."""
    known = [f.name for f in dataclasses.fields(ExtraArgs)]
    unknown = sorted(set(extra) - set(known))
    if unknown:
        own = [f.name for f in dataclasses.fields(TrainArgs) if f.name != "extra"]
        raise SettingsError(
            f"TrainArgs.extra has unknown key(s) {', '.join(map(repr, unknown))} (a keyword "
            f"TrainArgs does not know goes there); the trainer understands {', '.join(known)}, "
            f"and TrainArgs itself takes {', '.join(own)}."
        )
    for key, methods in TRL_ONLY.items():
        if extra.get(key) not in (None, False) and method not in methods:
            raise SettingsError(
                f"TrainArgs.extra['{key}'] works for {', '.join(methods)} runs for now: "
                f"{method}'s trainer does not pass it to TRL yet."
            )
    return ExtraArgs(**extra)


@dataclass(frozen=True)
class ModelSpec:
    """config.json's `model` block: the base to load and the adapters folded into it, in order."""

    name: str
    base: str
    revision: str | None = None
    trust_remote_code: bool = False
    adapters: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrainConfig:
    """Everything a trainer needs from config.json, validated: the run's `RunSpec` (read back
    as `code(run)` and `resume` read it), and what writing the run resolved (the model block)."""

    id: str
    method: str
    model: ModelSpec
    lora: Lora
    args: TrainArgs
    hardware: Hardware
    extra: ExtraArgs
    n_samples: int
    method_args: dict[str, Any]
    raw: dict[str, Any]
    spec: Any  # dragonfarm_core.spec.RunSpec (which imports this module)


def load_config(run_dir: str | os.PathLike[str]) -> TrainConfig:
    """Read and validate config.json; errors name the field and raise SettingsError."""
    from dragonfarm_core.spec import RunSpec

    raw = files.read_config(run_dir)
    spec = RunSpec.from_dict(raw, run_dir=run_dir)  # every setting checked, field named
    model = raw["model"]
    try:
        block = ModelSpec(
            name=model.get("name") or model["base"],
            base=model["base"],
            revision=model.get("revision"),
            trust_remote_code=bool(model.get("trust_remote_code", False)),
            adapters=tuple(model.get("adapters") or ()),
        )
    except KeyError as exc:
        raise SettingsError(
            f"{run_dir}/config.json has no model {exc.args[0]!r} field; "
            "recreate the run with dragon.train()."
        ) from exc
    args, lora = spec.args, spec.lora
    assert isinstance(args, TrainArgs) and isinstance(lora, Lora)  # config.json holds both
    return TrainConfig(
        id=raw.get("id", os.path.basename(os.path.abspath(run_dir))),
        method=spec.method,
        model=block,
        lora=lora,
        args=args,
        hardware=spec.hardware,
        extra=extra_args(args.extra, spec.method),
        n_samples=spec.n_samples,
        method_args=dict(raw.get("method_args") or {}),
        raw=raw,
        spec=spec,
    )
