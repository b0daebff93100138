"""Paper 001's residual ReLU network (Phuong & Lampert, section 5.2, eq. 30), no biases:
f_1 = W_1 x, f_l = f_{l-1} + W_l relu(f_{l-1}) (l = 2..L-1), f = W_L relu(f_{L-1}). The paper trains
L = 4, width 100, torch's default init times 0.05. Not homogeneous (skip connections mix degrees): only
`layer_rank` and `closest_alignment` apply; `homogeneity` L (the top degree) serves the logged margin."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, StrictInt

from gbcli.models.base import InitScheme, ModelParams, ModelSpec, networks
from gbcli.models.relu import ONE_CLASS_PROGRAMS


class Params(ModelParams):
    kind: Literal["residual"] = Field("residual", description="paper 001: residual ReLU network f_l = f_{l-1} + W_l "
                                                              "relu(f_{l-1}), no biases")
    depth: StrictInt = Field(4, ge=2, le=64, description="L: number of weight matrices")
    width: StrictInt = Field(100, ge=1, le=10_000, description="p: the width of every hidden layer")
    init: Optional[InitScheme] = Field(None, description="default: torch-default (nn.Linear's) times init_scale")


class Spec(ModelSpec):
    kind, Params = "residual", Params
    description = "paper 001: residual ReLU net f_l = f_{l-1} + W_l relu(f_{l-1}), no biases"
    programs = ONE_CLASS_PROGRAMS
    instruments = ("layer_rank", "closest_alignment")
    exactly_homogeneous = False
    default_init = "torch-default"
    example_model = {"depth": 3, "width": 4}

    def network(self, cfg, dim):
        return networks("linear").ResidualNet(cfg.model.depth, cfg.model.width, dim)
