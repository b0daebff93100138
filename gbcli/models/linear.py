"""A plain linear predictor <w, x> (paper 004): its limit is the linear SVM `svm-shallow` (one
context) under gradient descent, the l1 max-margin program `svm-l1` under coordinate descent."""

from __future__ import annotations

from typing import Literal, Optional

import torch
from pydantic import Field
from torch import nn

from gbcli.models.base import InitScheme, ModelParams, ModelSpec, Problem, Program, sqrt_margin
from gbcli.programs.design import GatedDesign, constant_gates


class Params(ModelParams):
    kind: Literal["linear"] = Field("linear", description="a linear predictor <w, x>")
    init: Optional[InitScheme] = Field(None, description="default: orthogonal")

    @property
    def homogeneity(self) -> int:
        return 1


class Linear(nn.Module):
    """A plain linear predictor <w, x>."""

    def __init__(self, dim: int):
        super().__init__()
        self.w = nn.Parameter(torch.empty(1, dim))

    def forward(self, x: torch.Tensor, ctx: torch.Tensor | None = None) -> torch.Tensor:
        return x @ self.w[0]

    def weights(self) -> list[torch.Tensor]:
        return [self.w]


def linear_design(norm: str):
    """A linear predictor as a gated design: one always-on context."""

    def design(cfg, problem: Problem, trained=None) -> GatedDesign:
        ds = problem.dataset
        return GatedDesign(ds.x_train, ds.y_train, constant_gates(len(ds.x_train)), ds.x_val,
                           constant_gates(len(ds.x_val)), norm)

    return design


class Spec(ModelSpec):
    kind, Params = "linear", Params
    description = "a linear predictor"
    programs = {"svm-shallow": Program("svm-shallow", "sq", linear_design("sq"), description="the linear SVM"),
                "svm-l1": Program("svm-l1", "l1", linear_design("l1"), description="the l1 max-margin LP")}
    instruments = ("margin", "kkt", "agreement", "reg-path")
    coordinate_descent = True

    def network(self, cfg, dim):
        return Linear(dim)

    def matching_program(self, cfg):
        return "svm-l1" if cfg.training.descent == "coordinate" else "svm-shallow"

    def best_normalized_margin(self, cfg, optimum):
        # coordinate descent is compared in the l1 geometry: the objective is ||w||_1 itself
        return 1.0 / optimum if cfg.training.descent == "coordinate" else sqrt_margin(optimum)


SPEC = Spec()
