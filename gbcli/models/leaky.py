"""Paper 002's leaky network: 2k leaky units max(alpha z, z), no biases, output weights fixed to +v (the
first k, w_i) and -v (the last k, u_i); only the first layer trains (1-homogeneous). In the perfect
agreement regime (PAR) its limit is `svm-par`; `svm-shallow` checks that the data is linearly separable."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal, Optional

import numpy as np
from pydantic import Field, StrictFloat, StrictInt, field_validator

from gbcli.models.base import InitScheme, ModelParams, ModelSpec, Problem, Program, networks
from gbcli.models.linear import LINEAR_SVM

if TYPE_CHECKING:
    from gbcli.programs.design import GatedDesign


class Params(ModelParams):
    kind: Literal["leaky"] = Field("leaky", description="paper 002: 2k leaky ReLU units, output weights fixed to +-v")
    hidden_units: StrictInt = Field(10, ge=1, le=2 ** 31 - 1,
                                    description="2k: k units with output weight +v, k with -v")
    init: Optional[InitScheme] = Field(None, description="default: normal")
    leaky_alpha: StrictFloat = Field(0.2, ge=0, lt=1, allow_inf_nan=False,
                                     description="slope alpha of max(alpha z, z); 0 is a ReLU net (appendix D.1's "
                                                 "counterexample: Theorem 5.1 needs alpha > 0)")
    output_weight: StrictFloat = Field(1.0, gt=0, le=1e6, allow_inf_nan=False,   # a float32 weight
                                       description="v, the fixed output weight (+v first k units, -v last k)")

    @field_validator("hidden_units")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError(f"a leaky net has 2k units (k per output sign), got {v}")
        return v
    homogeneity: ClassVar[int] = 1   # only the first layer is trained


def par_design(cfg, problem: Problem, trained=None) -> GatedDesign:
    """svm-par: min ||w||^2 + ||u||^2 s.t. <w,x> - alpha<u,x> >= 1 (positives), alpha<w,x> - <u,x> <= -1
    (negatives): rows zeta = (w, u), gates (1, -alpha) / (alpha, -1). On new points the limit net has the
    sign of <w - u, x>, so validation gates (1, -1) give exact signs (errors, inconsistency), not magnitudes."""
    from gbcli.programs.design import GatedDesign

    ds, a = problem.dataset, cfg.model.leaky_alpha
    et = np.where(ds.y_train[:, None] > 0, [1.0, -a], [a, -1.0])
    return GatedDesign(ds.x_train, ds.y_train, et, ds.x_val, np.tile([1.0, -1.0], (len(ds.x_val), 1)), "sq")


class Spec(ModelSpec):
    kind, Params = "leaky", Params
    description = "paper 002: 2k leaky units, output weights fixed to +-v"
    programs = {"svm-par": Program("svm-par", "sq", par_design, description="the PAR limit (paper 002)"),
                **LINEAR_SVM}
    matching = "svm-par"
    instruments = ("margin", "kkt", "agreement", "rank", "clusters", "output_linearity")
    default_init = "normal"
    example_model = {"hidden_units": 4}

    def network(self, cfg, dim):
        m = cfg.model
        return networks("relu").LeakyNet(m.hidden_units, dim, m.leaky_alpha, m.output_weight)

    def matching_info(self, cfg, problem, solution):
        """svm-par's optimum bounds only perfectly clustered nets in the PAR (a `margin` ratio above 1: GD
        beat every such net); `par_consistent`: the share of points with the PAR's gate signs at the
        solution (the theorem's limit only if all hold): <w,x> > 0 > <u,x> on positives, reversed on negatives."""
        k, v = cfg.model.hidden_units // 2, cfg.model.output_weight
        ds = problem.dataset
        yx = ds.y_train[:, None] * (ds.x_train @ solution.zeta.T)
        best = v * np.sqrt(k) / np.sqrt(solution.value)
        return {"par_normalized_margin": best, "best_normalized_margin": best,
                "par_consistent": float(np.mean((yx[:, 0] > 0) & (yx[:, 1] < 0)))}
