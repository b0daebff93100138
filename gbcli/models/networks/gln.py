"""The deep gated linear network's torch modules (`gbcli.models.gln`): one network, and K of one
shape stacked as one computation for a sweep's batched training."""

from __future__ import annotations

import torch
from torch import nn


class DeepGLN(nn.Module):
    """2-layer gated linear network: z_h = <w1[h, ctx_h], x>, out = sum_h w2[h] z_h (+ bias)."""

    def __init__(self, units: int, count: int, dim: int, output_bias: bool = True):
        super().__init__()
        self.units, self.count = units, count
        self.w1 = nn.Parameter(torch.empty(units * count, dim))  # row h*C + c
        self.w2 = nn.Parameter(torch.empty(1, units))
        self.bias = nn.Parameter(torch.zeros(())) if output_bias else None

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        rows = ctx + torch.arange(self.units, device=x.device) * self.count
        z = (x @ self.w1.T).gather(1, rows)
        out = z @ self.w2[0]
        return out + self.bias if self.bias is not None else out

    def zeta(self) -> torch.Tensor:
        """zeta[h*C + c] = w2[h] w1[h, c]: the predictor depends on the weights only through it."""
        return (self.w2[0].repeat_interleave(self.count)[:, None] * self.w1).detach()

    def weights(self) -> list[torch.Tensor]:
        return [self.w1, self.w2]


class StackedGLN(nn.Module):
    """K DeepGLNs of one shape as one computation (batched training of a sweep's points): the
    K networks' parameters as stacked tensors, one optimizer step for all; each network's products
    are the very calls `DeepGLN` makes (a wide or batched product sums in another order on some
    CPUs, and batched training must reproduce the plain loop's trajectories exactly)."""

    def __init__(self, models: list[DeepGLN]):
        super().__init__()
        self.units, self.count = models[0].units, models[0].count
        self.w1 = nn.Parameter(torch.stack([m.w1.detach() for m in models]))   # (K, H*C, D)
        self.w2 = nn.Parameter(torch.stack([m.w2.detach() for m in models]))   # (K, 1, H)
        self.bias = nn.Parameter(torch.stack([m.bias.detach() for m in models])) if models[0].bias is not None else None
        self.register_buffer("first_row", torch.arange(self.units) * self.count, persistent=False)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        rows = ctx + self.first_row                                                  # (K, n, H)
        # each network's first layer is its own (n x D) @ (D x H*C) product, the very call DeepGLN
        # makes: one wide (n x D) @ (D x K*H*C) product was 5-30% faster, but whether the BLAS kernel
        # sums it in the same order as the narrow one depends on the CPU (equal on one machine, off by
        # 1e-4 at H*C = 80 on an AVX-512 one), and a batched grid must give the plain loop's numbers
        z = torch.stack([(x @ self.w1[j].T).gather(1, rows[j]) for j in range(len(rows))])
        out = torch.stack([z[j] @ self.w2[j, 0] for j in range(len(z))])
        return out + self.bias[:, None] if self.bias is not None else out

    def weights(self) -> list[torch.Tensor]:
        return [self.w1, self.w2]

    def unstack(self, models: list[DeepGLN]) -> None:
        with torch.no_grad():
            for k, m in enumerate(models):
                m.w1.copy_(self.w1[k])
                m.w2.copy_(self.w2[k])
                if m.bias is not None:
                    m.bias.copy_(self.bias[k])
