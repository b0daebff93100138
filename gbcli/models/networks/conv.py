from __future__ import annotations

import torch
from torch import nn

from gbcli.errors import GbError
from gbcli.models import construction


class SharedFilterConv(nn.Module):
    """Convolution with disjoint patches and one shared filter: f(x) = sum_j v_j sigma(<w, x^(j)>)."""

    def __init__(self, patches: int, dim: int, activation: str):
        super().__init__()
        if dim % patches:
            raise GbError(f"model.patches: {patches} patches do not split inputs of dimension {dim}")
        self.activation, self.patches = activation, patches
        self.w = nn.Parameter(torch.empty(dim // patches))
        self.v = nn.Parameter(torch.empty(patches))

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        pre = x.reshape(len(x), self.patches, -1) @ self.w
        return construction.activate(pre, self.activation) @ self.v

    def weights(self) -> list[torch.Tensor]:
        return [self.w, self.v]
