"""Paper 003's convolution with disjoint patches and one shared filter:
f(x) = sum_j v_j sigma(<w, x^(j)>), started from explicit weights; its program is the non-convex
Problem 2 (gbcli.models.construction)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, StrictInt
from torch import nn

from gbcli.errors import GbError
from gbcli.models import construction
from gbcli.models.base import ModelParams


class Params(ModelParams):
    kind: Literal["conv"] = Field("conv", description="paper 003: shared-filter convolution over disjoint patches, "
                                                      "explicit initial weights")
    patches: StrictInt = Field(2, ge=1, le=10_000, description="disjoint patches the input is split into")
    activation: Literal["linear", "relu"] = Field("relu", description="the hidden activation")
    weights: dict[str, Any] = Field(description="explicit initial weights by parameter name (w: the filter, v)")

    @property
    def homogeneity(self) -> int:
        return 2


class SharedFilterConv(nn.Module):
    """Convolution with disjoint patches and one shared filter: f(x) = sum_j v_j sigma(<w, x^(j)>)."""

    def __init__(self, patches: int, dim: int, activation: str):
        super().__init__()
        if dim % patches:
            raise GbError(f"model.patches: {patches} patches do not split inputs of dimension {dim}")
        self.activation, self.patches = activation, patches
        self.w = nn.Parameter(torch.empty(dim // patches))
        self.v = nn.Parameter(torch.empty(patches))

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        pre = x.reshape(len(x), self.patches, -1) @ self.w
        return construction.activate(pre, self.activation) @ self.v

    def weights(self) -> list[torch.Tensor]:
        return [self.w, self.v]


class Spec(construction.ConstructionSpec):
    kind, Params = "conv", Params
    description = "paper 003: shared-filter convolution over disjoint patches, explicit initial weights"
    programs = construction.programs()
    instruments = ("kkt", "layer_optimality")

    example_model = {"activation": "relu", "weights": {"w": [0.0, 1.0], "v": [0.7, 0.7]}}
    example_x = [[4.0, 0.7, -4.0, 0.7]]

    def network(self, cfg, dim):
        return SharedFilterConv(cfg.model.patches, dim, cfg.model.activation)

    def numpy_margins(self, theta_parts, x, cfg):
        w, v = theta_parts
        patches = x.reshape(len(x), len(v), -1)
        pre = patches @ w
        g = construction.gate(pre, cfg.model.activation)
        return (pre * g) @ v, np.hstack([np.einsum("nj,njp->np", g * v, patches), pre * g])


SPEC = Spec()
