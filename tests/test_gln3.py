"""The three-layer GLN (gbcli/models/gln3.py) on tiny instances: its output is the context-dependent
linear predictor beta = sum_k w3_k sum_h W2[k, c2_k][h] W1[h, c1_h], of degree 3 in the weights,
and GD with homogeneous-normalized steps approaches a KKT point of its max-margin problem."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from gbcli.config import validate
from gbcli.errors import GbError
from gbcli.runs.stages import build_model, prepare, train_gd


def config(**training):
    return validate({"dataset": {"name": "digits", "train_size": 60, "val_size": 100},
                     "model": {"kind": "gln3", "hidden_units": 3}, "contexts": {"count": 2, "seed": 1},
                     "training": {"batch_size": None, "epochs": 5, "log_points": 2, **training}})


def test_output_is_the_global_context_predictor_of_degree_three():
    cfg = config()
    problem = prepare(cfg)
    net = build_model(cfg, problem.dataset.dim).double()
    x = torch.tensor(problem.dataset.x_train)
    ctx = torch.as_tensor(problem.ctx_train)
    assert ctx.shape == (60, 6)                    # H contexts per layer, two layers
    w1, w2, w3 = (w.detach().numpy() for w in net.weights())
    h, c = 3, 2
    with torch.no_grad():
        out = net(x, ctx).numpy()
        for n in range(5):
            c1, c2 = ctx[n, :h].numpy(), ctx[n, h:].numpy()
            beta = sum(w3[0, k] * w2[k * c + c2[k], j] * w1[j * c + c1[j]] for k in range(h) for j in range(h))
            assert out[n] == pytest.approx(float(beta @ x[n].numpy()), rel=1e-10)
        for w in net.weights():
            w.mul_(1.5)
        np.testing.assert_allclose(net(x, ctx).numpy(), out * 1.5 ** 3, rtol=1e-10)


def test_gd_approaches_a_kkt_point_of_the_nonconvex_max_margin_problem(tmp_path):
    cfg = config(epochs=1500, lr=20.0, loss="logistic", step_rule="homogeneous-normalized",
                 track=["kkt", "grad-alignment"], log_points=8, log_spacing="log")
    summary = train_gd(cfg, tmp_path, progress=False)
    m = pd.read_csv(tmp_path / "gd" / "metrics.csv")
    sep = m[m["kkt_residual"].notna()]           # defined once every training margin is positive
    assert summary["train_error"] == 0 and len(sep) >= 3
    assert sep["kkt_residual"].iloc[-1] < 0.5 * sep["kkt_residual"].iloc[0]
    assert m["normalized_margin"].iloc[-1] > sep["normalized_margin"].iloc[0] > 0
    assert m["grad_alignment"].iloc[-1] > m["grad_alignment"].iloc[0]


def test_gln3_has_no_convex_program_to_match():
    with pytest.raises(GbError, match="matching convex program"):
        validate({"model": {"kind": "gln3"}, "training": {"track": ["margin"]}})
