from __future__ import annotations

import torch
from torch import nn


class GLN3(nn.Module):
    """z1 = gated W1 x, z2 = gated W2 z1, out = <w3, z2> (no biases: exactly 3-homogeneous)."""

    def __init__(self, units: int, count: int, dim: int):
        super().__init__()
        self.units, self.count = units, count
        self.w1 = nn.Parameter(torch.empty(units * count, dim))     # row h*C + c
        self.w2 = nn.Parameter(torch.empty(units * count, units))   # row k*C + c
        self.w3 = nn.Parameter(torch.empty(1, units))

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        h = self.units
        offset = torch.arange(h, device=x.device) * self.count
        z1 = (x @ self.w1.T).gather(1, ctx[:, :h] + offset)
        z2 = (z1 @ self.w2.T).gather(1, ctx[:, h:] + offset)
        return z2 @ self.w3[0]

    def weights(self) -> list[torch.Tensor]:
        return [self.w1, self.w2, self.w3]
