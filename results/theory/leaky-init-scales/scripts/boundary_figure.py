"""Figure 1-style panels per init scale: sign f over the input plane (f = 0 black, the rule
<w_bar - u_bar, x> = 0 dashed), the training points, and the units' directions (first two coordinates,
normalized: +v red, -v blue)."""
import sys
from pathlib import Path
import numpy as np, pandas as pd, yaml, torch
import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
out, dest = Path(sys.argv[1]), Path(sys.argv[2])
pts = pd.read_csv(out / "tables" / "points.csv")
scales = sorted(pts["model.init_scale"].unique())
fig, axes = plt.subplots(2, len(scales), figsize=(3.3 * len(scales), 6.8), constrained_layout=True)
for _, p in pts.iterrows():
    d = out / "points" / p["point"] / "gd"
    g = pd.read_csv(d / "output_grid.csv")
    n = int(round(np.sqrt(len(g))))
    X1, X2, F, R = (g[c].to_numpy().reshape(n, n) for c in ("x1", "x2", "f", "rule"))
    ax = axes[int(bool(p["dataset.bias"])), scales.index(p["model.init_scale"])]
    ax.contourf(X1, X2, np.sign(F), levels=[-2, 0, 2], colors=["#c6dbef", "#fcbba1"])
    ax.contour(X1, X2, F, levels=[0.0], colors="k", linewidths=1.6)
    ax.contour(X1, X2, R, levels=[0.0], colors="y", linewidths=1.0, linestyles="--")
    w1 = torch.load(d / "model.pt", map_location="cpu", weights_only=False)["state_dict"]["w1"].double().numpy()
    k = len(w1) // 2
    lim = np.abs(g["x1"]).max()
    for i, row in enumerate(w1):
        v = row[:2] / max(np.linalg.norm(row[:2]), 1e-300) * 0.9 * lim
        ax.plot([0, v[0]], [0, v[1]], color="r" if i < k else "b", lw=0.8, alpha=0.7)
    c = yaml.safe_load(open(d / "config.yaml"))
    ax.set(aspect="equal", xlim=(-lim, lim), ylim=(-lim, lim))
    ax.set_title(f"init x {p['model.init_scale']:g}, bias {'yes' if p['dataset.bias'] else 'no'}", fontsize=9)
fig.suptitle("leaky-init-scales: sign f over the plane after 20,000 SGD steps (batch 1). Black: f = 0; dashed yellow: "
             "<w_bar - u_bar, x> = 0;\nlines from the origin: each unit's direction in the plane (red +v, blue -v)",
             fontsize=10)
fig.savefig(dest / "figures" / "boundary_by_init.png", dpi=100)
