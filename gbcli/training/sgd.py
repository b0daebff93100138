"""SGD with heavy-ball momentum: the step of `torch.optim.SGD`, without `torch.optim`, whose first
use imports `torch._dynamo` (1.3 CPU seconds, a quarter of a short `gb train-gd`) for an update of
two lines. The step is torch's CPU path in the same floating-point order (the first momentum buffer
is the gradient itself, then `buf = mu * buf + grad`; `p -= lr * buf`, or `p -= lr * grad` at
momentum 0, sparse gradients included), in torch's `state_dict` format: a checkpoint written by
either resumes in the other (`tests/test_sgd.py` compares the two bit for bit).
"""

from __future__ import annotations

import torch

# torch.optim.SGD's settings with their defaults: the param group a state_dict carries
DEFAULTS = {"dampening": 0, "weight_decay": 0, "nesterov": False, "maximize": False, "foreach": None,
            "differentiable": False, "fused": None}


class SGD:
    def __init__(self, params, lr: float, momentum: float = 0.0):
        self.params = list(params)
        self.param_groups = [{"lr": lr, "momentum": momentum, **DEFAULTS}]
        self.state: dict[int, dict[str, torch.Tensor]] = {}   # parameter index -> its momentum buffer

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, mu = group["lr"], group["momentum"]
        for i, p in enumerate(self.params):
            d = p.grad
            if d is None:
                continue
            if mu != 0:
                entry = self.state.get(i)
                if entry is None:
                    self.state[i] = entry = {"momentum_buffer": torch.clone(d).detach()}
                else:
                    entry["momentum_buffer"].mul_(mu).add_(d)
                d = entry["momentum_buffer"]
            p.add_(d, alpha=-lr)

    def state_dict(self) -> dict:
        return {"state": {i: dict(s) for i, s in sorted(self.state.items())},
                "param_groups": [{**self.param_groups[0], "params": list(range(len(self.params)))}]}

    def load_state_dict(self, saved: dict) -> None:
        """Load a state_dict (checked by the caller: `training.loop._restore`); buffers are copied
        to their parameter's dtype and device, as torch does."""
        self.param_groups[0].update({k: v for k, v in saved["param_groups"][0].items() if k != "params"})
        self.state = {i: {k: v if v is None else v.detach().to(self.params[i].device, self.params[i].dtype).clone()
                          for k, v in entry.items()}
                      for i, entry in saved["state"].items()}
