"""Paper 001's residual ReLU network (Phuong & Lampert, section 5.2, eq. 30), no biases:

    f_1 = W_1 x,   f_l = f_{l-1} + W_l relu(f_{l-1})  (l = 2..L-1),   f = W_L relu(f_{L-1}),

W_1 (width x D), W_2..W_{L-1} (width x width), W_L (1 x width). The paper trains L = 4, width 100,
with the same init, optimiser and schedule as its two-layer net (torch's default init times 0.05,
`model.init: torch-default`, `model.init_scale: 0.05`).

The net is not homogeneous in its weights (the skip connections add terms of different degrees),
so only the instruments that do not need homogeneity apply: `layer_rank` (singular values and
projected rows of W_1..W_{L-1}) and `closest_alignment` (each first-layer row against the closer
of w+ / w-, `svm-pos` / `svm-neg`). `homogeneity` is L, the top degree, for the logged normalized
margin only.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, StrictInt

from gbcli.models import one_class
from gbcli.models.base import InitScheme, ModelParams, ModelSpec, networks


class Params(ModelParams):
    kind: Literal["residual"] = Field("residual", description="paper 001: residual ReLU network f_l = f_{l-1} + W_l "
                                                              "relu(f_{l-1}), no biases")
    depth: StrictInt = Field(4, ge=2, le=64, description="L: number of weight matrices")
    width: StrictInt = Field(100, ge=1, le=10_000, description="p: the width of every hidden layer")
    init: Optional[InitScheme] = Field(None, description="default: torch-default (nn.Linear's) times init_scale")


class Spec(ModelSpec):
    kind, Params = "residual", Params
    description = "paper 001: residual ReLU net f_l = f_{l-1} + W_l relu(f_{l-1}), no biases"
    programs = one_class.PROGRAMS
    instruments = ("layer_rank", "closest_alignment")
    default_init = "torch-default"
    example_model = {"depth": 3, "width": 4}

    def homogeneous(self, params):
        return False

    def network(self, cfg, dim):
        return networks(__name__).ResidualNet(cfg.model.depth, cfg.model.width, dim)


SPEC = Spec()
