"""Batched training: a sweep's networks that share data and batch order (same kind, architecture, training set
and schedule; any context seeds, inits or momenta) trained as one torch computation (`ModelSpec.Stacked`) with
the plain loop's trajectories: each network's step is `torch.optim.SGD`'s, elementwise on the stacked weights.
Any failure sends the whole group back to the plain loop (`None`). The group writes each network's plain-loop
checkpoint and is never resumed as a group: `runs.stages.train_gd_group` resumes each with the plain loop."""

from __future__ import annotations

import json
import math
import time

import pandas as pd
import torch
from torch import nn

from gbcli import interrupts
from gbcli.models.base import ModelSpec
from gbcli.registry import spec_of
from gbcli.training.loop import (Checkpointing, MetricLog, Schedule, TrainResult, epoch_lr, save_checkpoint,
                                 tensors)
from gbcli.training.losses import loss_fn
from gbcli.optimizers import SGD

PER_NETWORK = ("momentum", "validation")   # the training keys that may differ within a group


def batch_key(cfg) -> str | None:
    """Networks with the same key can be trained as one computation; None: this one cannot (a kind that does not
    stack or has a per-epoch hook; instruments, normalized steps, coordinate descent, an optimizer but SGD)."""
    spec, t = spec_of(cfg), cfg.training
    if (spec.Stacked is None or type(spec).on_epoch is not ModelSpec.on_epoch or t.track
            or t.step_rule != "constant" or t.descent != "gradient" or t.optimizer != "sgd"):
        return None
    d = cfg.to_dict()
    return json.dumps({"dataset": d["dataset"], "model": d["model"], "contexts.count": cfg.contexts.count,
                       "training": {k: v for k, v in d["training"].items() if k not in PER_NETWORK}},
                      sort_keys=True)


def train_batched(models: list[nn.Module], cfgs: list, problems: list,
                  checkpoints: list[Checkpointing | None] | None = None, on_rows: list | None = None,
                  ) -> list[TrainResult] | None:
    """Train `models` (built from `cfgs`, gated as `problems`; one `batch_key`) in place: their results, or None
    when one failed. `checkpoints`: each network's, written at the shortest interval and when interrupted
    (nothing is resumed here); `on_rows`: each network's `on_row`."""
    if len({batch_key(c) for c in cfgs}) != 1 or batch_key(cfgs[0]) is None:
        raise ValueError("train_batched: the networks do not share a batch key")
    cfg, spec = cfgs[0], spec_of(cfgs[0])
    t, ds = cfg.training, problems[0].dataset
    device = torch.device(t.device)
    xt, yt, xv, yv = tensors(device, ds.x_train, ds.y_train, ds.x_val, ds.y_val)
    cts, cvs = zip(*(tensors(device, p.ctx_train, p.ctx_val, dtype=torch.long) for p in problems))
    for m in models:
        m.to(device)
    stacked = spec.Stacked(models).to(device)
    ct = torch.stack(cts)                                    # (K, N, ...) each network's gates
    on_rows = on_rows or [None] * len(cfgs)
    logs = [MetricLog(c, xt, yt, cts[k], xv, yv, cvs[k], on_row=on_rows[k]) for k, c in enumerate(cfgs)]
    params = list(stacked.parameters())
    mu = torch.tensor([c.training.momentum for c in cfgs], dtype=torch.float32, device=device)
    mus = [mu.view(-1, *[1] * (p.dim() - 1)) for p in params]   # each network's momentum, per parameter
    bufs: list[torch.Tensor] | None = None
    sched = Schedule.of(t, xt.shape[0])
    gen = torch.Generator().manual_seed(t.batch_seed)
    full = sched.batch >= xt.shape[0]   # as `Step`: unpermuted, column-major where the network takes it
    x_full = xt.T.contiguous().T if full and getattr(stacked, "column_major_input", False) else xt

    def log_all(step: int, epoch: float, lr: float, validate: bool | None = None) -> bool:
        stacked.unstack(models)
        return all(log.log(m, step, epoch, lr, validate) for log, m in zip(logs, models))

    keep = checkpoints or [None] * len(models)
    every = min((c.seconds for c in keep if c is not None), default=math.inf)
    gen_epoch, epoch_gen_state = 0, gen.get_state()   # as in the plain loop
    changing = False

    def save() -> None:
        """Each network's plain-loop checkpoint at the boundary before step `step`."""
        stacked.unstack(models)
        gen_state = epoch_gen_state if gen_epoch == step // sched.per_epoch else gen.get_state()
        seconds = (time.perf_counter() - start) / len(models)
        for k, (m, c, ck) in enumerate(zip(models, cfgs, keep)):
            if ck is None:
                continue
            opt = SGD(m.parameters(), lr=t.lr, momentum=c.training.momentum)   # as the plain loop's
            if bufs is not None and c.training.momentum != 0:   # SGD keeps no buffer at momentum 0
                for i, b in enumerate(bufs):
                    opt.state[i] = {"momentum_buffer": b[k].detach().clone()}
            save_checkpoint(ck, step, seconds, m, opt, gen_state, logs[k].rows)

    start = time.perf_counter()
    step, lr = 0, t.lr
    next_save = time.monotonic() + every
    try:
        for epoch in range(t.epochs):
            with interrupts.deferred():
                changing = True
                lr = epoch_lr(t, epoch)
                gen_epoch, epoch_gen_state = epoch, gen.get_state()
                perm = torch.randperm(xt.shape[0], generator=gen).to(device)   # drawn even for the full batch (the generator)
                changing = False
            for i in range(sched.per_epoch):
                if interrupts.checkpoint_asked() or time.monotonic() >= next_save:   # a Slurm SIGTERM asks at once
                    save()
                    next_save = time.monotonic() + every
                if step in sched.log_at and not log_all(step, epoch + i / sched.per_epoch, lr):
                    return None
                if full:   # the plain loop's full batch (gbcli.training.step.Step): the tensors themselves
                    yb, out = yt, stacked(x_full, ct)
                else:
                    idx = perm[i * sched.batch:(i + 1) * sched.batch]
                    yb = yt.index_select(0, idx)
                    out = stacked(xt.index_select(0, idx), ct.index_select(1, idx))
                losses = torch.stack([loss_fn(yb * out[k], t.loss) for k in range(len(models))])
                if not bool(torch.isfinite(losses).all()):
                    return None
                for p in params:
                    p.grad = None
                losses.sum().backward()   # d(sum)/d(loss_k) = 1: each network gets its own gradient
                with torch.no_grad(), interrupts.deferred():   # an interrupt waits for the step's end
                    changing = True
                    if bufs is None:     # torch.optim.SGD: the first buffer is the gradient itself
                        bufs = [p.grad.clone() for p in params]
                    else:
                        for b, p, m in zip(bufs, params, mus):
                            b.mul_(m).add_(p.grad)
                    for b, p in zip(bufs, params):
                        p.add_(b, alpha=-lr)
                    step += 1
                    changing = False
        if not log_all(step, step / sched.per_epoch, lr, validate=True):
            return None
        seconds = (time.perf_counter() - start) / len(models)
        with torch.no_grad():
            return [TrainResult(pd.DataFrame(log.rows), m(xt, c_t).double().cpu().numpy(),
                                m(xv, c_v).double().cpu().numpy(), seconds, step)
                    for log, m, c_t, c_v in zip(logs, models, cts, cvs)]
    except (interrupts.Interrupted, KeyboardInterrupt):
        if not changing and every < math.inf:
            save()
        raise
