"""The deep gated linear network (protocol sections 3-5): H units x C hyperplane contexts.

z_h = <w1[h, ctx_h], x>, out = sum_h w2[h] z_h (+ bias). The predictor depends on the weights only
through zeta[h*C + c] = w2[h] w1[h, c], so its max-margin limit is a convex program in zeta:
`svm-gln` (the GLN norm, a group norm over units) and `svm-l2` (the L2 norm of all C^H context
predictors), plus the published code's variants `svm-gln-reference` and `svm-l2-reference`.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
from pydantic import Field, StrictInt
from torch import nn

from gbcli.models.base import InitScheme, ModelParams, ModelSpec, Problem, Program
from gbcli.models.gating import one_hot, published_hyperplanes, sample_hyperplanes
from gbcli.programs.design import GatedDesign, reference_groups, unit_groups


class Params(ModelParams):
    kind: Literal["gln"] = Field("gln", description="the deep gated linear network: H units x C contexts, hyperplane "
                                                    "gating")
    hidden_units: StrictInt = Field(10, ge=1, description="H: hidden units")
    output_bias: bool = Field(True, description="scalar output bias (published runs kept it)")
    init: Optional[InitScheme] = Field(None, description="default: orthogonal")

    @property
    def homogeneity(self) -> int:
        return 2


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


def hyperplane_problem(cfg, dataset, units: int) -> Problem:
    """Sample `units` x k hyperplanes (C = 2^k contexts per unit; `contexts.draws` says how) and gate the data."""
    c = cfg.contexts
    draw = published_hyperplanes if c.draws == "published" else sample_hyperplanes
    hp = draw(units, c.count, dataset.x_pool, c.seed, c.median_init, c.normal_std, c.offset_std)
    return Problem(dataset, hp, hp.local_contexts(dataset.x_train), hp.local_contexts(dataset.x_val))


def context_design(norm: str, reference_grouping: bool = False):
    """The design of the GLN programs: one-hot contexts per unit, rows grouped by unit (or, for the
    published code's variant, in the groups {i, i+H, ...})."""

    def design(cfg, problem: Problem, trained=None) -> GatedDesign:
        ds, h, c = problem.dataset, cfg.model.hidden_units, cfg.contexts.count
        groups = reference_groups(h, c) if reference_grouping else unit_groups(h, c)
        return GatedDesign(ds.x_train, ds.y_train, one_hot(problem.ctx_train, c), ds.x_val,
                           one_hot(problem.ctx_val, c), norm, groups, h, c)

    return design


class Spec(ModelSpec):
    kind, Params = "gln", Params
    description = "H units x C contexts, hyperplane gating"
    programs = {
        "svm-l2": Program("svm-l2", "l2", context_design("l2"), description="the L2 norm of all context predictors"),
        "svm-gln": Program("svm-gln", "group", context_design("group"), description="the GLN norm"),
        "svm-l2-reference": Program("svm-l2-reference", "l2-reference", context_design("l2-reference"),
                                    description="the published code's svm-l2 objective"),
        "svm-gln-reference": Program("svm-gln-reference", "group", context_design("group", reference_grouping=True),
                                     description="the published code's grouping of the GLN norm"),
    }
    instruments = ("margin", "kkt", "agreement")
    example_model = {"hidden_units": 3, "output_bias": False}
    Stacked = StackedGLN

    def units(self, params):
        return params.hidden_units

    def default_init_seed(self, cfg):
        return cfg.contexts.seed

    def homogeneous(self, params):
        return not params.output_bias

    def gating(self, cfg, dataset):
        return hyperplane_problem(cfg, dataset, cfg.model.hidden_units)

    def network(self, cfg, dim):
        return DeepGLN(cfg.model.hidden_units, cfg.contexts.count, dim, cfg.model.output_bias)

    def matching_program(self, cfg):
        return "svm-gln"

    def best_normalized_margin(self, cfg, optimum):
        # min ||w||^2 at margin 1 = 2 x the GLN-norm optimum (||w1_h||^2 + w2_h^2 >= 2 ||zeta_h||,
        # with equality for balanced layers)
        return 1.0 / (2.0 * optimum)

    def describe(self, row):
        return f"H={row['hidden_units']}, C={row['contexts']}, N={row['train_size']}, median_init={row['median_init']}"

    def published_outputs(self, model, cfg, problem):
        """The validation outputs the published comparison used (protocol section 10): the trained
        weights and normals, but the offsets as drawn (its reloaded network lost the median offsets).
        Without median init nothing was lost: the outputs themselves."""
        if not cfg.contexts.median_init or problem.hyperplanes is None or problem.hyperplanes.raw_offsets is None:
            return None
        hp = problem.hyperplanes.with_offsets(problem.hyperplanes.raw_offsets)
        ds = problem.dataset
        with torch.no_grad():
            x = torch.tensor(ds.x_val, dtype=torch.float32)
            return model.float().cpu()(x, torch.tensor(hp.local_contexts(ds.x_val))).double().numpy()


SPEC = Spec()
