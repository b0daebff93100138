"""The torch modules of the ReLU kinds: `relu`, `frelu` and paper 002's `leaky`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gbcli.models.networks import Network


class ReLUNet(Network):
    """x -> H -> 1 ReLU network without biases (2-homogeneous). Once `frozen` (FReLU), unit h is gated by
    [w_gate_h . x >= 0] from a frozen copy of the first layer."""

    def __init__(self, units: int, dim: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(units, dim))
        self.w2 = nn.Parameter(torch.empty(1, units))
        self.register_buffer("w_gate", torch.empty(0, dim))

    @property
    def frozen(self) -> bool:
        return self.w_gate.shape[0] > 0

    def freeze_gates(self) -> None:
        self.w_gate = self.w1.detach().clone()

    def gates(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ (self.w_gate if self.frozen else self.w1).T >= 0).to(x.dtype)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        pre = x @ self.w1.T
        return pre * self.gates(x) if self.frozen else torch.relu(pre)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        return self.hidden(x) @ self.w2[0]

    def matrices(self) -> dict[str, torch.Tensor]:
        """The first layer (rows: neurons), for paper 001's `layer_rank`."""
        return {"W": self.w1}

    def row_weights(self) -> dict[str, torch.Tensor]:
        return {"W": self.w2[0]}


class LeakyNet(Network):
    """2k leaky units max(alpha z, z), output weights fixed to +v (first k) and -v (last k)."""

    def __init__(self, units: int, dim: int, alpha: float, v: float):
        super().__init__()
        self.alpha, k = alpha, units // 2
        self.w1 = nn.Parameter(torch.empty(units, dim))
        self.register_buffer("w2", torch.cat([torch.full((k,), v), torch.full((units - k,), -v)])[None])

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        return F.leaky_relu(x @ self.w1.T, self.alpha) @ self.w2[0]
