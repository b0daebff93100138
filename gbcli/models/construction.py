"""What paper 003's small networks (`diagonal`, `conv`, `relu`'s two-neuron construction) share: the
activations and their 0/1 derivatives, Problem 2 (min ||theta||^2 s.t. y_i f_theta(x_i) >= 1) and its
local searches as programs (solved by `gbcli.programs.nonconvex`), and `ConstructionSpec`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gbcli.models.base import ModelSpec, Program, set_weights

if TYPE_CHECKING:
    import torch


def activate(z: torch.Tensor, activation: str) -> torch.Tensor:
    return z.relu() if activation == "relu" else z


def gate(z: np.ndarray, activation: str) -> np.ndarray:
    """The activation's derivative as a 0/1 gate (ReLU: 0 at 0, as torch)."""
    return (z > 0).astype(float) if activation == "relu" else np.ones_like(z)


def fit_nonconvex(*args, **kwargs):
    """`gbcli.programs.nonconvex.fit_nonconvex`, imported (with torch and scipy) only when solving."""
    from gbcli.programs.nonconvex import fit_nonconvex as fit

    return fit(*args, **kwargs)


_OPTIONS = ("restarts", "radii", "search_seed")
PROGRAMS = {p.name: p for p in (
    Program("nonconvex-global", fit=fit_nonconvex, options=_OPTIONS,
            description="Problem 2: the best of svm.restarts SLSQP solves"),
    Program("local-search", fit=fit_nonconvex, options=_OPTIONS, needs_trained=True,
            description="Problem 2 within eps of GD's limit"),
    Program("local-search-global", fit=fit_nonconvex, options=_OPTIONS,
            description="Problem 2 within eps of the best global point (a control)"))}
NONCONVEX = tuple(PROGRAMS)


class ConstructionSpec(ModelSpec):
    """Paper 003's diagonal and conv: explicit initial weights, Problem 2, a construction as example."""

    programs = PROGRAMS
    instruments = ("kkt", "layer_optimality")
    example_x: list[list[float]] = []

    def build(self, cfg, dim):
        model = self.network(cfg, dim)
        set_weights(model, cfg.model.weights)
        return model

    def example(self, program):
        return example(program, {"kind": self.kind, **self.example_model}, self.example_x)


def example(program: str, model: dict, x: list[list[float]]) -> dict:
    """A tiny raw config of one of the constructions (all labels +1), for the contract test."""
    return {"name": "example-construction", "dataset": {"name": "points", "x": x, "y": [1] * len(x)}, "model": model,
            "training": {"batch_size": None, "epochs": 20, "lr": 0.1, "log_points": 2},
            "svm": {"objectives": [program], "restarts": 3, "radii": [0.1]}}
