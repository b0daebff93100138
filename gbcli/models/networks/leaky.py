from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LeakyNet(nn.Module):
    """2k leaky units max(alpha z, z), output weights fixed to +v (first k) and -v (last k)."""

    def __init__(self, units: int, dim: int, alpha: float, v: float):
        super().__init__()
        self.alpha, k = alpha, units // 2
        self.w1 = nn.Parameter(torch.empty(units, dim))
        self.register_buffer("w2", torch.cat([torch.full((k,), v), torch.full((units - k,), -v)])[None])

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x @ self.w1.T, self.alpha)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        return self.hidden(x) @ self.w2[0]

    def weights(self) -> list[torch.Tensor]:
        return [self.w1]
