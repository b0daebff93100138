from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gbcli.models.networks import Network


class ShallowGLN(Network):
    """One unit with C global contexts, each its own linear predictor: out = <w[ctx], x> (+ bias).
    A context without training points gets no gradient, so `restrict(ctx_train)` trains only the used
    rows (`w`) and keeps the others as a fixed buffer (`w_rest`, zero on the used rows): the same
    trajectory without moving 25M numbers a step at C = 2^15; `full_weight()` reassembles (C, D)."""

    def __init__(self, count: int, dim: int, output_bias: bool = True):
        super().__init__()
        self.count = count
        self.w = nn.Parameter(torch.empty(count, dim))
        self.bias = nn.Parameter(torch.zeros(())) if output_bias else None
        self.register_buffer("w_rest", torch.empty(0, dim))
        self.register_buffer("slot", torch.empty(0, dtype=torch.long))  # context -> row of w, or -1

    def restrict(self, ctx: torch.Tensor, sparse_grad: bool = False) -> None:
        """Train only the rows of the contexts in `ctx`; `sparse_grad` (exact too) for plain SGD only."""
        self.sparse_grad = sparse_grad
        used = torch.unique(ctx[:, 0])
        full = self.w.detach()
        self.slot = torch.full((self.count,), -1, dtype=torch.long, device=full.device)
        self.slot[used] = torch.arange(len(used), device=full.device)
        self.w_rest = full.clone().index_fill_(0, used, 0.0)
        self.w = nn.Parameter(full[used].clone())
        self.fixed_sq_norm = float((self.w_rest.double() ** 2).sum())   # constant from here on

    def full_weight(self) -> torch.Tensor:
        if not len(self.slot):
            return self.w.detach()
        used = torch.nonzero(self.slot >= 0)[:, 0]
        return self.w_rest.index_copy(0, used, self.w.detach()[self.slot[used]])

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        c = ctx[:, 0]
        if len(self.slot):
            row = self.slot[c]
            trained = row >= 0
            if bool(trained.all()):   # every training batch: skip the fixed rows
                w = F.embedding(row, self.w, sparse=self.sparse_grad)
            else:
                w = torch.where(trained[:, None], F.embedding(row.clamp(min=0), self.w, sparse=self.sparse_grad),
                                self.w_rest.index_select(0, c))
        else:
            w = self.w[c]
        out = (w * x).sum(1)
        return out + self.bias if self.bias is not None else out
