"""Theorem 4.1 per init scale: per point of a leaky-init-scales sweep, the mean training loss, the worst
training point's loss (log(1 + exp(-min_n y_n f(x_n))), as in gbcli.experiments.paper002.plot_sweep_risk)
and the first logged step where every point's loss is below eps = 0.1 and where the training error is 0."""
import sys
from pathlib import Path
import numpy as np, pandas as pd, yaml
from gbcli.experiments.paper002 import _max_point_loss, RISK_EPS

out = Path(sys.argv[1]); dest = Path(sys.argv[2]) if len(sys.argv) > 2 else out
rows, curves = [], {}
for d in sorted((out / "points").iterdir()):
    m = pd.read_csv(d / "gd" / "metrics.csv")
    c = yaml.safe_load(open(d / "gd" / "config.yaml"))
    worst = _max_point_loss(m, c["training"].get("loss", "logistic"))
    below, fitted = m["step"][worst < RISK_EPS], m["step"][m["train_error"] == 0]
    s, bias = c["model"]["init_scale"], bool(c["dataset"].get("bias", False))
    curves[(bias, s)] = (m["step"], m["train_loss"], worst)
    rows.append({"point": d.name, "init_scale": s, "bias": bias, "batch_size": c["training"]["batch_size"],
                 "lr": c["training"]["lr"], "steps": int(m["step"].iloc[-1]),
                 "initial_train_loss": m["train_loss"].iloc[0], "initial_max_point_loss": float(worst.iloc[0]),
                 "train_loss": m["train_loss"].iloc[-1], "max_point_loss": float(worst.iloc[-1]),
                 "first_step_all_below_eps": below.min() if len(below) else None,
                 "first_step_train_error_0": fitted.min() if len(fitted) else None, "eps": RISK_EPS})
t = pd.DataFrame(rows).sort_values(["bias", "init_scale"])
(dest / "tables").mkdir(parents=True, exist_ok=True)
t.to_csv(dest / "tables" / "risk_by_init.csv", index=False)
print(t.drop(columns=["point"]).to_string(index=False))
import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), constrained_layout=True)
scales = sorted({k[1] for k in curves})
for (bias, s), (step, mean, worst) in sorted(curves.items()):
    sty = dict(color=f"C{scales.index(s)}", ls="--" if bias else "-", label=f"init x {s:g}" + (", bias" if bias else ""))
    axes[0].plot(step[step > 0], mean[step > 0], **sty); axes[1].plot(step[step > 0], worst[step > 0], **sty)
axes[1].axhline(RISK_EPS, color="k", lw=0.6, ls=":")
for ax, yl in zip(axes, ("mean training loss", "largest loss of a training point")):
    ax.set(xscale="log", yscale="log", xlabel="SGD step (batch 1)", ylabel=yl)
axes[0].legend(fontsize=7)
fig.suptitle("Theorem 4.1 at several init scales (dotted: eps = 0.1)", fontsize=10)
(dest / "figures").mkdir(parents=True, exist_ok=True)
fig.savefig(dest / "figures" / "risk_by_init.png", dpi=110)
