from __future__ import annotations

import torch
from torch import nn


class Linear(nn.Module):
    """A plain linear predictor <w, x>."""

    def __init__(self, dim: int):
        super().__init__()
        self.w = nn.Parameter(torch.empty(1, dim))

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        return x @ self.w[0]

    def weights(self) -> list[torch.Tensor]:
        return [self.w]
