"""Gradient-descent training of the GD networks (protocol section 4).

Minibatch SGD (or full-batch GD; or Adam, `training.optimizer`) on the logistic or exponential
loss, with a step schedule of learning-rate milestones. Metrics are evaluated on the full training
and validation sets at `log_points` evenly spaced steps (including step 0 and the last step); with
`validation: final` the validation set only at the last step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
import torch
from torch import nn

from gbcli.errors import GbError
from gbcli.metrics import error
from gbcli.models.base import weight_norm
from gbcli.registry import spec_of
from gbcli.training.losses import log_mean_loss, loss_fn

EXPLODED = 1e6   # a logged training loss this many times its value at step 0 counts as divergence


def steepest_coordinate(model: nn.Module) -> None:
    """Keep only the largest gradient coordinate: steepest descent in the l1 norm, i.e. greedy
    coordinate descent (AdaBoost's update, whose limit is the l1 max-margin direction)."""
    g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    keep = int(g.abs().argmax())
    for p in model.parameters():
        flat = p.grad.reshape(-1)
        mask = torch.zeros_like(flat)
        if 0 <= keep < flat.numel():
            mask[keep] = 1.0
        keep -= flat.numel()
        p.grad.mul_(mask.reshape(p.grad.shape))


@dataclass
class TrainResult:
    metrics: pd.DataFrame
    train_out: np.ndarray
    val_out: np.ndarray
    seconds: float
    steps: int
    diverged: str = ""     # why training stopped early: a non-finite loss, output or weight


@dataclass
class Schedule:
    """The steps of a training run: minibatch size, steps per epoch, total, and the logged steps."""

    batch: int
    per_epoch: int
    total: int
    log_at: set

    @classmethod
    def of(cls, t, n: int) -> "Schedule":
        batch = min(t.batch_size or n, n)
        per_epoch = math.ceil(n / batch)
        total = t.epochs * per_epoch
        log_at = set(np.unique(np.linspace(0, total, t.log_points).round().astype(int)).tolist())
        if t.log_spacing == "log":   # step 0, then geometric steps up to the last
            log_at = {0} | set(np.unique(np.geomspace(1, total, t.log_points - 1).round().astype(int)).tolist())
        return cls(batch, per_epoch, total, log_at)


def epoch_lr(t, epoch: int) -> float:
    return t.lr * t.lr_decay ** sum(epoch >= m for m in t.lr_milestones)


class MetricLog:
    """The rows of metrics.csv: the full training (and validation) sets evaluated at a logged step,
    and whether the network is still healthy. `training.validation: final`: the validation set is
    evaluated only when asked (the last step), its error NaN in the other rows, unless an
    instrument needs the validation outputs."""

    def __init__(self, cfg, xt, yt, ct, xv, yv, cv, tracker=None):
        self.t, self.degree, self.tracker = cfg.training, cfg.model.homogeneity, tracker
        self.xt, self.yt, self.ct, self.xv, self.yv, self.cv = xt, yt, ct, xv, yv, cv
        self.every_val = self.t.validation == "logged" or tracker is not None
        self.rows: list[dict] = []

    def exploded(self) -> bool:
        """The loss grew EXPLODED-fold over its value at step 0: the steps overshoot (a learning rate
        far too large), even while the numbers are still finite."""
        rows = self.rows
        return len(rows) > 1 and rows[-1]["train_loss"] > EXPLODED * max(rows[0]["train_loss"], 1e-12)

    def log(self, model: nn.Module, step: int, epoch: float, lr: float, validate: bool | None = None) -> bool:
        """Log the metrics at this step; False when the network is no longer finite."""
        t, validate = self.t, self.every_val if validate is None else validate
        with torch.no_grad():
            out_t = model(self.xt, self.ct)
            out_v = model(self.xv, self.cv) if validate else torch.zeros(0, device=out_t.device)
            m = self.yt * out_t
            norm = weight_norm(model)
            self.rows.append({
                "step": step, "epoch": epoch, "lr": lr,
                "train_loss": float(loss_fn(m, t.loss)),
                "train_error": error(out_t, self.yt), "val_error": error(out_v, self.yv) if validate else float("nan"),
                "weight_norm": norm,
                "normalized_margin": float(m.min()) / norm ** self.degree if norm > 0 else float("nan"),
            })
            if t.step_rule != "constant":   # R itself underflows in long loss-normalized runs; log R does not
                self.rows[-1]["log_train_loss"] = float(log_mean_loss(m.double(), t.loss))
        ok = (all(bool(torch.isfinite(w).all()) for w in model.weights()) and bool(torch.isfinite(out_t).all())
              and bool(torch.isfinite(out_v).all()) and np.isfinite(self.rows[-1]["train_loss"]) and not self.exploded())
        if self.tracker is not None and ok:   # the instruments need a finite network
            self.rows[-1].update(self.tracker.measure(model, self.xt, self.yt, self.ct, m, out_v))
        return ok

    def why_diverged(self, step: int) -> str:
        if self.exploded():
            return (f"the training loss grew from {self.rows[0]['train_loss']:.3g} to "
                    f"{self.rows[-1]['train_loss']:.3g} by step {step}")
        return f"the network's weights, outputs or loss are not finite at step {step}"


def tensors(device, *arrays, dtype=torch.float32):
    return [None if a is None else torch.tensor(a, dtype=dtype, device=device) for a in arrays]


def check_device(cfg) -> torch.device:
    """The configured training device, refused when torch cannot use it (called before a run
    directory is created, and again by `train`)."""
    device = torch.device(cfg.training.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise GbError("training.device: cuda was asked for, but torch sees no CUDA device (use cpu)")
    return device


def train(model: nn.Module, cfg, x_train: np.ndarray, y_train: np.ndarray, ctx_train: np.ndarray | None,
          x_val: np.ndarray, y_val: np.ndarray, ctx_val: np.ndarray | None, progress: bool = True,
          tracker=None, spec=None) -> TrainResult:
    """Train `model` in place as configured; returns the metric log and the final outputs.
    `tracker` (gbcli.instruments) adds its instruments' columns at every logged step; `spec` (the
    model's spec, default: from the registry) gets its per-epoch hook (FReLU freezes its gates)."""
    spec = spec or spec_of(cfg)
    t = cfg.training
    device = check_device(cfg)
    model.to(device)
    xt, yt, xv, yv = tensors(device, x_train, y_train, x_val, y_val)
    ct, cv = tensors(device, ctx_train, ctx_val, dtype=torch.long)

    n = xt.shape[0]
    sched = Schedule.of(t, n)
    batch, per_epoch, total, log_at = sched.batch, sched.per_epoch, sched.total, sched.log_at
    normalized = t.step_rule != "constant"
    objective = log_mean_loss if normalized else loss_fn   # lr * grad log R = (lr / R) * grad R
    if hasattr(model, "restrict"):   # shallow GLN: train only the contexts that hold training points
        model.restrict(ct, sparse_grad=t.momentum == 0)
    opt = (torch.optim.Adam(model.parameters(), lr=t.lr) if t.optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=t.lr, momentum=t.momentum))
    gen = torch.Generator().manual_seed(t.batch_seed)
    degree = cfg.model.homogeneity
    metrics = MetricLog(cfg, xt, yt, ct, xv, yv, cv, tracker)
    rows, log, why_diverged = metrics.rows, partial(metrics.log, model), metrics.why_diverged

    from gbcli.logs import StepProgress

    start = time.perf_counter()
    step, diverged = 0, ""
    with StepProgress(f"train {cfg.model.predictor}", total, show=progress) as bar:
        for epoch in range(t.epochs):
            if diverged:
                break
            lr = epoch_lr(t, epoch)
            for g in opt.param_groups:
                g["lr"] = lr
            spec.on_epoch(model, cfg, epoch)
            perm = torch.randperm(n, generator=gen).to(device)
            for i in range(per_epoch):
                if step in log_at:
                    if not log(step, epoch + i / per_epoch, lr):
                        diverged = why_diverged(step)
                        break
                    last = rows[-1]
                    bar.note(loss=last["train_loss"], train_err=last.get("train_error"),
                             **({"val_err": last["val_error"]} if last.get("val_error") == last.get("val_error")
                                and last.get("val_error") is not None else {}))
                idx = perm[i * batch:(i + 1) * batch]
                loss = objective(yt[idx] * model(xt[idx], None if ct is None else ct[idx]), t.loss)
                if not bool(torch.isfinite(loss)):
                    diverged = f"the training loss is {float(loss)} at step {step} (epoch {epoch})"
                    break
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if t.descent == "coordinate":
                    steepest_coordinate(model)
                if t.step_rule == "homogeneous-normalized" and degree > 1:
                    for g in opt.param_groups:
                        g["lr"] = lr / weight_norm(model) ** (2 * degree - 2)
                opt.step()
                step += 1
                bar.advance()
        if not (rows and rows[-1]["step"] == step):   # the last step (already logged when it diverged there)
            if not log(step, step / per_epoch, lr, validate=True) and not diverged:
                diverged = why_diverged(step)
    with torch.no_grad():
        train_out = model(xt, ct).double().cpu().numpy()
        val_out = model(xv, cv).double().cpu().numpy()
    return TrainResult(pd.DataFrame(rows), train_out, val_out, time.perf_counter() - start, step, diverged)
