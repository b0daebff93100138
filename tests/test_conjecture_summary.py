"""scripts/conjecture_summary.py, the numbers of results/conjecture/: the rate fit recovers a known
power law and its extrapolation, and the power iteration's top Hessian eigenvalue (the stable step
of the warm run) is the dense Hessian's, on a small GLN where the whole Hessian can be formed."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gbcli.config import load_config
from gbcli.runs.stages import build_model, prepare
from gbcli.training.losses import log_mean_loss

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("conjecture_summary", REPO / "scripts" / "conjecture_summary.py")
summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summary)


def _trajectory(slope: float, scale: float) -> pd.DataFrame:
    rows = []
    for seed, factor in ((1, 1.0), (2, 1.3)):
        for step in np.unique(np.logspace(2, 6, 40).astype(int)):
            rows.append({"seed": seed, "regime": "sgd", "train_size": 48000, "step": step, "train_error": 0.0,
                         "inconsistency_svm_gln": scale * factor * step ** slope})
    return pd.DataFrame(rows)


def test_the_rate_fit_recovers_a_known_power_law_and_where_it_reaches_the_targets():
    fit = summary.rate(_trajectory(-0.3, 0.2)).iloc[0]
    assert fit["slope"] == pytest.approx(-0.3, abs=1e-9) and fit["slope_se"] < 1e-9
    a = math.log10(0.2) + math.log10(1.3) / 2          # the two seeds' mean intercept
    assert fit["steps_to_0.005"] == pytest.approx(10 ** ((math.log10(0.005) - a) / -0.3), rel=1e-6)


def test_a_flat_inconsistency_never_reaches_the_targets():
    fit = summary.rate(_trajectory(0.0, 0.012)).iloc[0]
    assert fit["steps_to_0.005"] == float("inf") or fit["steps_to_0.005"] > 1e100


def test_unseparated_steps_are_not_fitted():
    traj = _trajectory(-0.3, 0.2).assign(train_error=0.01)
    assert "too few" in summary.rate(traj).iloc[0]["note"]


def test_the_power_iteration_finds_the_dense_hessians_top_eigenvalue():
    cfg = load_config(REPO / "configs" / "quickstart.yaml",
                      ["model.hidden_units=3", "dataset.train_size=60", "dataset.val_size=20", "model.output_bias=false"])
    problem = prepare(cfg)
    ds = problem.dataset
    torch.manual_seed(0)
    model = build_model(cfg, ds.dim).double()
    x, y = torch.tensor(np.array(ds.x_train, dtype=np.float64)), torch.tensor(np.array(ds.y_train, dtype=np.float64))
    ctx = torch.as_tensor(problem.ctx_train)
    log_r, lam = summary.top_eigenvalue(model, x, y, ctx, "logistic", iters=300)
    params = list(model.parameters())
    shapes = [p.shape for p in params]
    flat = torch.cat([p.detach().reshape(-1) for p in params])

    def f(theta):
        out, i = {}, 0
        for (name, _), shape in zip(model.named_parameters(), shapes):
            n = math.prod(shape)
            out[name] = theta[i:i + n].reshape(shape)
            i += n
        return log_mean_loss(y * torch.func.functional_call(model, out, (x, ctx)), "logistic")

    dense = torch.autograd.functional.hessian(f, flat)
    eig = torch.linalg.eigvalsh(dense)
    top = float(eig[eig.abs().argmax()])            # power iteration finds the largest in magnitude
    assert log_r == pytest.approx(float(f(flat)), rel=1e-12)
    assert lam == pytest.approx(top, rel=1e-4)
