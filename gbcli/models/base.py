"""What a model kind is: a `Params` section (pydantic; `kind: Literal[...]` is the discriminator) and a
`ModelSpec` subclass (build, gating, degree, programs, instruments, checkpoint loading) in one module of
this package; nothing outside it branches on its kind. Networks are called as `model(x, ctx)` (x (B, D),
ctx (B, H) local contexts) and `weights()` lists the homogeneous weights (the output bias excluded).
A kind's module imports without torch: torch and its `gbcli.models.networks` module load inside methods."""

from __future__ import annotations

import importlib
import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal, Optional

import numpy as np
from pydantic import Field, StrictFloat, StrictInt

from gbcli.errors import GbError
from gbcli.optimizers import geometry
from gbcli.schema import Section
from gbcli.text import shorten

if TYPE_CHECKING:
    import torch
    from torch import nn

    from gbcli.data.sources import Dataset
    from gbcli.models.gating import Hyperplanes
    from gbcli.programs.design import GatedDesign


class ModelParams(Section):
    """Keys every model kind has; each kind's `Params` adds its own."""

    kind: str
    init_seed: Optional[StrictInt] = Field(None, ge=0, lt=2 ** 63,
                                           description="default: contexts.seed for GLNs, 1 otherwise")
    init_scale: StrictFloat = Field(1.0, gt=0, le=1e6, allow_inf_nan=False,   # beyond: float32 overflow at step 0
                                    description="multiplies the initial weights")

    @property
    def predictor(self) -> str:
        return f"gd-{self.kind}"

    @property
    def homogeneity(self) -> int:
        """Degree L in the trained weights (an output bias aside): `depth`, unless the kind sets it."""
        return self.depth


# torch-default: nn.Linear / nn.Conv2d's U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform, a = sqrt(5))
InitScheme = Literal["orthogonal", "kaiming", "normal", "torch-default"]


@dataclass
class Problem:
    """A dataset with the gating of the configured architecture."""

    dataset: Dataset
    hyperplanes: Hyperplanes | None = None   # GLN / shallow contexts
    ctx_train: np.ndarray | None = None      # (N, H) local contexts
    ctx_val: np.ndarray | None = None


@dataclass(frozen=True)
class Program:
    """A max-margin program that describes a model's limit (protocol section 5). Convex ones have a norm
    (`gbcli.programs.norms`) and `design(cfg, problem, trained) -> GatedDesign` (`trained`: the trained
    network when `needs_trained`); non-convex ones (paper 003) `fit(name, cfg, spec, problem, trained, echo)`."""

    name: str
    norm: str | None = None
    design: Callable[..., GatedDesign] | None = None
    needs_trained: bool = False
    options: tuple[str, ...] = ()      # svm keys that only this program uses
    fit: Callable[..., Any] | None = None
    description: str = ""


class ModelSpec:
    """Everything about one model kind. Subclasses set the class attributes and override what differs."""

    kind: ClassVar[str]
    Params: ClassVar[type[ModelParams]]
    description: ClassVar[str] = ""
    programs: ClassVar[dict[str, Program]] = {}
    matching: ClassVar[str | None] = None               # `matching_program` when it is one fixed program
    follows_optimizer: ClassVar[bool] = False           # the matching program's geometry is the optimizer's
    instruments: ClassVar[tuple[str, ...]] = ("kkt",)   # which `training.track` instruments apply
    # theory instruments (paper 003's per-layer problems): each row of a 2-D weight is a layer of its own
    rows_are_layers: ClassVar[bool] = False
    default_init: ClassVar[str] = "orthogonal"
    coordinate_descent: ClassVar[bool] = False         # training.descent: coordinate is allowed
    figure_axis: ClassVar[str] = "units"                # panel (d): x = hidden units, or "hyperplanes"
    exactly_homogeneous: ClassVar[bool] = True         # `homogeneous` for every configuration
    # K networks of this kind as one torch computation (gbcli.training.batched): a module built from a list of
    # networks, forward(x, gates stacked (K, n, ...)) -> (K, n), `weights()`, parameters named and ordered as
    # each network's, and `unstack(networks)` copying its weights back; None: trained one network at a time
    Stacked: ClassVar[type | None] = None
    example_model: ClassVar[dict] = {}   # the contract test's (tests/test_contract.py) model keys

    def __init_subclass__(cls, **kwargs):
        """A class that sets its own `kind` is that kind's spec: its module's `SPEC` (what the registry lists)."""
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            sys.modules[cls.__module__].SPEC = cls()

    def units(self, params: ModelParams) -> int:
        return getattr(params, "hidden_units", 1)

    def default_init_seed(self, cfg) -> int:
        return 1

    def init_seed(self, cfg) -> int:
        return cfg.model.init_seed if cfg.model.init_seed is not None else self.default_init_seed(cfg)

    def homogeneous(self, params: ModelParams) -> bool:
        """Exactly homogeneous in its weights (the theory instruments need it)."""
        return self.exactly_homogeneous

    def check(self, cfg) -> None:
        """Cross-section checks of a whole config; raise ValueError naming the key."""

    def gating(self, cfg, dataset: Dataset) -> Problem:
        """The problem this model trains on: the dataset and, for gated models, its contexts."""
        return Problem(dataset)

    def network(self, cfg, dim: int) -> nn.Module:
        raise NotImplementedError

    def build(self, cfg, dim: int) -> nn.Module:
        """The configured network with its seeded initialization (float32)."""
        import torch

        model = self.network(cfg, dim)
        scheme = getattr(cfg.model, "init", None) or self.default_init
        gen = torch.Generator().manual_seed(self.init_seed(cfg))
        for w in model.weights():
            init_tensor(w.data, scheme, gen, cfg.model.init_scale)
        self.after_init(model, cfg, gen)
        return model

    def after_init(self, model: nn.Module, cfg, gen: torch.Generator) -> None:
        """Hook after the generic initialization (balanced init, explicit weights, frozen gates)."""

    def on_epoch(self, model: nn.Module, cfg, epoch: int) -> None:
        """Hook at the start of every training epoch (FReLU freezes its gates here)."""

    def load(self, state: dict, cfg, dim: int, path) -> nn.Module:
        """The trained network of a checkpoint (`state`: what `save` returned), float64."""
        model = self.network(cfg, dim)
        try:
            model.load_state_dict(self.trained_state(state["state_dict"], dim))
        except (RuntimeError, KeyError, TypeError, IndexError):
            raise GbError(f"{path}: does not match the configured network (rerun `gb train-gd`)") from None
        return model.double()

    def trained_state(self, state_dict: dict, dim: int) -> dict:
        """A checkpoint's state dict as the configured network loads it."""
        return state_dict

    def matching_program(self, cfg) -> str | None:
        """The program whose optimum is GD's limit (the margin and agreement instruments)."""
        return self.matching

    def margin_geometry(self, cfg) -> float:
        """The q of min y f / ||w||_q^L: the matching program's geometry (l2 unless it follows the optimizer)."""
        return geometry(cfg.training) if self.follows_optimizer else 2.0

    def matching_ready(self, cfg, model: nn.Module | None) -> bool:
        """Whether the matching program is defined for the network as it is now (None: before training)."""
        return True

    def best_normalized_margin(self, cfg, optimum: float) -> float | None:
        """The largest min y f / ||w||^L the model can have, from the matching program's optimum."""
        return None

    def matching_info(self, cfg, problem: Problem, solution) -> dict:
        """Values recorded in summary.json's `track` from the matching program's solution."""
        return {"best_normalized_margin": self.best_normalized_margin(cfg, solution.value)}

    def describe(self, row: dict) -> str:
        """A configuration's short label in figures (row: a line of errors.csv)."""
        return f"H={row['hidden_units']}, N={row['train_size']}"

    def published_outputs(self, model: nn.Module, cfg, problem: Problem) -> np.ndarray | None:
        """Validation outputs as the published comparison measured them, if not the network's own (tables'
        `published_inconsistency`)."""
        return None

    def example(self, program: str) -> dict:
        """A tiny raw config of this model for `program`: trains in seconds, solves in less."""
        return {"name": f"example-{self.kind}", "dataset": {"name": "digits", "train_size": 60, "val_size": 60},
                "model": {"kind": self.kind, **self.example_model},
                "training": {"epochs": 3, "batch_size": 20, "log_points": 2}, "svm": {"objectives": [program]}}


def networks(name: str):
    return importlib.import_module(f"gbcli.models.networks.{name}")


def init_tensor(tensor: torch.Tensor, scheme: str, gen: torch.Generator, scale: float) -> None:
    import torch

    with torch.no_grad():
        if scheme == "orthogonal":
            torch.nn.init.orthogonal_(tensor, generator=gen)
        elif scheme == "kaiming":
            torch.nn.init.kaiming_normal_(tensor, nonlinearity="relu", generator=gen)
        elif scheme == "torch-default":
            torch.nn.init.kaiming_uniform_(tensor, a=math.sqrt(5), generator=gen)
        else:   # normal; relu's "balanced" draws so too, then sets its output layer
            tensor.normal_(0.0, 1.0 / tensor.shape[-1] ** 0.5, generator=gen)
        tensor.mul_(scale)


def weight_norm(model: nn.Module) -> float:
    """Euclidean norm of all homogeneous weights (a restricted shallow GLN's fixed rows included)."""
    import torch

    sq = sum((w.detach().double() ** 2).sum() for w in model.weights()) + getattr(model, "fixed_sq_norm", 0.0)
    return float(torch.sqrt(sq))


def set_weights(model: nn.Module, weights: dict) -> None:
    """Copy explicit initial weights (name -> nested list) into the model's parameters, checking names and shapes."""
    model.load_state_dict(check_weights(model, weights), strict=False)   # not strict: buffers are no weights


def check_weights(model: nn.Module, weights: dict) -> dict:
    """Explicit initial weights as tensors of the model's parameters (names, shapes, finite numbers
    checked: GbError naming the key otherwise). Works on a network built on torch's meta device, so
    a sweep checks every point's weights before any runs."""
    import torch

    params, values = dict(model.named_parameters()), {}
    unknown = sorted(set(weights) - set(params))
    if unknown:
        raise GbError(f"model.weights.{shorten(str(unknown[0]))}: not a parameter of this network (it has "
                      f"{', '.join(params)})")
    for name, p in params.items():
        if name not in weights:
            raise GbError(f"model.weights.{name}: missing (explicit weights need every parameter: {', '.join(params)})")
        try:
            value = torch.as_tensor(np.asarray(weights[name], dtype=float), dtype=p.dtype)
        except (TypeError, ValueError):
            raise GbError(f"model.weights.{name}: not a (nested) list of numbers") from None
        if tuple(value.shape) != tuple(p.shape):
            raise GbError(f"model.weights.{name}: shape {tuple(value.shape)}, the network needs {tuple(p.shape)}")
        if not bool(torch.isfinite(value).all()):
            raise GbError(f"model.weights.{name}: holds a number that is not finite (inf or nan)")
        values[name] = value
    return values
