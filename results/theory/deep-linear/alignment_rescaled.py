"""The gradient alignment of each finished point's final direction at its own scale and rescaled so
that its smallest training margin is 5 (the same direction, smaller margins): whether a low
alignment is the direction's or the loss weights' (paper 004's claim is asymptotic).

    python results/theory/deep-linear/alignment_rescaled.py results/theory/deep-linear results/theory/gln-inits
(needs the sweeps' points/, which git does not keep: rerun the sweeps first)."""

import sys
from pathlib import Path

import numpy as np
import torch
import yaml

from gbcli.config import validate
from gbcli.experiments.paper004 import gradient_alignment
from gbcli.runs.stages import load_trained, prepare

print("point,kind,degree,smallest_margin,second_minus_smallest,loss_weight_points,alignment,alignment_at_margin_5")
for sweep in sys.argv[1:]:
    for run in sorted(Path(sweep).glob("points/*/")):
        if not (run / "gd" / "model.pt").is_file():
            continue
        cfg = validate(yaml.safe_load((run / "gd" / "config.yaml").read_text()))
        problem = prepare(cfg)
        ds = problem.dataset
        net = load_trained(run, cfg, ds.dim)
        x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
        ctx = None if problem.ctx_train is None else torch.as_tensor(problem.ctx_train)
        with torch.no_grad():
            q = np.sort((y * net(x, ctx)).numpy())
        degree = cfg.model.homogeneity
        a, points = gradient_alignment(net, x, y, ctx, cfg.training.loss, spread=True)
        with torch.no_grad():
            for w in net.weights():
                w.mul_((q[0] / 5.0) ** (-1.0 / degree))
        a5 = gradient_alignment(net, x, y, ctx, cfg.training.loss)
        print(f"{run.name},{cfg.model.kind},{degree},{q[0]:.1f},{q[1] - q[0]:.2f},{points:.2f},{a:.4f},{a5:.4f}")
