"""The update rules beyond gradient descent (issue 50; docs/optimizers.md), one class each, and the
geometry whose max-margin program a theorem says each one's limit solves.

Each class takes torch's optimizer interface (`step`, `zero_grad`, `param_groups[0]["lr"]`,
`state_dict`/`load_state_dict` in torch's format) over all the parameters as one vector: the
norm of a steepest step is the norm of the whole parameter vector, as in the theorems. The module
imports no torch (the tensors it is handed carry their own methods): the config can name the
optimizers and their geometries before anything heavy loads.

`geometry`: q of the lq norm (math.inf for l-infinity) whose margin the limit maximizes, for a
linear predictor (Gunasekar et al. 2018; Sun et al. 2022) and, for the steepest descents, at KKT
points for homogeneous networks (Tsilivis et al. 2024); None where no theorem says.
"""

from __future__ import annotations

import math
from typing import ClassVar


class Optimizer:
    """An update rule over a list of parameters: `step()` moves each parameter by `-lr` times its
    part of `direction(grads)`."""

    name: ClassVar[str]
    geometry: ClassVar[float | None]
    description: ClassVar[str]

    def __init__(self, params, lr: float, **settings):
        self.params = list(params)
        self.param_groups = [{"lr": lr, **settings}]
        self.state: dict[int, dict] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def direction(self, grads: list) -> list:
        raise NotImplementedError

    def step(self) -> None:
        live = [(i, p) for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        lr = self.param_groups[0]["lr"]
        with _no_grad():
            for (i, p), d in zip(live, self.direction([p.grad for _, p in live])):
                self.update(i, p, d, lr)

    def update(self, i: int, p, d, lr: float) -> None:
        p.add_(d, alpha=-lr)

    def state_dict(self) -> dict:
        return {"state": {i: dict(s) for i, s in sorted(self.state.items())},
                "param_groups": [{**self.param_groups[0], "params": list(range(len(self.params)))}]}

    def load_state_dict(self, saved: dict) -> None:
        self.param_groups[0].update({k: v for k, v in saved["param_groups"][0].items() if k != "params"})
        self.state = {i: {k: v.detach().to(self.params[i].device, self.params[i].dtype).clone()
                          for k, v in entry.items()} for i, entry in saved["state"].items()}


def _no_grad():
    import torch   # the step only: naming an optimizer loads no torch

    return torch.no_grad()


def _norm(grads: list, q: float) -> float:
    if q == math.inf:
        return max(float(g.abs().max()) for g in grads)
    return sum(float((g.abs() ** q).sum()) for g in grads) ** (1 / q)


class Sign(Optimizer):
    """Sign descent, the normalized steepest descent in the l-infinity norm: every coordinate moves
    by lr against the sign of its gradient."""

    name, geometry = "sign", math.inf
    description = "sign descent: each coordinate moves by lr against its gradient's sign (l-infinity steepest)"

    def direction(self, grads):
        return [g.sign() for g in grads]


class SteepestL2(Optimizer):
    """Normalized gradient descent, the normalized steepest descent in the l2 norm: a step of length
    lr along the gradient."""

    name, geometry = "steepest-l2", 2.0
    description = "normalized gradient descent: a step of l2 length lr along the gradient"

    def direction(self, grads):
        norm = _norm(grads, 2.0)
        return [g / norm if norm > 0 else g * 0 for g in grads]


class SteepestL1(Optimizer):
    """The normalized steepest descent in the l1 norm: only the coordinate with the largest |gradient|
    (the first such, over all parameters in order) moves, by lr (greedy coordinate descent)."""

    name, geometry = "steepest-l1", 1.0
    description = "greedy coordinate descent: the coordinate of largest |gradient| moves by lr (l1 steepest)"

    def direction(self, grads):
        peaks = [float(g.abs().max()) if g.numel() else -1.0 for g in grads]
        top = max(range(len(grads)), key=lambda k: (peaks[k], -k))
        out = [g * 0 for g in grads]
        if peaks[top] > 0:
            flat, at = out[top].view(-1), int(grads[top].abs().view(-1).argmax())
            flat[at] = grads[top].view(-1)[at].sign()
        return out


class Mirror(Optimizer):
    """Mirror descent with the potential psi(w) = ||w||_p^p / p (1 < p <= 2): the mirror image
    grad psi(w) = sign(w) |w|^(p-1) takes the gradient step, and w is mapped back from it
    (sign(u) |u|^(1/(p-1))). p = 2 is gradient descent; on separable data the limit maximizes the
    lp margin (Sun, Ahn, Thrampoulidis, Azizan 2022)."""

    name, geometry = "mirror", None   # its geometry is its p: `geometry_of`
    description = "mirror descent with the potential ||w||_p^p / p (training.mirror_p in (1, 2])"

    def __init__(self, params, lr: float, p: float = 1.5):
        if not 1 < p <= 2:
            raise ValueError(f"mirror descent: p = {p} is not in (1, 2]")
        super().__init__(params, lr, p=p)

    def direction(self, grads):
        return grads

    def update(self, i, p, d, lr):
        q = self.param_groups[0]["p"]
        u = p.sign() * p.abs() ** (q - 1) - lr * d
        p.copy_(u.sign() * u.abs() ** (1 / (q - 1)))


OPTIMIZERS: dict[str, type[Optimizer]] = {c.name: c for c in (Sign, SteepestL1, SteepestL2, Mirror)}


# gb's other optimizers (gbcli.training): heavy-ball SGD (gradient descent at any momentum: the l2
# margin) and torch's Adam (the l-infinity margin, a theorem for linear predictors)
GEOMETRY = {"sgd": 2.0, "adam": math.inf, **{name: cls.geometry for name, cls in OPTIMIZERS.items()}}
PROGRAM_NORM = {1.0: "l1", 2.0: "sq", math.inf: "linf", 1.5: "l1.5"}   # the norm (programs.norms) of an lq margin


def geometry_of(name: str, settings: dict) -> float | None:
    """The q of the lq margin an optimizer's limit maximizes (its mirror p for mirror descent)."""
    return settings.get("p", 1.5) if name == Mirror.name else GEOMETRY[name]


def geometry(training) -> float | None:
    """The geometry of a config's `training` section: its optimizer's, l1 for coordinate descent."""
    if getattr(training, "descent", "gradient") == "coordinate":
        return 1.0
    return geometry_of(training.optimizer, {"p": getattr(training, "mirror_p", 1.5)})
