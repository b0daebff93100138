"""The adaptive normalized step (`training.adaptive_step`, gbcli.training.step.AdaptiveStep): its
keys are validated, its sharpness is the Hessian's largest eigenvalue, the base step it sets is
`fraction * 2 / sharpness * ||w||^2`, a run with it follows the fixed step's flow in fewer steps,
and an interrupted run resumes from its checkpoint (the estimate included) bit-identical."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from gbcli.config import load_config
from gbcli.errors import GbError
from gbcli.models.base import weight_norm
from gbcli.runs.stages import build_model, prepare, train_gd
from gbcli.store.identity import gd_manifest
from gbcli.training.loop import train
from gbcli.training.step import Step, sharpness
from gbcli.optimizers import SGD

from test_checkpoint import assert_same, interrupted_twin, one_thread  # noqa: F401 (one_thread: autouse, 1 thread)

GB = (sys.executable, "-c", "from gbcli.cli import main; main()")
# a tiny separable problem: 100 digits, a GLN of 4 units x 2 contexts, full batch, normalized step
TINY = {"name": "tiny", "dataset": {"name": "digits", "train_size": 100, "val_size": 100},
        "model": {"kind": "gln", "hidden_units": 4, "output_bias": False},
        "contexts": {"count": 2, "seed": 1, "median_init": True},
        "training": {"batch_size": None, "lr": 0.05, "step_rule": "homogeneous-normalized", "epochs": 1500,
                     "log_points": 40, "log_spacing": "log", "validation": "final", "checkpoint_seconds": 0}}
ADAPTIVE = "training.adaptive_step={every: 20, power_iters: 10}"


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def built(path: Path, *sets: str):
    cfg = load_config(path, list(sets))
    problem = prepare(cfg)
    torch.manual_seed(cfg.init_seed)
    return cfg, problem, build_model(cfg, problem.dataset.dim)


def trained(path: Path, *sets: str):
    cfg, problem, model = built(path, *sets)
    ds = problem.dataset
    res = train(model, cfg, ds.x_train, ds.y_train, problem.ctx_train, ds.x_val, ds.y_val, problem.ctx_val,
                progress=False)
    assert res.diverged == ""
    return model, res.metrics


def direction(model) -> np.ndarray:
    z = model.zeta().double().reshape(-1).numpy()
    return z / np.linalg.norm(z)


# ------------------------------------------------------------------ config


@pytest.mark.parametrize("sets,expect", [
    (["training.step_rule=constant"], "training.step_rule: is constant"),
    (["training.batch_size=32"], "training.batch_size: must be null"),
    (["training.momentum=0.9"], "training.momentum: must be 0"),
    (["training.adaptive_step.fraction=1.0"], "training.adaptive_step.fraction: input should be less than 1"),
    (["training.adaptive_step.fraction=0"], "training.adaptive_step.fraction: input should be greater than 0"),
    (["training.adaptive_step.every=0"], "training.adaptive_step.every: input should be greater than or equal to 1"),
    (["training.adaptive_step.power_iters=1.5"], "training.adaptive_step.power_iters: input should be a valid integer"),
    (["training.adaptive_step.max_growth=0.5"], "training.adaptive_step.max_growth: input should be greater than"),
    (["training.adaptive_step.iters=3"], "training.adaptive_step.iters: unknown key"),
])
def test_bad_adaptive_settings_are_refused_naming_the_key(tiny, sets, expect):
    with pytest.raises(GbError) as err:
        load_config(tiny, [ADAPTIVE, *sets])
    assert expect in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_a_bad_adaptive_step_with_exit_2_and_writes_nothing(tiny, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([*GB, "train-gd", str(tiny), "--out", str(out), "--set", ADAPTIVE,
                           "--set", "training.adaptive_step.fraction=2"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "training.adaptive_step.fraction" in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_a_good_adaptive_step_is_kept_with_its_defaults(tiny):
    a = load_config(tiny, ["training.adaptive_step={}"]).training.adaptive_step
    assert (a.every, a.power_iters, a.fraction, a.max_growth) == (100, 10, 0.5, 2.0)
    assert load_config(tiny).training.adaptive_step is None
    # it changes the trajectory: part of the training's identity when set (and absent when not:
    # tests/test_warm_start.py keeps the manifest of configs that do not use it)
    assert gd_manifest(load_config(tiny, [ADAPTIVE]))["config"] != gd_manifest(load_config(tiny))["config"]


# ------------------------------------------------------------------ the estimate


def hessian_top(model, objective) -> float:
    """The largest |eigenvalue| of the objective's Hessian, from the whole Hessian (one Hessian-
    vector product per coordinate, an independent computation from the power iteration)."""
    params = list(model.parameters())
    sizes = [p.numel() for p in params]
    grads = torch.autograd.grad(objective(), params, create_graph=True)
    flat = torch.cat([g.reshape(-1) for g in grads])
    rows = []
    for k in range(flat.numel()):
        rows.append(torch.cat([h.reshape(-1) for h in torch.autograd.grad(flat[k], params, retain_graph=True)]))
    hess = torch.stack(rows).double().numpy()
    assert hess.shape == (sum(sizes), sum(sizes))
    return float(np.abs(np.linalg.eigvalsh((hess + hess.T) / 2)).max())


def test_sharpness_is_the_largest_eigenvalue_and_sets_the_base_step(tmp_path):
    small = {**TINY, "model": {**TINY["model"], "hidden_units": 2}, "dataset": {**TINY["dataset"], "train_size": 40}}
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small))
    cfg, problem, model = built(path, ADAPTIVE.replace("10}", "300}"))
    ds = problem.dataset
    xt, yt = torch.tensor(ds.x_train, dtype=torch.float32), torch.tensor(ds.y_train, dtype=torch.float32)
    ct = torch.tensor(problem.ctx_train)
    opt = SGD(model.parameters(), lr=cfg.training.lr)
    step = Step(model, cfg, xt, yt, ct, opt, xt.shape[0])
    exact = hessian_top(model, step.full_objective)
    assert sharpness(model, step.full_objective, 300, seed=0) == pytest.approx(exact, rel=1e-3)
    assert step.adapt(0) == ""
    frac = cfg.training.adaptive_step.fraction
    assert step.adaptive.eta0 == pytest.approx(frac * 2 / exact * weight_norm(model) ** 2, rel=1e-3)
    loss = step.loss(None, 0)
    step.prepare(loss, cfg.training.lr)   # the optimizer's step: eta_0 / ||w||^2 = fraction * 2 / sharpness
    assert opt.param_groups[0]["lr"] == pytest.approx(frac * 2 / exact, rel=1e-3)


# ------------------------------------------------------------------ the flow


def test_the_adaptive_run_follows_the_fixed_flow_in_fewer_steps(tiny):
    """The fixed step's final normalized margin is reached by the adaptive run in at most a third of
    the steps, in the same direction (the predictors zeta within 3 degrees)."""
    fixed, fixed_rows = trained(tiny)
    target = float(fixed_rows["normalized_margin"].iloc[-1])
    assert target > 0   # separated: the flow is in its margin-maximizing phase
    _, rows = trained(tiny, ADAPTIVE)
    assert (rows["lr"].iloc[1:] != TINY["training"]["lr"]).all()   # the estimate replaced the base step
    reached = rows[rows["normalized_margin"] >= target]
    assert len(reached), "the adaptive run never reached the fixed run's margin"
    at = int(reached["step"].iloc[0])
    assert at <= TINY["training"]["epochs"] // 3
    adaptive, _ = trained(tiny, ADAPTIVE, f"training.epochs={at}")
    cos = float(direction(adaptive) @ direction(fixed))
    assert math.degrees(math.acos(min(1.0, cos))) < 3.0


def test_an_interrupted_adaptive_run_resumes_bit_identical(tmp_path, monkeypatch, tiny):
    """Cut between two estimates (step 30: the estimate of step 20 is in the checkpoint) the resumed
    run ends with the uninterrupted run's weights, metrics and predictions."""
    cfg = load_config(tiny, [ADAPTIVE, "training.epochs=60", "training.checkpoint_seconds=0.001"])
    ckpt = interrupted_twin(cfg, tmp_path, monkeypatch, 30, "after")
    state = torch.load(ckpt, weights_only=True)
    assert state["step"] == 30 and state["adaptive"]["estimated"]
    summary = train_gd(cfg, tmp_path / "cut", progress=False)
    assert summary["resumed_from_step"] == 30
    assert_same(tmp_path / "whole", tmp_path / "cut")
