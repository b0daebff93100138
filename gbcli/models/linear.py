"""A plain linear predictor <w, x> (paper 004): its limit is the max-margin program in its optimizer's
geometry (docs/optimizers.md): `svm-shallow` (gradient descent), `svm-l1` (coordinate descent),
`svm-linf` (sign descent, Adam), `svm-l1.5` (mirror descent, p = 1.5)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar, Literal, Optional

import numpy as np
from pydantic import Field

from gbcli.models.base import InitScheme, ModelParams, ModelSpec, Problem, Program, networks
from gbcli.optimizers import PROGRAM_NORM, geometry

if TYPE_CHECKING:
    from gbcli.programs.design import GatedDesign


class Params(ModelParams):
    kind: Literal["linear"] = Field("linear", description="a linear predictor <w, x>")
    init: Optional[InitScheme] = Field(None, description="default: orthogonal")
    homogeneity: ClassVar[int] = 1


def feature_design(ft: np.ndarray, y: np.ndarray, fv: np.ndarray, norm: str = "sq") -> GatedDesign:
    """A linear predictor on training / validation features `ft` / `fv`: one always-on context."""
    from gbcli.programs.design import GatedDesign, constant_gates

    return GatedDesign(ft, y, constant_gates(len(ft)), fv, constant_gates(len(fv)), norm)


def linear_design(norm: str):
    def design(cfg, problem: Problem, trained=None) -> GatedDesign:
        return feature_design(problem.dataset.x_train, problem.dataset.y_train, problem.dataset.x_val, norm)

    return design


LINEAR_SVM = {"svm-shallow": Program("svm-shallow", "sq", linear_design("sq"), description="the linear SVM")}


class Spec(ModelSpec):
    kind, Params = "linear", Params
    description = "a linear predictor"
    programs = {**LINEAR_SVM, **{p.name: p for p in (
        Program("svm-l1", "l1", linear_design("l1"), description="the l1 max-margin LP"),
        Program("svm-linf", "linf", linear_design("linf"), description="the l-infinity max-margin LP"),
        Program("svm-l1.5", "l1.5", linear_design("l1.5"), description="the l1.5 max-margin cone program"))}}
    instruments = ("margin", "kkt", "agreement", "reg-path", "contrast")
    coordinate_descent = True
    follows_optimizer = True

    def network(self, cfg, dim):
        return networks("linear").Linear(dim)

    def matching_program(self, cfg):
        """The program of the optimizer's geometry (None where no program of it is declared)."""
        norm = PROGRAM_NORM.get(geometry(cfg.training))
        return next((name for name, p in self.programs.items() if p.norm == norm), None)

    def best_normalized_margin(self, cfg, optimum):
        # the l2 program's objective is ||w||^2; the others' is the norm itself
        return 1.0 / math.sqrt(optimum) if geometry(cfg.training) == 2.0 else 1.0 / optimum
