"""Figure 1 per init scale: how far the trained net's decision boundary is from ANY linear one on the
61 x 61 plane grid of `output_grid.csv` (not only from the rule sign <w_bar - u_bar, x>): the smallest
fraction of grid points where sign f differs from sign(<d, x> + c) over directions d (0.05 deg steps)
and offsets c (only c = 0 without the bias feature: f is then 1-homogeneous), plus the number of sign
changes of f around the circle of radius R/2 (2 for a line through the disc)."""
import sys
from pathlib import Path
import numpy as np, pandas as pd, yaml
out = Path(sys.argv[1]); dest = Path(sys.argv[2])
rows = []
th = np.deg2rad(np.arange(0, 360, 0.05))
D = np.stack([np.cos(th), np.sin(th)], 1)
for d in sorted((out / "points").iterdir()):
    c = yaml.safe_load(open(d / "gd" / "config.yaml"))
    g = pd.read_csv(d / "gd" / "output_grid.csv")
    x, f = g[["x1", "x2"]].to_numpy(), g["f"].to_numpy()
    keep = np.abs(f) > 1e-9 * np.abs(f).max()
    x, s = x[keep], np.sign(f[keep])
    bias = bool(c["dataset"].get("bias", False))
    proj = x @ D.T                                    # points x directions
    r = np.abs(x).max()
    offs = np.linspace(-r, r, 241) if bias else np.array([0.0])
    best = 1.0
    for off in offs:
        best = min(best, float(np.mean(np.sign(proj + off) != s[:, None], axis=0).min()))
    # sign changes of f around a circle (interpolated from the grid: nearest grid point)
    n = int(round(np.sqrt(len(g)))); t = np.linspace(-np.abs(g["x1"]).max(), np.abs(g["x1"]).max(), n)
    F = g["f"].to_numpy().reshape(n, n)
    ang = np.deg2rad(np.arange(0, 360, 0.5)); rad = 0.5 * t.max()
    ix = np.abs(t[None] - (rad * np.cos(ang))[:, None]).argmin(1); iy = np.abs(t[None] - (rad * np.sin(ang))[:, None]).argmin(1)
    sc = np.sign(F[iy, ix]); changes = int(np.sum(sc != np.roll(sc, 1)))
    rows.append({"point": d.name, "init_scale": c["model"]["init_scale"], "bias": bias,
                 "best_linear_disagreement_grid": best, "sign_changes_circle_R/2": changes})
t = pd.DataFrame(rows).sort_values(["bias", "init_scale"])
t.to_csv(dest / "tables" / "boundary_by_init.csv", index=False)
print(t.to_string(index=False))
