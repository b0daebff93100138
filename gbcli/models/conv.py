"""Paper 003's shared-filter convolution over disjoint patches, f(x) = sum_j v_j sigma(<w, x^(j)>), from
explicit weights; its program is the non-convex Problem 2 (gbcli.models.construction)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, StrictInt

from gbcli.models import construction
from gbcli.models.base import ModelParams, networks


class Params(ModelParams):
    kind: Literal["conv"] = Field("conv", description="paper 003: shared-filter convolution over disjoint patches, "
                                                      "explicit initial weights")
    patches: StrictInt = Field(2, ge=1, le=10_000, description="disjoint patches the input is split into")
    activation: Literal["linear", "relu"] = Field("relu", description="the hidden activation")
    weights: dict[str, Any] = Field(description="explicit initial weights by parameter name (w: the filter, v)")
    homogeneity: ClassVar[int] = 2


class Spec(construction.ConstructionSpec):
    kind, Params = "conv", Params
    description = "paper 003: shared-filter convolution over disjoint patches, explicit initial weights"

    example_model = {"activation": "relu", "weights": {"w": [0.0, 1.0], "v": [0.7, 0.7]}}
    example_x = [[4.0, 0.7, -4.0, 0.7]]

    def network(self, cfg, dim):
        return networks("construction").SharedFilterConv(cfg.model.patches, dim, cfg.model.activation)

    def numpy_margins(self, theta_parts, x, cfg):
        w, v = theta_parts
        patches = x.reshape(len(x), len(v), -1)
        pre = patches @ w
        g = construction.gate(pre, cfg.model.activation)
        return (pre * g) @ v, np.hstack([np.einsum("nj,njp->np", g * v, patches), pre * g])
