"""Deep linear networks (paper 004): x -> W_L ... W_1 x; the predictor w = W_1' ... W_L' is linear
and GD drives its direction to the linear SVM (`svm-shallow`). The best min y f / ||theta||^L is the
balanced factorization's, ||theta||^2 = L ||w||^(2/L): 1 / (L^(L/2) ||w*||), ||w*||^2 the SVM's optimum."""

from __future__ import annotations

import math
from typing import Literal, Optional

from pydantic import Field, StrictInt

from gbcli.models.base import InitScheme, ModelParams, ModelSpec, networks
from gbcli.models.linear import LINEAR_SVM


class Params(ModelParams):
    kind: Literal["deep-linear"] = Field("deep-linear", description="paper 004: deep linear network x -> W_L ... W_1 x")
    depth: StrictInt = Field(2, ge=2, le=16, description="L: number of weight matrices")
    width: StrictInt = Field(10, ge=1, le=10_000, description="hidden width of the layers between input and output")
    init: Optional[InitScheme] = Field(None, description="default: normal (std 1/sqrt(fan-in)) times init_scale")


class Spec(ModelSpec):
    kind, Params = "deep-linear", Params
    description = "paper 004: x -> W_L ... W_1 x"
    programs, matching = LINEAR_SVM, "svm-shallow"
    instruments = ("margin", "kkt", "agreement", "layers")
    default_init = "normal"
    example_model = {"depth": 3, "width": 4}

    def network(self, cfg, dim):
        return networks("linear").DeepLinear(cfg.model.depth, cfg.model.width, dim)

    def best_normalized_margin(self, cfg, optimum):
        depth = cfg.model.depth
        return 1.0 / (depth ** (depth / 2) * math.sqrt(optimum))

    def describe(self, row):
        return f"N={row['train_size']}"
