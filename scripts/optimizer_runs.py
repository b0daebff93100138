"""One optimizer on the linear teacher of tests/test_optimizers.py (8 points in 20 dimensions), through
`gb train-gd` with the margin and agreement instruments; prints the tracked margin ratio (in the
optimizer's geometry) and the inconsistency with its program at each logged step.

    python scripts/optimizer_runs.py OPTIMIZER LR STEPS [--eps E] [--mirror-p P] [--milestones 250,500,...]
        [--lr-decay F] [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile

import pandas as pd

from gbcli.config import validate
from gbcli.runs.stages import train_gd
from gbcli.runs.threads import limit_threads

TEACHER = {"name": "linear-teacher", "n_samples": 300, "train_size": 8, "val_size": 200, "dim": 20, "margin": 0.3,
           "max_norm": 1.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("optimizer")
    ap.add_argument("lr", type=float)
    ap.add_argument("steps", type=int)
    ap.add_argument("--eps", type=float)
    ap.add_argument("--mirror-p", type=float)
    ap.add_argument("--milestones", help="training.lr_milestones, comma-separated steps (a decreasing step)")
    ap.add_argument("--lr-decay", type=float, default=0.7, help="training.lr_decay at each milestone")
    ap.add_argument("--out", help="the run directory (default: a temporary one)")
    a = ap.parse_args()
    training = {"batch_size": None, "epochs": a.steps, "loss": "exponential", "lr": a.lr, "optimizer": a.optimizer,
                "step_rule": "loss-normalized",
                "track": ["margin", "agreement"], "log_points": 6}
    training.update({k: v for k, v in (("eps", a.eps), ("mirror_p", a.mirror_p)) if v is not None})
    if a.milestones:
        training.update(lr_milestones=[int(m) for m in a.milestones.split(",")], lr_decay=a.lr_decay)
    limit_threads(1)
    out = a.out or tempfile.mkdtemp(prefix="gb-optimizer-")
    train_gd(validate({"dataset": TEACHER, "model": {"kind": "linear"}, "training": training}), out, progress=False)
    print(pd.read_csv(f"{out}/gd/metrics.csv")[["step", "margin_ratio", "inconsistency"]].to_string(index=False))


if __name__ == "__main__":
    main()
