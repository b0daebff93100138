"""The two-layer ReLU network without biases, x -> H -> 1 (protocol section 4; papers 001 and 003). Its
programs fix its gates (random or trained) or fit its hidden layer, plus paper 001's one-class and 003's Problem 2."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional

import numpy as np
from pydantic import Field, StrictInt

from gbcli.errors import GbError
from gbcli.models import construction
from gbcli.models.base import InitScheme, ModelParams, ModelSpec, Problem, Program, networks, set_weights
from gbcli.models.gating import random_relu_gates
from gbcli.models.linear import feature_design

if TYPE_CHECKING:
    from gbcli.data.sources import Dataset
    from gbcli.models.networks.relu import ReLUNet
    from gbcli.programs.design import GatedDesign


class Params(ModelParams):
    kind: Literal["relu"] = Field("relu", description="x -> H -> 1 ReLU network, no biases")
    hidden_units: StrictInt = Field(10, ge=1, le=2 ** 31 - 1, description="H: hidden units")
    init: Optional[Literal[InitScheme, "balanced"]] = Field(
        None, description="default: kaiming; balanced (paper 001's theory): normal first layer, |w2_j| = "
                          "||w1_j|| with random signs; torch-default (paper 001's experiments): nn.Linear's "
                          "U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both layers")
    weights: Optional[dict[str, Any]] = Field(None, description="explicit initial weights by parameter name (w1, w2)")
    homogeneity: ClassVar[int] = 2


def _on_data(method, ds: Dataset) -> list[np.ndarray]:
    """A trained network's `method` (gates, hidden) on the training and validation inputs, in float64."""
    import torch

    with torch.no_grad():
        return [method(torch.tensor(x, dtype=torch.float64)).numpy() for x in (ds.x_train, ds.x_val)]


def frelu_design(gt: np.ndarray, gv: np.ndarray, problem: Problem, always_on: bool) -> GatedDesign:
    """One unit per gate, each its own group (the FReLU norm sum_h ||zeta_h||); `always_on` adds one."""
    from gbcli.programs.design import GatedDesign, constant_gates, singleton_groups

    ds = problem.dataset
    if always_on:
        gt, gv = np.hstack([constant_gates(len(gt)), gt]), np.hstack([constant_gates(len(gv)), gv])
    et, ev = gt.astype(float), gv.astype(float)
    return GatedDesign(ds.x_train, ds.y_train, et, ds.x_val, ev, "group", singleton_groups(et.shape[1]), et.shape[1], 1)


def random_gates_design(cfg, problem: Problem, trained=None) -> GatedDesign:
    """svm-rc: H random gates seeded by contexts.seed and an always-on unit (protocol section 10)."""
    ds = problem.dataset
    gates = random_relu_gates(cfg.model.hidden_units, ds.x_pool, cfg.contexts.seed)
    return frelu_design(gates.local_contexts(ds.x_train, ds.train_idx), gates.local_contexts(ds.x_val, ds.val_idx),
                        problem, always_on=True)


def learned_gates_design(cfg, problem: Problem, trained: ReLUNet, *, always_on: bool) -> GatedDesign:
    """svm-lc: the trained network's H gates [w_h . x >= 0] (GLN paper eq. 22; infeasible when a training
    point has every gate off); svm-lc-always-on adds an always-on unit, which separates such points."""
    return frelu_design(*_on_data(trained.gates, problem.dataset), problem, always_on)


def trained_features_design(cfg, problem: Problem, trained: ReLUNet, *, method: str) -> GatedDesign:
    """svm-hl / svm-gates: a linear SVM on the trained hidden layer's outputs / 0/1 gate pattern (float64)."""
    ft, fv = _on_data(getattr(trained, method), problem.dataset)
    return feature_design(ft, problem.dataset.y_train, fv)


def one_class_design(cfg, problem: Problem, trained=None, *, sign: float) -> GatedDesign:
    """Paper 001's svm-pos (sign +1): w+ = argmin ||w|| s.t. <w, x_n> >= 1 on the positives only; svm-neg: w-
    on the negatives, with label and gate -1 so that its decision -<w-, x> classifies the task as <w+, x> does
    (errors: that classifier's over every training and validation point)."""
    from gbcli.programs.design import GatedDesign

    ds = problem.dataset
    xs = ds.x_train[ds.y_train == sign]
    if not len(xs):
        name = "svm-pos" if sign > 0 else "svm-neg"
        raise GbError(f"svm.objectives: {name} needs training points with label {sign:+.0f}, there are none")
    return GatedDesign(xs, np.full(len(xs), sign), np.full((len(xs), 1), sign), ds.x_val,
                       np.full((len(ds.x_val), 1), sign), "sq",
                       classify=(ds.x_train, np.full((len(ds.x_train), 1), sign), ds.y_train))


# paper 001's max-margin directions w+ / w- of the positives / negatives alone, declared by relu and residual
# (their instruments are in gbcli.experiments.paper001)
ONE_CLASS_PROGRAMS = {
    "svm-pos": Program("svm-pos", "sq", partial(one_class_design, sign=1.0),
                       description="w+: max margin on the positives"),
    "svm-neg": Program("svm-neg", "sq", partial(one_class_design, sign=-1.0),
                       description="w-: max margin on the negatives")}
GATE_PROGRAMS = {p.name: p for p in (
    Program("svm-rc", "group", random_gates_design, description="FReLU norm on random gates"),
    Program("svm-lc", "group", partial(learned_gates_design, always_on=False), needs_trained=True,
            description="FReLU norm on the trained gates (the paper's program)"),
    Program("svm-lc-always-on", "group", partial(learned_gates_design, always_on=True), needs_trained=True,
            description="FReLU norm on the trained gates and an always-on unit (a variant)"),
    Program("svm-hl", "sq", partial(trained_features_design, method="hidden"), needs_trained=True,
            description="linear SVM on the trained hidden layer"),
    Program("svm-gates", "sq", partial(trained_features_design, method="gates"), needs_trained=True,
            description="linear SVM on the trained gate pattern"))}


class Spec(ModelSpec):
    kind, Params = "relu", Params
    description = "x -> H -> 1 ReLU, no biases"
    programs = {**GATE_PROGRAMS, **ONE_CLASS_PROGRAMS, **construction.PROGRAMS}
    instruments = ("kkt", "rank", "alignment", "layer_rank", "relu_pattern", "layer_optimality")
    default_init = "kaiming"
    example_model = {"hidden_units": 4}

    def example(self, program):
        if program not in construction.NONCONVEX:
            return super().example(program)
        # paper 003's Thm 3.2 construction: two points, GD's net classifies both from the start
        cfg = construction.example(program, {"kind": self.kind, "hidden_units": 2,
                                             "weights": {"w1": [[0.1, 1.0], [-0.2, -1.0]], "w2": [[0.5, 0.4]]}},
                                   [[1.0, 0.25], [-1.0, 0.25]])
        cfg["svm"]["restarts"] = 20   # random starts often stall at a dead neuron
        return cfg

    def network(self, cfg, dim):
        return networks("relu").ReLUNet(cfg.model.hidden_units, dim)

    def after_init(self, model, cfg, gen):
        if cfg.model.init == "balanced":   # paper 001: |w2_j| = ||w1_j||, random signs from the same generator
            import torch

            with torch.no_grad():
                sign = torch.where(torch.rand(model.w2.shape[1], generator=gen) < 0.5, -1.0, 1.0)
                model.w2.copy_((sign * model.w1.norm(dim=1))[None])
        if cfg.model.weights is not None:   # explicit initial weights (paper 003's 2-neuron ReLU net)
            set_weights(model, cfg.model.weights)

    def load(self, state, cfg, dim, path):
        sd = state.get("state_dict", {})
        if not isinstance(sd, dict) or "w1" not in sd:
            raise GbError(f"{path}: not a checkpoint of a {cfg.model.predictor} (rerun `gb train-gd`)")
        if sd["w1"].shape[0] != cfg.model.hidden_units:
            raise GbError(f"{path}: has {sd['w1'].shape[0]} hidden units, the config has model.hidden_units = "
                          f"{cfg.model.hidden_units}")
        net = networks("relu").ReLUNet(sd["w1"].shape[0], sd["w1"].shape[1])
        net.w_gate = sd["w_gate"]
        net.load_state_dict(sd)
        return net.double()

    def numpy_margins(self, theta_parts, x, cfg):
        """f(x) = sum_h v_h relu(<w_h, x>) and its Jacobian in (w1, w2) (relu' = 0 at 0, as torch's)."""
        w1, w2 = theta_parts
        pre = x @ w1.T
        g = (pre > 0).astype(float)
        jw = (g * w2[0])[:, :, None] * x[:, None, :]           # (n, H, d)
        return (pre * g) @ w2[0], np.hstack([jw.reshape(len(x), -1), pre * g])
