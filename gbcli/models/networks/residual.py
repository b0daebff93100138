from __future__ import annotations

import torch

from gbcli.models.networks.deep_linear import DeepLinear


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
