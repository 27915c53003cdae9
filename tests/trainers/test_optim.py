"""The optimizer honours TrainArgs and extra; the schedule warms up, then decays."""

from __future__ import annotations

import pytest
import torch

from dragonfarm_core.settings import TrainArgs
from dragonfarm_core.trainers.config import extra_args
from dragonfarm_core.trainers.optim import build_optimization, lr_factor


def _optimization(dtype=torch.float32, **extra):
    model = torch.nn.Linear(4, 4)
    model.bias.requires_grad_(False)  # frozen parameters stay out of the optimizer
    args = TrainArgs(learning_rate=0.1, weight_decay=0.01, warmup_ratio=0.2)
    return model, build_optimization(model, args, extra_args(extra), total_steps=10, dtype=dtype)


def test_adamw_takes_trainable_params_and_settings():
    model, opt = _optimization(adam_beta1=0.8, adam_beta2=0.95, adam_epsilon=1e-6)
    group = opt.optimizer.param_groups[0]
    assert group["params"] == [model.weight]
    assert group["weight_decay"] == 0.01 and group["betas"] == (0.8, 0.95)
    assert group["eps"] == 1e-6
    assert not opt.scaler.is_enabled()
    assert _optimization(torch.float16)[1].scaler.is_enabled()


def test_schedule_and_clipping():
    model, opt = _optimization(max_grad_norm=0.5, lr_scheduler_type="cosine")
    lrs = []
    for _ in range(10):
        lrs.append(opt.lr)
        opt.backward(model(torch.full((2, 4), 100.0)).sum())
        grad_norm = opt.step()
        assert model.weight.grad is None  # zeroed for the next step
    assert grad_norm > 0.5  # reported before clipping
    assert lrs[:3] == pytest.approx([0.0, 0.05, 0.1])  # 2 warm-up steps
    assert lrs[3:] == pytest.approx([0.1 * lr_factor(s, 2, 10, "cosine") for s in range(3, 10)])
    assert lrs[-1] < lrs[3]
