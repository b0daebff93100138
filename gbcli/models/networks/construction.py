"""The torch modules of paper 003's constructions: `diagonal` and `conv`."""

from __future__ import annotations

import torch
from torch import nn

from gbcli.errors import GbError
from gbcli.models import construction
from gbcli.models.networks import Network


class DiagonalNet(Network):
    """Depth-m diagonal network: h_j = sigma(w_j o h_{j-1}) for j < m, f(x) = <w_m, h_{m-1}>."""

    def __init__(self, depth: int, dim: int, activation: str):
        super().__init__()
        self.activation = activation
        self.w = nn.Parameter(torch.empty(depth, dim))

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        h = x
        for j in range(self.w.shape[0] - 1):
            h = construction.activate(self.w[j] * h, self.activation)
        return h @ self.w[-1]


class SharedFilterConv(Network):
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
