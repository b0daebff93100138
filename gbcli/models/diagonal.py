"""Paper 003's depth-m diagonal network: h_j = sigma(w_j o h_{j-1}) for j < m, f(x) = <w_m, h_{m-1}>,
started from explicit weights; its program is the non-convex Problem 2 (gbcli.models.construction)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, StrictInt

from gbcli.models import construction
from gbcli.models.base import ModelParams, networks


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

    example_model = {"depth": 2, "activation": "linear", "weights": {"w": [[1.0, 0.0], [1.0, 0.0]]}}
    example_x = [[1.0, 2.0]]

    def network(self, cfg, dim):
        return networks(__name__).DiagonalNet(cfg.model.depth, dim, cfg.model.activation)

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
        jac = np.empty((len(x), m, w.shape[1]))
        for j in range(m):
            jac[:, j, :] = x * gates * np.prod(np.delete(w, j, axis=0), axis=0)
        return h @ w[-1], jac.reshape(len(x), -1)


SPEC = Spec()
