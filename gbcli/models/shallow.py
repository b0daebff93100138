"""The shallow GLN (protocol section 4): one unit, C = 2^k global contexts; its limit is `svm-shallow`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from pydantic import Field

from gbcli.models import gln
from gbcli.models.base import Problem, Program

if TYPE_CHECKING:
    from gbcli.programs.design import GatedDesign


class Params(gln.Params):
    kind: Literal["shallow"] = Field("shallow", description="the shallow GLN: one unit, C = 2^k global contexts")
    hidden_units: Literal[1] = Field(1, description="a shallow GLN has exactly one unit (set contexts.count)")
    homogeneity: ClassVar[int] = 1


def shallow_design(cfg, problem: Problem, trained=None) -> GatedDesign:
    """One predictor per global context; a context without training points gets zero weights, so
    only the used ones are columns (C = 2^15 would make a 12000 x 32768 one-hot)."""
    from gbcli.programs.design import GatedDesign, one_hot

    ds, c = problem.dataset, cfg.contexts.count
    used = np.unique(problem.ctx_train[:, 0])
    col = np.full(c, -1)
    col[used] = np.arange(len(used))
    et = one_hot(col[problem.ctx_train[:, :1]], len(used))
    ev = (col[problem.ctx_val[:, :1]] == np.arange(len(used))).astype(float)   # a context unseen in training: 0s
    return GatedDesign(ds.x_train, ds.y_train, et, ds.x_val, ev, "sq", [], 1, c)


class Spec(gln.HyperplaneSpec):
    kind, Params = "shallow", Params
    description = "one unit, C = 2^k global contexts"
    programs = {"svm-shallow": Program("svm-shallow", "sq", shallow_design, description="one linear SVM per context")}
    matching = "svm-shallow"
    instruments = ("margin", "kkt", "agreement")
    figure_axis = "hyperplanes"
    example_model = {"output_bias": False}

    def network(self, cfg, dim):
        from gbcli.models.networks.gln import ShallowGLN

        return ShallowGLN(cfg.contexts.count, dim, cfg.model.output_bias)

    def trained_state(self, sd, dim):
        """A trained (restricted) model comes back unrestricted: its full (C, D) weight."""
        import torch

        w, slot = sd["w"], sd["slot"]
        full = w if not len(slot) else sd["w_rest"].index_copy(0, torch.nonzero(slot >= 0)[:, 0], w[slot[slot >= 0]])
        return {"w": full, "w_rest": torch.empty(0, dim), "slot": torch.empty(0, dtype=torch.long),
                **({"bias": sd["bias"]} if "bias" in sd else {})}

    def best_normalized_margin(self, cfg, optimum):
        return 1.0 / math.sqrt(optimum)   # the objective is ||w||^2 itself

    def describe(self, row):
        return f"k={int(math.log2(row['contexts']))}, N={row['train_size']}, median_init={row['median_init']}"
