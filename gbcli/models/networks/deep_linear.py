from __future__ import annotations

import torch
from torch import nn


class DeepLinear(nn.Module):
    """f(x) = W_L ... W_1 x."""

    def __init__(self, depth: int, width: int, dim: int):
        super().__init__()
        shapes = [(width, dim)] + [(width, width)] * (depth - 2) + [(1, width)]
        self.layers = nn.ParameterList(nn.Parameter(torch.empty(*s)) for s in shapes)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        h = x
        for layer in self.layers:
            h = h @ layer.T
        return h[:, 0]

    def weights(self) -> list[torch.Tensor]:
        return list(self.layers)
