"""Losses of the margins y f(x), computed in log space so they neither overflow nor underflow early."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def loss_fn(margins: torch.Tensor, kind: str) -> torch.Tensor:
    """Mean loss of the margins y f(x): logistic = softplus(-m), exponential = exp(logsumexp(-m) - log n)."""
    if kind == "logistic":
        return F.softplus(-margins).mean()
    return torch.exp(torch.logsumexp(-margins, 0) - math.log(margins.numel()))


def log_softplus(z: torch.Tensor) -> torch.Tensor:
    """log(log(1 + e^z)) without underflow: below z = -20, softplus(z) = e^z (1 - e^z / 2 + ...), so
    the log is z to within 1e-9 (the other branch is fed a safe value so its gradient stays finite)."""
    small = z < -20
    return torch.where(small, z, torch.log(F.softplus(torch.where(small, torch.zeros_like(z), z))))


def log_mean_loss(margins: torch.Tensor, kind: str) -> torch.Tensor:
    """log R, R the mean loss of the margins, via logsumexp: loss-normalized steps take eta_0 grad log R, finite
    when R itself underflows (1e-30 and below in long runs)."""
    per_point = -margins if kind == "exponential" else log_softplus(-margins)
    return torch.logsumexp(per_point, 0) - math.log(margins.numel())
