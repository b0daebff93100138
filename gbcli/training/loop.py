"""Gradient-descent training of the GD networks (protocol section 4): minibatch SGD, full-batch GD or another
update rule on the logistic or exponential loss, with learning-rate milestones; metrics of the full training and
validation sets at `log_points` steps (step 0 and the last included), resumable from checkpoints."""

from __future__ import annotations

import io
import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from gbcli import interrupts
from gbcli.errors import GbError
from gbcli.fs.safe import NotGbs, atomic_write_bytes, load_tensors_untrusted, present
from gbcli.logs import Progress, log as gb_log
from gbcli.metrics import error
from gbcli.models.base import weight_norm
from gbcli.optimizers import build as build_optimizer
from gbcli.registry import spec_of
from gbcli.training.losses import log_mean_loss, loss_fn
from gbcli.training.step import Step

EXPLODED = 1e6   # a logged training loss this many times its value at step 0 counts as divergence


@dataclass
class TrainResult:
    metrics: pd.DataFrame
    train_out: np.ndarray
    val_out: np.ndarray
    seconds: float
    steps: int
    diverged: str = ""     # why training stopped early: a non-finite loss, output or weight
    resumed_from: int | None = None   # the step a checkpoint resumed the run at (None: from the start)


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
        log = t.log_spacing == "log"   # step 0, then geometric steps up to the last
        steps = np.geomspace(1, total, t.log_points - 1) if log else np.linspace(0, total, t.log_points)
        return cls(batch, per_epoch, total, {0} | set(steps.round().astype(int).tolist()))


def epoch_lr(t, epoch: int) -> float:
    return t.lr * t.lr_decay ** sum(epoch >= m for m in t.lr_milestones)


class MetricLog:
    """The rows of metrics.csv: the full training (and validation) sets at a logged step, and whether the network
    is still healthy. `validation: final`: the validation error only when asked (the last step), else NaN, unless
    an instrument needs the validation outputs."""

    def __init__(self, cfg, xt, yt, ct, xv, yv, cv, tracker=None, on_row=None):
        self.t, self.degree, self.tracker, self.on_row = cfg.training, cfg.model.homogeneity, tracker, on_row
        self.xt, self.yt, self.ct, self.xv, self.yv, self.cv = xt, yt, ct, xv, yv, cv
        self.every_val = self.t.validation == "logged" or tracker is not None
        self.rows: list[dict] = []

    def exploded(self) -> bool:
        """The loss grew EXPLODED-fold over its value at step 0 (a learning rate far too large), while still finite."""
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
        if self.on_row is not None:   # a live view of the run (gbcli.runs.tracking), as each row is logged
            self.on_row(self.rows[-1])
        return ok

    def why_diverged(self, step: int) -> str:
        if self.exploded():
            return (f"the training loss grew from {self.rows[0]['train_loss']:.3g} to "
                    f"{self.rows[-1]['train_loss']:.3g} by step {step}")
        return f"the network's weights, outputs or loss are not finite at step {step}"


def tensors(device, *arrays, dtype=torch.float32):
    return [None if a is None else torch.tensor(a, dtype=dtype, device=device) for a in arrays]


def check_device(cfg) -> torch.device:
    """The configured training device, refused when torch cannot use it."""
    device = torch.device(cfg.training.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise GbError("training.device: cuda was asked for, but torch sees no CUDA device (use cpu)")
    return device


# ------------------------------------------------------------------ checkpoints

CHECKPOINT_FORMAT = 1
ROW_TYPES = (int, float, str, bool, type(None))


@dataclass
class Checkpointing:
    """Where `train` keeps its resumable state (`path`, e.g. RUN_DIR/gd/checkpoint.pt), how often (`seconds` > 0; also
    when interrupted), the computation it belongs to (`identity`: plain data; a checkpoint of another is not used)
    and the state to resume from (`resume`, as `read_checkpoint` returned it)."""

    path: Path
    identity: dict
    seconds: float
    resume: dict | None = None


def save_checkpoint(ck: Checkpointing, step: int, seconds: float, model: nn.Module, opt, batch_generator,
                    rows: list[dict], **extra) -> None:
    """The training state at the boundary before `step` (rows logged at it are logged again) into `ck.path`:
    tensors and plain containers only (it loads tensors-only), written atomically. One that cannot be written
    (a full disk) is warned about, not raised: the training goes on."""
    buf = io.BytesIO()
    torch.save({"format": CHECKPOINT_FORMAT, "identity": ck.identity, "torch": str(torch.__version__), "step": step,
                "seconds": seconds, "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                "optimizer": opt.state_dict(), "batch_generator": batch_generator,
                "torch_generator": torch.get_rng_state(),
                "rows": [{k: v.item() if isinstance(v, np.generic) else v for k, v in r.items()}
                         for r in rows if r["step"] < step], **extra}, buf)
    try:
        atomic_write_bytes(ck.path, buf.getvalue())
    except OSError as exc:
        gb_log.warning(f"{ck.path}: checkpoint not written ({exc.strerror or exc}); training goes on")


def note_row(bar, row: dict) -> None:
    """A logged row's numbers on the progress reporter (a NaN, a validation error not measured, is not shown)."""
    bar.note(loss=row["train_loss"], train_err=row.get("train_error"), val_err=row.get("val_error"))


def read_checkpoint(path: Path, identity: dict | None = None) -> tuple[dict | None, str]:
    """A training checkpoint's state (of this `identity` when given): (state, ""), else (None, why), `why` empty
    when there is none. Read tensors-only and never through a link (the run directory is untrusted); its
    tensors are checked against the network when resuming (`_restore`)."""
    if not present(path):
        return None, ""
    try:
        state = load_tensors_untrusted(path)
    except NotGbs as exc:
        return None, exc.why
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        return None, "not a gb training checkpoint of this version"
    if identity is not None and state.get("identity") != identity:
        return None, "a checkpoint of another config or data"
    return state, ""


def checkpoint_step(path: Path, config: str) -> int | None:
    """The step of the training checkpoint of the config whose gd manifest hash is `config` (None without a
    usable one): what a resumed sweep says it resumes from."""
    state = read_checkpoint(path)[0] or {}
    identity, step = state.get("identity"), state.get("step")
    ok = isinstance(identity, dict) and identity.get("config") == config and type(step) is int
    return step if ok else None


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


def _restore(state: dict, model: nn.Module, opt, gen: torch.Generator, sched: Schedule, update: Step | None = None
             ) -> None:
    """Load a checkpoint into the freshly built `model`, `opt` and `gen`, after checking every part
    of it against them (ValueError naming the part: nothing is changed then). A buffer may differ
    in shape (FReLU's frozen gates exist only once frozen); a parameter may not."""
    step, rows = state.get("step"), state.get("rows")
    _check(type(step) is int and 0 <= step <= sched.total, "step out of range")
    _check(isinstance(rows, list) and all(isinstance(r, dict) and all(   # plain values keyed by column names
        isinstance(k, str) and isinstance(v, ROW_TYPES) for k, v in r.items()) for r in rows), "metric rows")
    _check([r.get("step") for r in rows] == sorted(s for s in sched.log_at if s < step), "metric rows' steps")
    elapsed = state.get("seconds")
    _check(isinstance(elapsed, float) and math.isfinite(elapsed) and elapsed >= 0, "elapsed time")
    for key, ref in (("batch_generator", gen.get_state()), ("torch_generator", torch.get_rng_state())):
        g = state.get(key)
        _check(isinstance(g, torch.Tensor) and g.dtype == ref.dtype and g.shape == ref.shape, key)

    weights, own = state.get("model"), model.state_dict()
    params = dict(model.named_parameters())
    _check(isinstance(weights, dict) and set(weights) == set(own), "the network's tensors")
    for name, t in weights.items():
        mine = own[name]
        _check(isinstance(t, torch.Tensor) and t.layout == torch.strided and t.dtype == mine.dtype
               and t.dim() == mine.dim() and (name not in params or t.shape == mine.shape), f"tensor {name}")

    saved, fresh = state.get("optimizer"), opt.state_dict()
    _check(isinstance(saved, dict) and isinstance(saved.get("state"), dict)
           and isinstance(saved.get("param_groups"), list) and len(saved["param_groups"]) == len(fresh["param_groups"]),
           "optimizer state")
    plist = list(model.parameters())
    for g_saved, g_fresh in zip(saved["param_groups"], fresh["param_groups"]):
        _check(isinstance(g_saved, dict) and set(g_saved) == set(g_fresh)
               and all(g_saved[k] == g_fresh[k] for k in g_fresh if k != "lr"), "optimizer settings")
    for idx, entry in saved["state"].items():
        _check(type(idx) is int and 0 <= idx < len(plist) and isinstance(entry, dict), "optimizer state")
        for k, v in entry.items():
            if k == "step":   # Adam's step count: a scalar
                _check(isinstance(v, torch.Tensor) and v.numel() == 1 and v.dtype.is_floating_point, "optimizer step")
            else:             # a buffer shaped as its parameter (momentum, Adam's moments)
                _check(v is None or (isinstance(v, torch.Tensor) and v.layout == torch.strided
                                     and v.shape == plist[idx].shape and v.dtype == plist[idx].dtype), f"optimizer {k}")

    adaptive = update.adaptive if update is not None else None
    _check(("adaptive" in state) == (adaptive is not None), "adaptive step state")
    if adaptive is not None:   # the last check: ValueError, nothing loaded, when not a finite positive step
        adaptive.load(state["adaptive"])
    with torch.no_grad():
        for name, t in weights.items():
            if name not in params and t.shape != own[name].shape:   # a buffer that changes shape (FReLU's gates)
                owner, _, leaf = name.rpartition(".")
                setattr(model.get_submodule(owner) if owner else model, leaf, t.clone().to(own[name].device))
        model.load_state_dict(weights)
    opt.load_state_dict(saved)
    gen.set_state(state["batch_generator"])
    torch.set_rng_state(state["torch_generator"])


def train(model: nn.Module, cfg, x_train: np.ndarray, y_train: np.ndarray, ctx_train: np.ndarray | None,
          x_val: np.ndarray, y_val: np.ndarray, ctx_val: np.ndarray | None, progress: bool = True,
          tracker=None, spec=None, checkpoint: Checkpointing | None = None, on_row=None) -> TrainResult:
    """Train `model` in place as configured: the metric log and the final outputs. `tracker` (gbcli.instruments)
    adds its columns at every logged step; `spec` (default: the registry's) gets its per-epoch hook. `checkpoint`:
    save there every `checkpoint.seconds` and when interrupted, resume from `checkpoint.resume` (one that does not
    fit: step 0); with a `tracker` only when it is `resumable`. `on_row(row)` sees each logged row."""
    spec = spec or spec_of(cfg)
    t = cfg.training
    device = check_device(cfg)
    model.to(device)
    xt, yt, xv, yv = tensors(device, x_train, y_train, x_val, y_val)
    ct, cv = tensors(device, ctx_train, ctx_val, dtype=torch.long)

    n = xt.shape[0]
    sched = Schedule.of(t, n)
    per_epoch = sched.per_epoch
    if hasattr(model, "restrict"):   # shallow GLN: train only the contexts that hold training points
        model.restrict(ct, sparse_grad=t.momentum == 0)
    opt = build_optimizer(t, model.parameters())
    gen = torch.Generator().manual_seed(t.batch_seed)
    update = Step(model, cfg, xt, yt, ct, opt, sched.batch)
    metrics = MetricLog(cfg, xt, yt, ct, xv, yv, cv, tracker, on_row)
    rows, log, why_diverged = metrics.rows, partial(metrics.log, model), metrics.why_diverged

    step, elapsed, resumed = 0, 0.0, None
    if checkpoint is not None and checkpoint.resume is not None:
        state = checkpoint.resume
        try:
            _restore(state, model, opt, gen, sched, update)
        except Exception as exc:   # checked before anything was loaded: the run starts from step 0
            gb_log.warning(f"{checkpoint.path}: does not fit this network ({exc}); training from step 0")
        else:
            step = resumed = state["step"]
            elapsed = state["seconds"]
            rows.extend(state["rows"])
    first_epoch, first_i = divmod(step, per_epoch)
    # the batch generator's state at the start of epoch `gen_epoch`: this epoch's permutation is
    # drawn from it again on resuming (updated, like `step`, only while the signals are held)
    gen_epoch, epoch_gen_state = first_epoch, gen.get_state()
    changing = False   # inside a step's update: the state is not that of a step boundary
    start = time.perf_counter()

    def save() -> None:
        # at an epoch's boundary its permutation is not drawn yet: the generator is at its start
        save_checkpoint(checkpoint, step, elapsed + time.perf_counter() - start, model, opt,
                        epoch_gen_state if gen_epoch == step // per_epoch else gen.get_state(), rows,
                        **({"adaptive": update.adaptive.state()} if update.adaptive is not None else {}))

    next_save = time.monotonic() + (checkpoint.seconds if checkpoint else 0)
    diverged, lr = "", epoch_lr(t, min(first_epoch, t.epochs - 1))
    try:
        with Progress(f"train {cfg.model.predictor}", sched.total, show=progress) as bar:
            if step:
                bar.advance(step)
            for epoch in range(first_epoch, t.epochs):
                if diverged:
                    break
                with interrupts.deferred():
                    changing = True
                    lr = epoch_lr(t, epoch)
                    for g in opt.param_groups:
                        g["lr"] = lr
                    spec.on_epoch(model, cfg, epoch)
                    gen_epoch, epoch_gen_state = epoch, gen.get_state()
                    perm = torch.randperm(n, generator=gen)   # drawn even for the full batch: the generator's state
                    if not update.full:                          # the full batch uses none: no copy to the device
                        perm = perm.to(device)
                    changing = False
                for i in range(first_i if epoch == first_epoch else 0, per_epoch):
                    if checkpoint is not None and (interrupts.checkpoint_asked() or time.monotonic() >= next_save):
                        save()
                        next_save = time.monotonic() + checkpoint.seconds
                    diverged = update.adapt(step)   # the adaptive step's estimate, when due
                    if diverged:
                        break
                    if step in sched.log_at:
                        if not log(step, epoch + i / per_epoch, update.base_lr(lr)):
                            diverged = why_diverged(step)
                            break
                        note_row(bar, rows[-1])
                    loss = update.loss(perm, i)
                    if not bool(torch.isfinite(loss)):
                        diverged = f"the training loss is {float(loss.detach())} at step {step} (epoch {epoch})"
                        break
                    update.prepare(loss, lr)
                    with interrupts.deferred():   # an interrupt waits for the step's end (a few microseconds)
                        changing = True
                        opt.step()
                        step += 1
                        changing = False
                        bar.advance()
            if not (rows and rows[-1]["step"] == step):   # the last step (already logged when it diverged there)
                if not log(step, step / per_epoch, update.base_lr(lr), validate=True) and not diverged:
                    diverged = why_diverged(step)
            if rows:   # the final line shows the last row of metrics.csv, not the one before it
                note_row(bar, rows[-1])
        with torch.no_grad():
            train_out = model(xt, ct).double().cpu().numpy()
            val_out = model(xv, cv).double().cpu().numpy()
    except (interrupts.Interrupted, KeyboardInterrupt):
        # a KeyboardInterrupt (library use without gbcli.interrupts) may land inside an update:
        # then the last periodic checkpoint stays the one to resume from
        if checkpoint is not None and not changing:
            save()
        raise
    return TrainResult(pd.DataFrame(rows), train_out, val_out, elapsed + time.perf_counter() - start, step, diverged,
                       resumed)
