"""The torch modules of the linear kinds: `linear`, `deep-linear` and `residual`."""

from __future__ import annotations

from functools import reduce

import torch
from torch import nn

from gbcli.models.networks import Network


class Linear(Network):
    """A plain linear predictor <w, x>."""

    def __init__(self, dim: int):
        super().__init__()
        self.w = nn.Parameter(torch.empty(1, dim))

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        return x @ self.w[0]


class DeepLinear(Network):
    """f(x) = W_L ... W_1 x."""

    def __init__(self, depth: int, width: int, dim: int):
        super().__init__()
        shapes = [(width, dim)] + [(width, width)] * (depth - 2) + [(1, width)]
        self.layers = nn.ParameterList(nn.Parameter(torch.empty(*s)) for s in shapes)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        return reduce(lambda h, layer: h @ layer.T, self.layers, x)[:, 0]


class ResidualNet(DeepLinear):
    """The deep linear network's weight matrices (same shapes), with skip connections and ReLUs."""

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        f = x @ self.layers[0].T
        for w in self.layers[1:-1]:
            f = f + torch.relu(f) @ w.T
        return (torch.relu(f) @ self.layers[-1].T)[:, 0]

    def matrices(self) -> dict[str, torch.Tensor]:
        """W_1..W_{L-1} (rows: neurons); W_L is a single row."""
        return {f"W{i + 1}": w for i, w in enumerate(self.layers[:-1])}
