"""The shallow GLN (protocol section 4): one unit with C = 2^k global contexts, each with its own
linear predictor; its max-margin limit is `svm-shallow`, one linear SVM per context."""

from __future__ import annotations

import math
from typing import Literal, Optional

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from gbcli.errors import GbError
from gbcli.models.base import InitScheme, ModelParams, ModelSpec, Problem, Program, sqrt_margin
from gbcli.models.gln import hyperplane_problem
from gbcli.models.gating import one_hot
from gbcli.programs.design import GatedDesign


class Params(ModelParams):
    kind: Literal["shallow"] = Field("shallow", description="the shallow GLN: one unit, C = 2^k global contexts")
    hidden_units: Literal[1] = Field(1, description="a shallow GLN has exactly one unit (set contexts.count)")
    output_bias: bool = Field(True, description="scalar output bias (published runs kept it)")
    init: Optional[InitScheme] = Field(None, description="default: orthogonal")

    @property
    def homogeneity(self) -> int:
        return 1


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


def shallow_design(cfg, problem: Problem, trained=None) -> GatedDesign:
    """One predictor per global context; a context without training points gets zero weights, so
    only the used ones are columns (C = 2^15 would make a 12000 x 32768 one-hot)."""
    ds, c = problem.dataset, cfg.contexts.count
    used = np.unique(problem.ctx_train[:, 0])
    col = np.full(c, -1)
    col[used] = np.arange(len(used))
    et = one_hot(col[problem.ctx_train[:, :1]], len(used))
    ev = np.zeros((len(ds.x_val), len(used)))
    seen = col[problem.ctx_val[:, 0]] >= 0
    ev[np.flatnonzero(seen), col[problem.ctx_val[seen, 0]]] = 1.0
    return GatedDesign(ds.x_train, ds.y_train, et, ds.x_val, ev, "sq", [], 1, c)


class Spec(ModelSpec):
    kind, Params = "shallow", Params
    description = "one unit, C = 2^k global contexts"
    programs = {"svm-shallow": Program("svm-shallow", "sq", shallow_design, description="one linear SVM per context")}
    instruments = ("margin", "kkt", "agreement")
    figure_axis = "hyperplanes"
    example_model = {"output_bias": False}

    def default_init_seed(self, cfg):
        return cfg.contexts.seed

    def homogeneous(self, params):
        return not params.output_bias

    def gating(self, cfg, dataset):
        return hyperplane_problem(cfg, dataset, 1)

    def network(self, cfg, dim):
        return ShallowGLN(cfg.contexts.count, dim, cfg.model.output_bias)

    def load(self, state, cfg, dim, path):
        """A trained (restricted) model comes back unrestricted: its full (C, D) weight."""
        sd = state.get("state_dict", {})
        net = ShallowGLN(cfg.contexts.count, dim, cfg.model.output_bias)
        try:
            w, slot = sd["w"], sd["slot"]
            full = w if not len(slot) else sd["w_rest"].index_copy(
                0, torch.nonzero(slot >= 0)[:, 0], w[slot[slot >= 0]])
            net.load_state_dict({"w": full, "w_rest": torch.empty(0, dim), "slot": torch.empty(0, dtype=torch.long),
                                 **({"bias": sd["bias"]} if "bias" in sd else {})})
        except (RuntimeError, KeyError, TypeError, IndexError):
            raise GbError(f"{path}: does not match the configured network (rerun `gb train-gd`)") from None
        return net.double()

    def matching_program(self, cfg):
        return "svm-shallow"

    def best_normalized_margin(self, cfg, optimum):
        return sqrt_margin(optimum)   # the objective is ||w||^2 itself

    def describe(self, row):
        return f"k={int(math.log2(row['contexts']))}, N={row['train_size']}, median_init={row['median_init']}"


SPEC = Spec()
