"""The deep gated linear network (protocol sections 3-5): H units x C hyperplane contexts,
z_h = <w1[h, ctx_h], x>, out = sum_h w2[h] z_h (+ bias). The predictor depends on the weights only through
zeta[h*C + c] = w2[h] w1[h, c], so its limit is a convex program in zeta: `svm-gln` (group norm over
units), `svm-l2`, the published code's `-reference` variants, and `svm-gln-linf` under l-infinity."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, ClassVar, Literal, Optional

from pydantic import Field, StrictInt

from gbcli.models.base import InitScheme, ModelParams, ModelSpec, Problem, Program, networks
from gbcli.models.gating import published_hyperplanes, sample_hyperplanes
from gbcli.optimizers import geometry

if TYPE_CHECKING:
    from gbcli.programs.design import GatedDesign


class Params(ModelParams):
    kind: Literal["gln"] = Field("gln", description="the deep gated linear network: H units x C contexts, hyperplane "
                                                    "gating")
    hidden_units: StrictInt = Field(10, ge=1, le=2 ** 31 - 1, description="H: hidden units")
    output_bias: bool = Field(True, description="scalar output bias (published runs kept it)")
    init: Optional[InitScheme] = Field(None, description="default: orthogonal")
    homogeneity: ClassVar[int] = 2


class HyperplaneSpec(ModelSpec):
    """A kind gated by random hyperplanes (the GLNs), seeded by contexts.seed unless model.init_seed is set."""

    def gated_units(self, params) -> int:   # units with their own k hyperplanes
        return self.units(params)

    def default_init_seed(self, cfg):
        return cfg.contexts.seed

    def homogeneous(self, params):
        return not getattr(params, "output_bias", False)

    def gating(self, cfg, dataset):
        """Sample the hyperplanes (C = 2^k contexts per unit; `contexts.draws` says how) and gate the data."""
        c = cfg.contexts
        draw = published_hyperplanes if c.draws == "published" else sample_hyperplanes
        hp = draw(self.gated_units(cfg.model), c.count, dataset.x_pool, c.seed, c.median_init, c.normal_std,
                  c.offset_std)
        return Problem(dataset, hp, hp.local_contexts(dataset.x_train, dataset.train_idx),
                       hp.local_contexts(dataset.x_val, dataset.val_idx))


def context_design(cfg, problem: Problem, trained=None, *, norm: str, reference_grouping: bool = False) -> GatedDesign:
    """One-hot contexts per unit, rows grouped by unit (the published code's variant: groups {i, i+H, ...})."""
    from gbcli.programs.design import GatedDesign, one_hot, reference_groups, unit_groups

    ds, h, c = problem.dataset, cfg.model.hidden_units, cfg.contexts.count
    groups = reference_groups(h, c) if reference_grouping else unit_groups(h, c)
    return GatedDesign(ds.x_train, ds.y_train, one_hot(problem.ctx_train, c), ds.x_val,
                       one_hot(problem.ctx_val, c), norm, groups, h, c)


class Spec(HyperplaneSpec):
    kind, Params = "gln", Params
    description = "H units x C contexts, hyperplane gating"
    programs = {p.name: p for p in (
        Program("svm-l2", "l2", partial(context_design, norm="l2"),
                description="the L2 norm of all context predictors"),
        Program("svm-gln", "group", partial(context_design, norm="group"), description="the GLN norm"),
        Program("svm-l2-reference", "l2-reference", partial(context_design, norm="l2-reference"),
                description="the published code's svm-l2 objective"),
        Program("svm-gln-reference", "group", partial(context_design, norm="group", reference_grouping=True),
                description="the published code's grouping of the GLN norm"),
        Program("svm-gln-linf", "linf", partial(context_design, norm="linf"),
                description="the l-infinity max-margin LP on zeta (l-infinity on the weights)"))}
    instruments = ("margin", "kkt", "agreement", "convergence")
    example_model = {"hidden_units": 3, "output_bias": False}
    follows_optimizer = True

    @property
    def Stacked(self):
        return networks("gln").StackedGLN

    def network(self, cfg, dim):
        return networks("gln").DeepGLN(cfg.model.hidden_units, cfg.contexts.count, dim, cfg.model.output_bias)

    def matching_program(self, cfg):
        """svm-gln for the l2 geometry, svm-gln-linf for l-infinity; none for lq, q < 2 (non-convex)."""
        return {2.0: "svm-gln", math.inf: "svm-gln-linf"}.get(geometry(cfg.training))

    def best_normalized_margin(self, cfg, optimum):
        # l2: min ||w||^2 at margin 1 = 2 x the GLN-norm optimum (||w1_h||^2 + w2_h^2 >= 2 ||zeta_h||,
        # with equality for balanced layers); l-infinity: min ||w||_inf^2 = max |zeta| (w2_h = sqrt(t))
        return 1.0 / optimum if geometry(cfg.training) == math.inf else 1.0 / (2.0 * optimum)

    def describe(self, row):
        return f"H={row['hidden_units']}, C={row['contexts']}, N={row['train_size']}, median_init={row['median_init']}"

    def published_outputs(self, model, cfg, problem):
        """The trained weights and normals with the offsets as drawn: the published comparison's reloaded
        network lost the median offsets (protocol section 10); without median init nothing was lost."""
        if not cfg.contexts.median_init:   # the gating always holds the offsets as drawn (`raw_offsets`)
            return None
        import torch

        hp = replace(problem.hyperplanes, offsets=problem.hyperplanes.raw_offsets, pool_sides=None)
        ds = problem.dataset
        with torch.no_grad():
            x = torch.tensor(ds.x_val, dtype=torch.float32)
            return model.float().cpu()(x, torch.tensor(hp.local_contexts(ds.x_val))).double().numpy()
