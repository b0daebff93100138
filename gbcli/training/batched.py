"""Batched training: the networks of a sweep that share their data and batch order (same model
kind and architecture, training set and schedule; any context seeds, inits or momenta) trained as
one torch computation, with the trajectories of the plain loop (`gbcli.training.loop.train`).

The model kind stacks its networks (`ModelSpec.Stacked`, e.g. `gbcli.models.gln.StackedGLN`); the
minibatch order, learning-rate schedule and logged steps are the ones `train` uses, and each
network's step is the SGD step `torch.optim.SGD` takes (its own momentum buffer, `buf = mu buf +
g`, `w -= lr buf`), elementwise on the stacked weights. The metrics are logged by the plain loop's
`MetricLog` on each network. Any network whose training fails (a non-finite loss, divergence)
sends the whole group back to the plain loop (`None`), which then records it as it does.

Why not one process per network: on the Figure 2 grid the per-step Python and dispatch overhead
was 4x the matmul floor at H = 10, N = 500 (issue 13); K networks in one step pay it once.
"""

from __future__ import annotations

import json
import time

import pandas as pd
import torch
from torch import nn

from gbcli.models.base import ModelSpec
from gbcli.registry import spec_of
from gbcli.training.loop import MetricLog, Schedule, TrainResult, epoch_lr, tensors
from gbcli.training.losses import loss_fn

# the only training key that may differ within a group (besides what the kind's gating draws:
# context seeds, median init, init seeds)
PER_NETWORK = ("momentum", "validation")


def batch_key(cfg) -> str | None:
    """Networks with the same key can be trained as one computation; None: this one cannot (its
    kind does not stack or has a per-epoch hook, or it uses instruments, normalized steps,
    coordinate descent or another optimizer than SGD: the batched loop takes SGD steps only)."""
    spec, t = spec_of(cfg), cfg.training
    if (spec.Stacked is None or type(spec).on_epoch is not ModelSpec.on_epoch or t.track
            or t.step_rule != "constant" or t.descent != "gradient" or t.optimizer != "sgd"):
        return None
    d = cfg.to_dict()
    return json.dumps({"dataset": d["dataset"], "model": d["model"], "contexts.count": cfg.contexts.count,
                       "training": {k: v for k, v in d["training"].items() if k not in PER_NETWORK}},
                      sort_keys=True)


def train_batched(models: list[nn.Module], cfgs: list, problems: list) -> list[TrainResult] | None:
    """Train `models` (built from `cfgs`, gated as `problems`; one `batch_key`) in place; their
    results, or None when one of them failed (train them with the plain loop then)."""
    if len({batch_key(c) for c in cfgs}) != 1 or batch_key(cfgs[0]) is None:
        raise ValueError("train_batched: the networks do not share a batch key")
    cfg, spec = cfgs[0], spec_of(cfgs[0])
    t, ds = cfg.training, problems[0].dataset
    device = torch.device(t.device)
    xt, yt, xv, yv = tensors(device, ds.x_train, ds.y_train, ds.x_val, ds.y_val)
    cts = [tensors(device, p.ctx_train, dtype=torch.long)[0] for p in problems]
    cvs = [tensors(device, p.ctx_val, dtype=torch.long)[0] for p in problems]
    for m in models:
        m.to(device)
    stacked = spec.Stacked(models).to(device)
    ct = torch.stack(cts)                                    # (K, N, ...) each network's gates
    logs = [MetricLog(c, xt, yt, cts[k], xv, yv, cvs[k]) for k, c in enumerate(cfgs)]
    params = list(stacked.parameters())
    mu = torch.tensor([c.training.momentum for c in cfgs], dtype=torch.float32, device=device)
    mus = [mu.view(-1, *[1] * (p.dim() - 1)) for p in params]   # each network's momentum, per parameter
    bufs: list[torch.Tensor] | None = None
    sched = Schedule.of(t, xt.shape[0])
    gen = torch.Generator().manual_seed(t.batch_seed)

    def log_all(step: int, epoch: float, lr: float, validate: bool | None = None) -> bool:
        stacked.unstack(models)
        return all(log.log(m, step, epoch, lr, validate) for log, m in zip(logs, models))

    start = time.perf_counter()
    step, lr = 0, t.lr
    for epoch in range(t.epochs):
        lr = epoch_lr(t, epoch)
        perm = torch.randperm(xt.shape[0], generator=gen).to(device)
        for i in range(sched.per_epoch):
            if step in sched.log_at and not log_all(step, epoch + i / sched.per_epoch, lr):
                return None
            idx = perm[i * sched.batch:(i + 1) * sched.batch]
            # index_select: the rows of xt[idx], 3-5x faster than advanced indexing (issue 13)
            yb = yt.index_select(0, idx)
            out = stacked(xt.index_select(0, idx), ct.index_select(1, idx))
            losses = torch.stack([loss_fn(yb * out[k], t.loss) for k in range(len(models))])
            if not bool(torch.isfinite(losses).all()):
                return None
            for p in params:
                p.grad = None
            losses.sum().backward()   # d(sum)/d(loss_k) = 1: each network gets its own gradient
            with torch.no_grad():
                if bufs is None:     # torch.optim.SGD: the first buffer is the gradient itself
                    bufs = [p.grad.clone() for p in params]
                else:
                    for b, p, m in zip(bufs, params, mus):
                        b.mul_(m).add_(p.grad)
                for b, p in zip(bufs, params):
                    p.add_(b, alpha=-lr)
            step += 1
    if not log_all(step, step / sched.per_epoch, lr, validate=True):
        return None
    seconds = (time.perf_counter() - start) / len(models)
    results = []
    with torch.no_grad():
        for log, m, c_t, c_v in zip(logs, models, cts, cvs):
            results.append(TrainResult(pd.DataFrame(log.rows), m(xt, c_t).double().cpu().numpy(),
                                       m(xv, c_v).double().cpu().numpy(), seconds, step))
    return results
