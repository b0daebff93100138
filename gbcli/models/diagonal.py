"""Paper 003's depth-m diagonal network, h_j = sigma(w_j o h_{j-1}) (j < m), f(x) = <w_m, h_{m-1}>, from
explicit weights; its program is Problem 2 (gbcli.models.construction). At depth 2, linear, f = <beta, x>
with beta = w_1 o w_2 (docs/optimizers.md): l2 on the weights induces the l1 max-margin on beta
(||w_1||^2 + ||w_2||^2 >= 2 ||beta||_1), l-infinity the l-infinity one (max |w|^2 >= ||beta||_inf)."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field, StrictInt

from gbcli.models import construction
from gbcli.models.base import ModelParams, Program, networks
from gbcli.models.linear import linear_design
from gbcli.optimizers import geometry

# the programs on beta the weights' geometry induces (depth 2, linear activation), by that geometry
INDUCED = {2.0: Program("svm-diag-l1", "l1", linear_design("l1"),
                        description="depth 2, linear: min ||beta||_1, what l2 on the weights induces"),
           math.inf: Program("svm-diag-linf", "linf", linear_design("linf"),
                             description="depth 2, linear: min ||beta||_inf, what l-infinity on the weights induces")}


class Params(ModelParams):
    kind: Literal["diagonal"] = Field("diagonal", description="paper 003: depth-m diagonal network, explicit initial "
                                                              "weights")
    depth: StrictInt = Field(2, ge=2, le=64, description="number of layers m")
    activation: Literal["linear", "relu"] = Field("relu", description="the hidden activation")
    weights: dict[str, Any] = Field(description="explicit initial weights by parameter name (w: m x d)")


class Spec(construction.ConstructionSpec):
    kind, Params = "diagonal", Params
    description = "paper 003: depth-m diagonal network, explicit initial weights"
    rows_are_layers = True   # each depth's diagonal factor is a layer of paper 003's per-layer problem
    programs = {**construction.PROGRAMS, **{p.name: p for p in INDUCED.values()}}
    instruments = construction.ConstructionSpec.instruments + ("margin", "agreement")
    follows_optimizer = True

    example_model = {"depth": 2, "activation": "linear", "weights": {"w": [[1.0, 0.0], [1.0, 0.0]]}}
    example_x = [[1.0, 2.0]]

    def network(self, cfg, dim):
        return networks("construction").DiagonalNet(cfg.model.depth, dim, cfg.model.activation)

    @staticmethod
    def _induces(cfg) -> bool:
        return cfg.model.depth == 2 and cfg.model.activation == "linear"

    def check(self, cfg) -> None:
        if not self._induces(cfg):
            for obj in cfg.svm.objectives:
                if obj in {p.name for p in INDUCED.values()}:
                    raise ValueError(f"svm.objectives: {obj} is the program of a depth-2 diagonal network with the "
                                     f"linear activation (model.depth is {cfg.model.depth}, model.activation "
                                     f"{cfg.model.activation})")

    def matching_program(self, cfg):
        program = INDUCED.get(geometry(cfg.training)) if self._induces(cfg) else None
        return None if program is None else program.name

    def best_normalized_margin(self, cfg, optimum):
        # min y f / ||w||_q^2: 1 / (2 ||beta*||_1) in l2, 1 / ||beta*||_inf in l-infinity
        return 1.0 / (2 * optimum) if geometry(cfg.training) == 2.0 else 1.0 / optimum

    def numpy_margins(self, theta_parts, x, cfg):
        """f = sum_k x_k w_mk prod_{j<m} w_jk, times the gates of the prefix products, and its Jacobian."""
        (w,) = theta_parts
        m, activation = w.shape[0], cfg.model.activation
        gates = np.ones_like(x)
        h = x.copy()
        for j in range(m - 1):
            z = w[j] * h
            gates = gates * construction.gate(z, activation)
            h = z * construction.gate(z, activation)
        jac = np.stack([x * gates * np.prod(np.delete(w, j, axis=0), axis=0) for j in range(m)], axis=1)
        return h @ w[-1], jac.reshape(len(x), -1)
