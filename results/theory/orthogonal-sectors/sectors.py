"""Paper 001, Lemmas 1-2 and eq. (9), issue 36: the early phase and balancedness, read from trained weights.

For each init of configs/theory/untested-orthogonal-sectors.yaml the net is trained by gb's own
`train_gd` for E = 0 (init), 1, 5, 20, 100 and 500 epochs (10 steps per epoch; the same seeds, so each
run is the first E epochs of the 500-epoch run), and every neuron's activation pattern on the 500
training points is classified:
  dead   inactive on every training point (sigma <= 0: it never moves again),
  pos    a_j > 0 and active on exactly the positive points (Lemma 2's sigma+),
  neg    a_j < 0 and active on exactly the negative points (sigma-),
  other  anything else (not yet in an absorbing sector, or in one with the wrong output sign).
Balancedness (eq. 9 and Lemma A.4): max_j ||a_j| - ||w_j|| | / ||theta|| and per-neuron relative gaps.
Lemma 2 (one positive and one negative extremal direction): projected gradient ascent / descent of
G(w) = sum_i y_i relu(<w, x_i>) / n (eq. 12 up to the factor 1/2: -l'_i(0) = y_i / 2 for the logistic loss) on the unit sphere
from 2000 random starts; the maxima found are listed with their cosine to the class means.

    .venv/bin/python results/theory/untested-001/sectors.py [RUN_ROOT]   (default runs/theory/untested-001-sectors)
Writes results/theory/untested-001/tables/{sectors,balance,extremal}.csv.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml

from gbcli.config import validate
from gbcli.runs.stages import build_model, dataset_of, train_gd

HERE = Path(__file__).resolve().parent
CONFIG = HERE.parents[2] / "configs" / "theory" / "untested-orthogonal-sectors.yaml"
EPOCHS = (0, 1, 5, 20, 100, 500)


def configs() -> list[tuple[str, dict]]:
    raw = yaml.safe_load(CONFIG.read_text())
    zip_ = raw.pop("zip")
    out = []
    for init, scale in zip(zip_["model.init"], zip_["model.init_scale"]):
        c = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
        c["model"] = {**raw["model"], "init": init, "init_scale": scale}
        c["name"] = f"{raw['name']}-{init}-{scale}"
        out.append((f"{init} x {scale}", c))
    return out


def classify(w1: np.ndarray, a: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    act = (x @ w1.T) > 0                           # (n, H)
    pos, neg = y > 0, y < 0
    dead = ~act.any(0)
    on_pos = act[pos].all(0) & ~act[neg].any(0)
    on_neg = act[neg].all(0) & ~act[pos].any(0)
    return np.where(dead, "dead", np.where(on_pos & (a > 0), "pos", np.where(on_neg & (a < 0), "neg", "other")))


def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a @ b) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b) + 1e-300)


def extremal(x: np.ndarray, y: np.ndarray, starts: int = 2000, steps: int = 3000, lr: float = 0.02, seed: int = 0):
    """Local maxima (sign +1) and minima (-1) of G on the sphere found by projected (sub)gradient steps."""
    rng = np.random.default_rng(seed)
    mu = {1: x[y > 0].mean(0), -1: x[y < 0].mean(0)}
    rows = []
    for sign in (1, -1):
        w = rng.standard_normal((starts, x.shape[1]))
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        for _ in range(steps):
            act = (w @ x.T) > 0
            g = sign * (act * y) @ x / len(x)
            g -= (g * w).sum(1, keepdims=True) * w    # tangent part
            w = w + lr * g
            w /= np.linalg.norm(w, axis=1, keepdims=True)
        G = (np.maximum(w @ x.T, 0) * y).sum(1) / len(x)
        moving = np.abs(G) > 1e-12                    # starts that are not in a dead sector (G = 0 there)
        c = cos(w, mu[sign])
        rows.append({"kind": "max" if sign > 0 else "min", "starts": starts, "dead_sector": int((~moving).sum()),
                     "reached": int(moving.sum()), "min_cos_with_class_mean": float(c[moving].min()),
                     "median_cos_with_class_mean": float(np.median(c[moving])),
                     "distinct_directions": int(len(np.unique(np.round(w[moving], 3), axis=0))),
                     "G_spread": float(np.ptp(G[moving]))})
    return pd.DataFrame(rows)


def main(root: Path) -> None:
    sect, bal = [], []
    x = y = None
    for label, c in configs():
        for e in EPOCHS:
            cfg = validate({**c, "training": {**c["training"], "epochs": max(e, 1)}})
            ds = dataset_of(cfg)
            x, y = ds.x_train.astype(float), ds.y_train.astype(float)
            if e == 0:
                model = build_model(cfg, ds.dim)
            else:
                out = root / f"{c['name']}-e{e}"
                train_gd(cfg, out, progress=False)
                sd = torch.load(out / "gd" / "model.pt", weights_only=True)["state_dict"]
                model = None
            if model is not None:
                sd = {k: v for k, v in model.state_dict().items()}
            w1 = sd["w1"].double().numpy()
            a = sd["w2"].double().numpy()[0]
            cls = classify(w1, a, x, y)
            mu = np.where((a > 0)[:, None], x[y > 0].mean(0), x[y < 0].mean(0))
            cm = np.array([cos(w1[j], mu[j]) for j in range(len(a))])
            live = cls != "dead"
            sect.append({"init": label, "epochs": e, "steps": 10 * e, "dead": int((cls == "dead").sum()),
                         "pos": int((cls == "pos").sum()), "neg": int((cls == "neg").sum()),
                         "other": int((cls == "other").sum()),
                         "median_cos_class_mean_live": float(np.median(cm[live])) if live.any() else np.nan})
            if e in (0, 500):
                theta = np.sqrt((a ** 2).sum() + (w1 ** 2).sum())
                wn = np.linalg.norm(w1, axis=1)
                gap = np.abs(np.abs(a) - wn)
                bal.append({"init": label, "epochs": e, "theta_norm": theta, "max_gap_over_theta": gap.max() / theta,
                            "max_rel_gap_live": float((gap / np.maximum(np.abs(a), wn))[live].max()) if live.any() else np.nan,
                            "median_rel_gap_live": float(np.median((gap / np.maximum(np.abs(a), wn))[live])) if live.any() else np.nan})
    tab = HERE / "tables"
    tab.mkdir(exist_ok=True)
    pd.DataFrame(sect).to_csv(tab / "sectors.csv", index=False)
    pd.DataFrame(bal).to_csv(tab / "balance.csv", index=False)
    cross = (x[y > 0] @ x[y < 0].T)
    ext = extremal(x, y)
    ext["cross_class_products_all_negative"] = bool((cross < 0).all())
    ext.to_csv(tab / "extremal.csv", index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(pd.DataFrame(sect).to_string(index=False))
        print(pd.DataFrame(bal).to_string(index=False))
        print(ext.to_string(index=False))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs/theory/untested-001-sectors"))
