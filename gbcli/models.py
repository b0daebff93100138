"""The GD networks (protocol section 4), as torch modules with a common interface.

Every model is called as `model(x, ctx)`: `x` is (B, D) and `ctx` the (B, H) local contexts
(ignored by models without contexts). `weights()` lists the homogeneous weights (the output
bias excluded), so the normalized margin min y f / ||w||^L is defined for all of them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import Config


def _init(tensor: torch.Tensor, scheme: str, gen: torch.Generator, scale: float) -> torch.Tensor:
    with torch.no_grad():
        if scheme == "orthogonal":
            nn.init.orthogonal_(tensor, generator=gen)
        elif scheme == "kaiming":
            nn.init.kaiming_normal_(tensor, nonlinearity="relu", generator=gen)
        else:
            tensor.normal_(0.0, 1.0 / tensor.shape[-1] ** 0.5, generator=gen)
        tensor.mul_(scale)
    return tensor


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


class ShallowGLN(nn.Module):
    """One unit with C global contexts, each with its own linear predictor: out = <w[ctx], x> (+ bias).

    With C = 2^15 contexts and at most N = 2000 of them holding training points, SGD on the full
    (C, D) weight would move 25M numbers per step for nothing: a context without training points
    gets no gradient, so (plain or momentum) SGD leaves its weights at their initial values.
    `restrict(ctx_train)` therefore trains only the used rows (`w`) and keeps the others as a
    fixed buffer (`w_rest`, zero on the used rows); the trajectory is the same, and
    `full_weight()` reassembles the (C, D) matrix."""

    def __init__(self, count: int, dim: int, output_bias: bool = True):
        super().__init__()
        self.count = count
        self.w = nn.Parameter(torch.empty(count, dim))
        self.bias = nn.Parameter(torch.zeros(())) if output_bias else None
        self.register_buffer("w_rest", torch.empty(0, dim))
        self.register_buffer("slot", torch.empty(0, dtype=torch.long))  # context -> row of w, or -1

    def restrict(self, ctx: torch.Tensor, sparse_grad: bool = False) -> None:
        """Train only the rows of the contexts in `ctx`. `sparse_grad` (for plain SGD, whose update
        then touches only the batch's rows; momentum needs the dense buffer) is exact as well."""
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

    def weights(self) -> list[torch.Tensor]:
        """The trained weights; the fixed rows enter the norm through `fixed_sq_norm`."""
        return [self.w]


class ReLUNet(nn.Module):
    """785 -> H -> 1 ReLU network without biases (2-homogeneous).

    With `frozen` set, unit h is gated by [w_gate_h . x >= 0] from a frozen copy of the first
    layer (frozen-gate ReLU, FReLU); only the linear weights then move.
    """

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

    def weights(self) -> list[torch.Tensor]:
        return [self.w1, self.w2]


class Linear(nn.Module):
    """A plain linear predictor <w, x>."""

    def __init__(self, dim: int):
        super().__init__()
        self.w = nn.Parameter(torch.empty(1, dim))

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        return x @ self.w[0]

    def weights(self) -> list[torch.Tensor]:
        return [self.w]


class LeakyNet(nn.Module):
    """Paper 002: 2k leaky units max(alpha z, z) without biases, output weights fixed to +v (first k
    units, the w_i) and -v (last k, the u_i); only the first layer is trained, so the net is
    1-homogeneous in its trained weights."""

    def __init__(self, units: int, dim: int, alpha: float, v: float):
        super().__init__()
        self.alpha, k = alpha, units // 2
        self.w1 = nn.Parameter(torch.empty(units, dim))
        self.register_buffer("w2", torch.cat([torch.full((k,), v), torch.full((units - k,), -v)])[None])

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x @ self.w1.T, self.alpha)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        return self.hidden(x) @ self.w2[0]

    def weights(self) -> list[torch.Tensor]:
        return [self.w1]


def balance(model: ReLUNet, gen: torch.Generator) -> None:
    """Paper 001's balanced init: |w2_j| = ||w1_j||, with random signs."""
    with torch.no_grad():
        sign = torch.where(torch.rand(model.w2.shape[1], generator=gen) < 0.5, -1.0, 1.0)
        model.w2.copy_((sign * model.w1.norm(dim=1))[None])


def build_model(cfg: Config, dim: int) -> nn.Module:
    """The configured network with its seeded initialization (float32)."""
    m = cfg.model
    if m.kind in ("diagonal", "conv"):   # paper 003's small networks: explicit weights (gbcli.nonconvex)
        from .nonconvex import build_explicit

        return build_explicit(cfg, dim)
    scheme = m.init or ("kaiming" if m.kind in ("relu", "frelu") else "normal" if m.kind == "leaky" else "orthogonal")
    gen = torch.Generator().manual_seed(cfg.init_seed)
    if m.kind == "gln":
        model = DeepGLN(m.hidden_units, cfg.contexts.count, dim, m.output_bias)
    elif m.kind == "shallow":
        model = ShallowGLN(cfg.contexts.count, dim, m.output_bias)
    elif m.kind in ("relu", "frelu"):
        model = ReLUNet(m.hidden_units, dim)
    elif m.kind == "leaky":
        model = LeakyNet(m.hidden_units, dim, m.leaky_alpha, m.output_weight)
    else:
        model = Linear(dim)
    for w in model.weights():
        _init(w.data, "normal" if scheme == "balanced" else scheme, gen, m.init_scale)
    if scheme == "balanced":
        balance(model, gen)
    if m.weights is not None:   # explicit initial weights (paper 003's 2-neuron ReLU net)
        from .nonconvex import set_weights

        set_weights(model, m.weights)
    if m.kind == "frelu" and m.freeze_gates_after == 0:
        model.freeze_gates()
    return model


def weight_norm(model: nn.Module) -> float:
    """Euclidean norm of all homogeneous weights (a restricted shallow GLN's fixed rows included)."""
    sq = sum((w.detach().double() ** 2).sum() for w in model.weights()) + getattr(model, "fixed_sq_norm", 0.0)
    return float(torch.sqrt(sq))
