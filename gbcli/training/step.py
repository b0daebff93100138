"""One training step of the plain loop (`loop.train`, which takes the optimizer's update itself): the minibatch,
the objective, its gradient and the step size. The full batch is the training tensors themselves, unpermuted (the
permutation is still drawn: the generator's state is what checkpoints keep); a `column_major_input` network gets
the transpose of a contiguous (d x N) copy (1.3-1.5x faster products). The adaptive step: eta_0 = fraction * 2 /
lambda * nu(w) every K steps, lambda the sharpness of log R (power iteration), nu(w) the rule's normalizer."""

from __future__ import annotations

import math

import torch
from torch import nn

from gbcli.models.base import weight_norm
from gbcli.optimizers import SteepestL1
from gbcli.training.losses import log_mean_loss, loss_fn


def normalizer(model: nn.Module, t, degree: int) -> float:
    """nu(w): the step on log R is eta_0 / nu(w) (homogeneous-normalized: ||w||^(2L-2); else 1)."""
    if t.step_rule == "homogeneous-normalized" and degree > 1:
        return weight_norm(model) ** (2 * degree - 2)
    return 1.0


def sharpness(model: nn.Module, objective, iters: int, seed: int) -> float:
    """The largest |eigenvalue| of the Hessian of `objective()` in the model's parameters, by `iters`
    power iterations on Hessian-vector products (double backward) from a seeded random start (its own
    generator: the global one is not drawn, so a resumed run estimates the same). NaN when not finite."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(objective(), params, create_graph=True)
    gen = torch.Generator().manual_seed(seed)
    v = [torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device) for p in params]
    lam = float("nan")
    for k in range(iters):
        norm = torch.sqrt(sum((u * u).sum() for u in v))
        v = [u / norm for u in v]
        hv = torch.autograd.grad(grads, params, grad_outputs=v, retain_graph=k < iters - 1)
        lam = float(sum((a * b).sum() for a, b in zip(v, hv)))   # the Rayleigh quotient v' H v
        v = [h.detach() for h in hv]
    return abs(lam) if math.isfinite(lam) else float("nan")


class AdaptiveStep:
    """The base step eta_0 of a normalized rule, re-estimated every `every` steps; `eta0` (`lr` before the first
    estimate) is state a checkpoint keeps (`state`, `load`)."""

    def __init__(self, settings, lr: float):
        self.every, self.iters, self.fraction = settings.every, settings.power_iters, settings.fraction
        self.max_growth = settings.max_growth
        self.eta0, self.estimated = lr, False

    def estimate(self, model: nn.Module, objective, nu: float, step: int) -> str:
        """Re-estimate eta_0 at this step; why it failed ("" when it did not)."""
        lam = sharpness(model, objective, self.iters, seed=step)
        if not (math.isfinite(lam) and lam > 0):
            return f"the sharpness of log R is not finite and positive at step {step} (adaptive step)"
        new = self.fraction * 2.0 / lam * nu
        self.eta0 = min(new, self.eta0 * self.max_growth) if self.estimated else new
        self.estimated = True
        return ""

    def state(self) -> dict:
        return {"eta0": float(self.eta0), "estimated": bool(self.estimated)}

    def load(self, state) -> None:
        ok = (isinstance(state, dict) and isinstance(state.get("eta0"), float) and math.isfinite(state["eta0"])
              and state["eta0"] > 0 and isinstance(state.get("estimated"), bool))
        if not ok:
            raise ValueError("adaptive step state")
        self.eta0, self.estimated = state["eta0"], state["estimated"]


class Step:
    """The step of `loop.train` on `model` (on its device), the training tensors `xt, yt, ct` and `opt`: `loss(perm,
    i)` the objective of the i-th minibatch of the epoch's permutation, `prepare(loss, lr)` its gradient and the
    step size of the configured rule (the caller then takes `opt.step()`)."""

    def __init__(self, model: nn.Module, cfg, xt: torch.Tensor, yt: torch.Tensor, ct: torch.Tensor | None, opt,
                 batch: int):
        self.model, self.t, self.degree, self.opt = model, cfg.training, cfg.model.homogeneity, opt
        self.full = batch >= xt.shape[0]
        if self.full and getattr(model, "column_major_input", False):   # the faster products (DeepGLN)
            xt = xt.T.contiguous().T
        self.xt, self.yt, self.ct, self.batch = xt, yt, ct, batch
        t = self.t
        self.objective = log_mean_loss if t.step_rule != "constant" else loss_fn  # lr grad log R = (lr / R) grad R
        self.adaptive = AdaptiveStep(t.adaptive_step, t.lr) if t.adaptive_step is not None else None

    def minibatch(self, perm: torch.Tensor, i: int):
        """The i-th minibatch's rows (index_select: 3-5x faster than advanced indexing)."""
        if self.full:
            return self.xt, self.yt, self.ct
        idx = perm[i * self.batch:(i + 1) * self.batch]
        return (self.xt.index_select(0, idx), self.yt.index_select(0, idx),
                None if self.ct is None else self.ct.index_select(0, idx))

    def full_objective(self) -> torch.Tensor:
        return self.objective(self.yt * self.model(self.xt, self.ct), self.t.loss)

    def loss(self, perm: torch.Tensor, i: int) -> torch.Tensor:
        x, y, c = self.minibatch(perm, i)
        return self.objective(y * self.model(x, c), self.t.loss)

    def adapt(self, step: int) -> str:
        """Re-estimate the adaptive base step when due; why it failed ("" when it did not)."""
        a = self.adaptive
        if a is None or (step % a.every and a.estimated):   # due every `every` steps, and before the first estimate
            return ""
        return a.estimate(self.model, self.full_objective, normalizer(self.model, self.t, self.degree), step)

    def base_lr(self, lr: float) -> float:
        """The base step eta_0 this step: the schedule's `lr`, or the adaptive estimate."""
        return self.adaptive.eta0 if self.adaptive is not None else lr

    def prepare(self, loss: torch.Tensor, lr: float) -> None:
        """The gradient of `loss` in the parameters, and the optimizer's step size for it."""
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.t.descent == "coordinate":   # greedy coordinate descent (AdaBoost's): only the l1 steepest
            grads = [p.grad for p in self.model.parameters()]   # direction's coordinate keeps its gradient
            for g, d in zip(grads, SteepestL1.direction(grads)):
                g.mul_(d.abs())
        base = self.base_lr(lr)
        for g in self.opt.param_groups:   # lr / 1.0 (the epoch's lr, as set) unless adaptive or normalized
            g["lr"] = base / normalizer(self.model, self.t, self.degree)
