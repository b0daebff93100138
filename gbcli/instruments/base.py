"""What an instrument is: a named measurement of a model during training (`training.track`), evaluated
at the logged steps and written as columns of `gd/metrics.csv`; `gbcli.registry` lists them."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np
from torch import nn


@dataclass
class TrackContext:
    """What an instrument's setup may use: the config, the model's spec, the problem, and
    `solve(objective, trained=None)` -> (design, solution) for any of the model's convex programs."""

    cfg: Any
    spec: Any
    problem: Any
    solve: Callable[[str], tuple]


class Instrument:
    name: ClassVar[str]
    description: ClassVar[str] = ""
    columns: ClassVar[tuple[str, ...]] = ()
    needs_matching: ClassVar[bool] = False   # uses the model's matching program (solved once)
    needs_homogeneous: ClassVar[bool] = True  # False: also defined for non-homogeneous models (weights' ranks)
    # True: `measure` reads only that step's weights and what `setup` computed, so a run resumed from a
    # checkpoint logs an uninterrupted run's rows (checkpoints are kept only when every instrument is)
    resumable: ClassVar[bool] = False
    # (column, axis label, y scale) of the panels this instrument adds to the training figure
    panels: ClassVar[tuple[tuple[str, str, str], ...]] = ()

    def applies(self, spec) -> bool:
        """Whether a model kind can track this (by default: its spec lists it)."""
        return self.name in spec.instruments

    def setup(self, tracker, context: TrackContext) -> dict:
        """Once before training; returns values for summary.json's `track`."""
        return {}

    def measure(self, tracker, model: nn.Module, x, y, ctx, margins, val_out) -> dict:
        raise NotImplementedError

    def final_tables(self, tracker, model: nn.Module) -> dict:
        """Tables written next to the run's metrics at the end (file stem -> DataFrame)."""
        return {}


def as_numpy(t) -> np.ndarray:
    return t.detach().double().cpu().numpy()


def first_layer(model: nn.Module) -> np.ndarray:
    """The first-layer weight matrix W (rows: neurons), float64."""
    return as_numpy(model.w1)


def float64_copy(model: nn.Module, x, y, ctx):
    """A float64 CPU copy of the model and the data (the instruments measure in float64)."""
    return copy.deepcopy(model).cpu().double(), x.cpu().double(), y.cpu().double(), None if ctx is None else ctx.cpu()
