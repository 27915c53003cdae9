"""AdamW over the adapter, the learning-rate schedule, and one optimizer step.

Schedule: linear warm-up over `warmup_ratio` of the steps, then linear decay to zero (or
cosine, or constant, by `extra.lr_scheduler_type`). float16 weights get a gradient scaler so
small gradients do not underflow; otherwise the scaler is a no-op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from dragonfarm_core.settings import TrainArgs
from dragonfarm_core.trainers.config import ExtraArgs


def lr_factor(step: int, warmup: int, total: int, kind: str) -> float:
    """Multiplier of the peak learning rate after `step` scheduler steps.

    >>> [round(lr_factor(s, 2, 10, "linear"), 3) for s in (0, 1, 2, 6, 10)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    >>> round(lr_factor(6, 2, 10, "cosine"), 3), lr_factor(6, 2, 10, "constant")
    (0.5, 1.0)
    """
    if step < warmup:
        return step / warmup
    if kind == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return max(0.0, 1.0 - progress)


@dataclass
class Optimization:
    """The optimizer, its schedule and its gradient scaler, stepped and saved together."""

    optimizer: torch.optim.AdamW
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    max_grad_norm: float

    @property
    def lr(self) -> float:
        """The learning rate the next step uses."""
        # torch types the rates as float | Tensor (a tensor lr is allowed); ours is a float.
        return float(self.scheduler.get_last_lr()[0])

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self) -> float:
        """Clip, step, advance the schedule; returns the gradient norm before clipping."""
        self.scaler.unscale_(self.optimizer)
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm or math.inf)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return float(grad_norm)

    def state_dicts(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
        }

    def load_state_dicts(self, states: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(states["optimizer"])
        self.scheduler.load_state_dict(states["scheduler"])
        self.scaler.load_state_dict(states["scaler"])


def build_optimization(
    model: Any, args: TrainArgs, extra: ExtraArgs, total_steps: int, dtype: torch.dtype
) -> Optimization:
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params,
        lr=args.learning_rate,
        weight_decay=args.weight_decay,
        betas=(extra.adam_beta1, extra.adam_beta2),
        eps=extra.adam_epsilon,
    )
    warmup = math.ceil(args.warmup_ratio * total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, warmup, total_steps, extra.lr_scheduler_type)
    )
    device = params[0].device.type
    scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)
    return Optimization(optimizer, scheduler, scaler, extra.max_grad_norm)
