"""The update rules `training.optimizer` names (docs/optimizers.md), one class each; `build` makes a config's.

Each takes torch's optimizer interface (`step`, `zero_grad`, `param_groups[0]["lr"]`, `state_dict` in
torch's format) over all the parameters as one vector: a steepest step's norm is the whole vector's, as
in the theorems. No torch is imported here, so the config names optimizers before anything heavy loads.
`geometry`: q of the lq norm (math.inf: l-infinity) whose margin the limit maximizes, for a linear
predictor (Gunasekar et al. 2018; Sun et al. 2022) and, for the steepest descents, at KKT points of
homogeneous networks (Tsilivis et al. 2024); None where no theorem says.
"""

from __future__ import annotations

import math
from typing import ClassVar


class Optimizer:
    """An update rule: `step()` moves each parameter by `-lr` times its part of `direction(grads)` (default:
    the gradient) through `update`."""

    name: ClassVar[str]
    geometry: ClassVar[float | None]
    description: ClassVar[str]
    keys: ClassVar[dict[str, str]] = {}   # training key -> its setting, passed when not null

    def __init__(self, params, lr: float, **settings):
        self.params = list(params)
        self.param_groups = [{"lr": lr, **settings}]
        self.state: dict[int, dict] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def direction(self, grads: list) -> list:
        return grads

    def step(self) -> None:
        live = [(i, p) for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        import torch   # the step only: naming an optimizer loads no torch

        lr = self.param_groups[0]["lr"]
        with torch.no_grad():
            for (i, p), d in zip(live, self.direction([p.grad for _, p in live])):
                self.update(i, p, d, lr)

    def update(self, i: int, p, d, lr: float) -> None:
        p.add_(d, alpha=-lr)

    def state_dict(self) -> dict:
        return {"state": {i: dict(s) for i, s in sorted(self.state.items())},
                "param_groups": [{**self.param_groups[0], "params": list(range(len(self.params)))}]}

    def load_state_dict(self, saved: dict) -> None:
        """A state_dict (checked by `training.loop._restore`); buffers copied to their parameter's dtype and device."""
        self.param_groups[0].update({k: v for k, v in saved["param_groups"][0].items() if k != "params"})
        self.state = {i: {k: v if v is None else v.detach().to(self.params[i].device, self.params[i].dtype).clone()
                          for k, v in entry.items()}
                      for i, entry in saved["state"].items()}


class SGD(Optimizer):
    """SGD with heavy-ball momentum: `torch.optim.SGD`'s CPU step in the same floating-point order and
    `state_dict` format (tests/test_sgd.py: bit for bit), without `torch.optim`, whose first use imports
    `torch._dynamo` (1.3 CPU seconds). Gradient descent at any momentum maximizes the l2 margin."""

    name, geometry = "sgd", 2.0
    description = "SGD with heavy-ball momentum (training.momentum)"
    keys = {"momentum": "momentum"}

    def __init__(self, params, lr: float, momentum: float = 0.0):
        super().__init__(params, lr, momentum=momentum, dampening=0, weight_decay=0, nesterov=False, maximize=False,
                         foreach=None, differentiable=False, fused=None)   # torch.optim.SGD's, in its state_dict

    def update(self, i, p, d, lr):
        mu = self.param_groups[0]["momentum"]
        if mu != 0:
            entry = self.state.get(i)
            if entry is None:
                self.state[i] = entry = {"momentum_buffer": d.clone().detach()}
            else:
                entry["momentum_buffer"].mul_(mu).add_(d)
            d = entry["momentum_buffer"]
        p.add_(d, alpha=-lr)


class Adam:
    """torch's Adam (paper 001's appendix D; `training.betas`, `training.eps`, torch's defaults when null);
    a linear predictor's limit maximizes the l-infinity margin (Zhang, Zou, Cao 2024)."""

    name, geometry = "adam", math.inf
    description = "torch's Adam (training.betas, training.eps)"
    keys = {"betas": "betas", "eps": "eps"}

    def __new__(cls, params, lr: float, **settings):
        import torch

        return torch.optim.Adam(params, lr=lr, **settings)


class Sign(Optimizer):
    """Sign descent (l-infinity steepest): every coordinate moves by lr against its gradient's sign."""

    name, geometry = "sign", math.inf
    description = "sign descent: each coordinate moves by lr against its gradient's sign (l-infinity steepest)"

    def direction(self, grads):
        return [g.sign() for g in grads]


class SteepestL2(Optimizer):
    """Normalized gradient descent (l2 steepest): a step of length lr along the gradient."""

    name, geometry = "steepest-l2", 2.0
    description = "normalized gradient descent: a step of l2 length lr along the gradient"

    def direction(self, grads):
        norm = sum(float((g.abs() ** 2.0).sum()) for g in grads) ** 0.5
        return [g / norm if norm > 0 else g * 0 for g in grads]


class SteepestL1(Optimizer):
    """The normalized steepest descent in the l1 norm: only the coordinate with the largest |gradient|
    (the first such, over all parameters in order) moves, by lr (greedy coordinate descent)."""

    name, geometry = "steepest-l1", 1.0
    description = "greedy coordinate descent: the coordinate of largest |gradient| moves by lr (l1 steepest)"

    @staticmethod
    def direction(grads):
        peaks = [float(g.abs().max()) if g.numel() else -1.0 for g in grads]
        top = max(range(len(grads)), key=lambda k: (peaks[k], -k))
        out = [g * 0 for g in grads]
        if peaks[top] > 0:
            flat, at = out[top].view(-1), int(grads[top].abs().view(-1).argmax())
            flat[at] = grads[top].view(-1)[at].sign()
        return out


class Mirror(Optimizer):
    """Mirror descent with psi(w) = ||w||_p^p / p (1 < p <= 2; p = 2 is GD): the step is taken on
    sign(w) |w|^(p-1) and mapped back; the limit maximizes the lp margin (Sun, Ahn, Thrampoulidis, Azizan 2022)."""

    name, geometry = "mirror", None   # its geometry is its p: `geometry_of`
    description = "mirror descent with the potential ||w||_p^p / p (training.mirror_p in (1, 2])"
    keys = {"mirror_p": "p"}

    def __init__(self, params, lr: float, p: float = 1.5):
        if not 1 < p <= 2:
            raise ValueError(f"mirror descent: p = {p} is not in (1, 2]")
        super().__init__(params, lr, p=p)

    def update(self, i, p, d, lr):
        q = self.param_groups[0]["p"]
        u = p.sign() * p.abs() ** (q - 1) - lr * d
        p.copy_(u.sign() * u.abs() ** (1 / (q - 1)))


OPTIMIZERS: dict[str, type] = {c.name: c for c in (SGD, Adam, Sign, SteepestL1, SteepestL2, Mirror)}
GEOMETRY = {name: cls.geometry for name, cls in OPTIMIZERS.items()}
PROGRAM_NORM = {1.0: "l1", 2.0: "sq", math.inf: "linf", 1.5: "l1.5"}   # the norm (programs.norms) of an lq margin


def geometry_of(name: str, settings: dict) -> float | None:
    """The q of the lq margin an optimizer's limit maximizes (its mirror p for mirror descent)."""
    p = settings.get("p")
    return (1.5 if p is None else p) if name == Mirror.name else GEOMETRY[name]


def geometry(training) -> float | None:
    """The geometry of a config's `training` section: its optimizer's, l1 for coordinate descent."""
    if getattr(training, "descent", "gradient") == "coordinate":
        return 1.0
    return geometry_of(training.optimizer, {"p": getattr(training, "mirror_p", 1.5)})


def build(training, params):
    """The optimizer a config's `training` section names, over `params`, with the section's settings."""
    cls = OPTIMIZERS[training.optimizer]
    settings = {s: v for k, s in cls.keys.items() if (v := getattr(training, k, None)) is not None}
    return cls(params, lr=training.lr, **settings)
