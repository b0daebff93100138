"""The GLNs' torch modules: the deep GLN, K of them stacked (a sweep's batched training), gln3's, the shallow GLN."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gbcli.models.networks import Network


def column_major(x: torch.Tensor) -> bool:
    """Whether `x` (n x d) is the transpose of a contiguous (d x n) tensor, as `gbcli.training.step` keeps
    the full batch: its (HC x d) @ (d x n) products run 1.3-1.5x faster on one core than row-major ones."""
    return x.dim() == 2 and x.shape[0] > 1 and x.stride(0) == 1 and x.stride(1) == x.shape[0]


def gated_units(x: torch.Tensor, w1: torch.Tensor, rows: torch.Tensor, rows_t: torch.Tensor | None = None
                ) -> torch.Tensor:
    """z[n, h] = <w1[rows[n, h]], x[n]>: every context's product, then each unit's gated one (a column-major
    `x` as w1 @ x.T, gathered along `rows_t` = rows.T contiguous when the caller keeps it)."""
    if column_major(x):
        return (w1 @ x.T).gather(0, rows.T.contiguous() if rows_t is None else rows_t).T
    return (x @ w1.T).gather(1, rows)


class DeepGLN(Network):
    """2-layer gated linear network: z_h = <w1[h, ctx_h], x>, out = sum_h w2[h] z_h (+ bias)."""

    column_major_input = True   # a column-major x takes the faster products (`column_major`)

    def __init__(self, units: int, count: int, dim: int, output_bias: bool = True):
        super().__init__()
        self.units, self.count = units, count
        self.w1 = nn.Parameter(torch.empty(units * count, dim))  # row h*C + c
        self.w2 = nn.Parameter(torch.empty(1, units))
        self.bias = nn.Parameter(torch.zeros(())) if output_bias else None

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        rows, rows_t = self.gates(ctx)
        z = gated_units(x, self.w1, rows, rows_t)
        out = z @ self.w2[0]
        return out + self.bias if self.bias is not None else out

    def gates(self, ctx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The rows of w1 the contexts select (ctx[n, h] + h C) and their transpose; kept for the full
        batch's tensor while it is that very tensor, unchanged (a GLN's gates are fixed)."""
        key = getattr(self, "_gates", None)
        if key is not None and key[0] is ctx and key[1] == ctx._version:
            return key[2], key[3]
        rows = ctx + torch.arange(self.units, device=ctx.device) * self.count
        if ctx.shape[0] < 4096:   # a minibatch: a fresh tensor every step, nothing worth keeping
            return rows, None
        rows_t = rows.T.contiguous()
        self._gates = (ctx, ctx._version, rows, rows_t)
        return rows, rows_t

    def zeta(self) -> torch.Tensor:
        """zeta[h*C + c] = w2[h] w1[h, c]: the predictor depends on the weights only through it."""
        return (self.w2[0].repeat_interleave(self.count)[:, None] * self.w1).detach()


class StackedGLN(Network):
    """K DeepGLNs of one shape as one computation: stacked parameters, one optimizer step for all. Each
    network's products are the very calls `DeepGLN` makes (a wide or batched product sums in another
    order on some CPUs, and batched training must reproduce the plain loop's trajectories exactly)."""

    column_major_input = True   # as DeepGLN's: the full batch comes column-major (`column_major`)

    def __init__(self, models: list[DeepGLN]):
        super().__init__()
        self.units, self.count = models[0].units, models[0].count
        self.w1 = nn.Parameter(torch.stack([m.w1.detach() for m in models]))   # (K, H*C, D)
        self.w2 = nn.Parameter(torch.stack([m.w2.detach() for m in models]))   # (K, 1, H)
        self.bias = nn.Parameter(torch.stack([m.bias.detach() for m in models])) if models[0].bias is not None else None
        self.register_buffer("first_row", torch.arange(self.units) * self.count, persistent=False)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        rows = ctx + self.first_row                                                  # (K, n, H)
        z = torch.stack([gated_units(x, self.w1[j], rows[j]) for j in range(len(rows))])
        out = torch.stack([z[j] @ self.w2[j, 0] for j in range(len(z))])
        return out + self.bias[:, None] if self.bias is not None else out

    def unstack(self, models: list[DeepGLN]) -> None:
        with torch.no_grad():
            for k, m in enumerate(models):
                for name, p in m.named_parameters():   # w1, w2 and the bias if it has one
                    p.copy_(getattr(self, name)[k])


class GLN3(Network):
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


class ShallowGLN(Network):
    """One unit with C global contexts, each its own linear predictor: out = <w[ctx], x> (+ bias).
    A context without training points gets no gradient, so `restrict(ctx_train)` trains only the used
    rows (`w`) and keeps the others as a fixed buffer (`w_rest`, zero on the used rows): the same
    trajectory without moving 25M numbers a step at C = 2^15 (`shallow.Spec.trained_state` reassembles (C, D))."""

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
