"""Theory tables that rebuild networks from their configs (which `gbcli.experiments` may not do: the
config and the model registry import the experiments, so these live here, above both).

    python scripts/theory_tables.py sectors runs/theory/orthogonal-sectors   # tables/{sectors,balance,extremal}.csv
    python scripts/theory_tables.py remarks runs/theory/kkt-remarks          # tables/remarks.csv
    python scripts/theory_tables.py margin-bound runs/theory/margin-rates    # tables/margin_bound.csv (also -logistic)
    python scripts/theory_tables.py premise-seeds configs/theory/kkt-premise.yaml kaiming 40

`sectors`: paper 001's Lemmas 1-2 and eq. (9) on a sweep of two-layer ReLU nets over `training.epochs`;
`remarks`: paper 003's Remarks 3.1-3.2 and Theorem 5.1 next to their closed forms; `premise-seeds`:
the init seeds at which Theorem 3.2's premise holds (`gbcli.experiments.paper003.thm32_premise`).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from gbcli.experiments.paper001 import _cos, in_sweep_order
from gbcli.store.views import point_names
from gbcli.experiments.paper003 import thm32_premise
from gbcli.programs.nonconvex import Problem2
from gbcli.fs import layout
from gbcli.fs.layout import SweepDir
from gbcli.fs.safe import is_file, load_yaml, read_csv_untrusted, read_text_untrusted, read_untrusted, write_csv


# ------------------------------------------------------------------ issue 36: Lemmas 1-2 and eq. (9)

SECTOR_STARTS = 2000    # random starts of the search for the extremal directions (`extremal_directions`)
SECTOR_ITERS = 3000     # its projected (sub)gradient steps
SECTOR_LR = 0.02        # and their length


def classify_sectors(w1: np.ndarray, a: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each neuron's activation pattern on the training points (Lemma 2): `dead` (inactive on every
    point: it never moves again), `pos` (a_j > 0, active on exactly the positive points: sigma+),
    `neg` (a_j < 0, active on exactly the negative points: sigma-), `other` (not, or not yet, in an
    absorbing sector, or in one with the wrong output sign)."""
    act = (x @ w1.T) > 0                           # (n, H)
    pos, neg = y > 0, y < 0
    dead = ~act.any(0)
    on_pos = act[pos].all(0) & ~act[neg].any(0)
    on_neg = act[neg].all(0) & ~act[pos].any(0)
    return np.where(dead, "dead", np.where(on_pos & (a > 0), "pos", np.where(on_neg & (a < 0), "neg", "other")))


def extremal_directions(x: np.ndarray, y: np.ndarray, starts: int = SECTOR_STARTS, steps: int = SECTOR_ITERS,
                        lr: float = SECTOR_LR, seed: int = 0) -> pd.DataFrame:
    """Lemma 2 (one positive and one negative extremal direction): the local maxima (`max`) and minima
    (`min`) of G(w) = sum_i y_i relu(<w, x_i>) / n (eq. 12 up to the factor 1/2) on the unit sphere,
    found by projected (sub)gradient steps from `starts` random points; per kind, how many starts
    stayed in a dead sector (G = 0), the cosines of the others with their class mean, how many
    distinct directions (3 decimals) they reached and the spread of G there."""
    rng = np.random.default_rng(seed)
    mu = {1: x[y > 0].mean(0), -1: x[y < 0].mean(0)}
    rows = []
    for sign in (1, -1):
        w = rng.standard_normal((starts, x.shape[1]))
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        for _ in range(steps):
            act = (w @ x.T) > 0
            g = sign * (act * y) @ x / len(x)
            g -= (g * w).sum(1, keepdims=True) * w    # the tangent part
            w = w + lr * g
            w /= np.linalg.norm(w, axis=1, keepdims=True)
        value = (np.maximum(w @ x.T, 0) * y).sum(1) / len(x)
        moving = np.abs(value) > 1e-12                # starts that are not in a dead sector
        c = _cos(w, mu[sign])
        rows.append({"kind": "max" if sign > 0 else "min", "starts": starts, "dead_sector": int((~moving).sum()),
                     "reached": int(moving.sum()), "min_cos_with_class_mean": float(c[moving].min()),
                     "median_cos_with_class_mean": float(np.median(c[moving])),
                     "distinct_directions": int(len(np.unique(np.round(w[moving], 3), axis=0))),
                     "G_spread": float(np.ptp(value[moving]))})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ issue 36: Remarks 3.1 / 3.2 and Theorem 5.1, m = 4, 5

REMARK_RESTARTS = 20   # local-search starts around the closed-form limit of Remark 3.2 (`write_remarks_table`)


def two_point_svm(x: np.ndarray) -> np.ndarray:
    """min ||u|| s.t. <u, x_i> >= 1 for two points x (rows): one constraint active when that point's
    solution meets the other, else both."""
    best = None
    for i in range(2):
        u = x[i] / (x[i] @ x[i])
        if (x @ u).min() >= 1 - 1e-12:
            best = u if best is None or u @ u < best @ best else best
    if best is None:
        best = np.linalg.solve(x, np.ones(2))
    return best


# ------------------------------------------------------------------ issue 36: the explicit margin bound

BOUND_LATE_STEP = 3e4                                # `t_gap_*_late`: from this step on
BOUND_SLOPES = ((1e3, 1e5), (3e4, 1e5))              # the ranges of step of the log-log slopes of the gap


def _log_slope(t: np.ndarray, gap: np.ndarray, lo: float, hi: float) -> float:
    """The least-squares slope of log gap against log t over lo <= t <= hi (nan below 3 points)."""
    m = (t >= lo) & (t <= hi) & (gap > 0)
    return float(np.polyfit(np.log(t[m]), np.log(gap[m]), 1)[0]) if m.sum() >= 3 else float("nan")


def margin_bound_row(run: str, cfg: dict, m: pd.DataFrame) -> dict:
    """One point's row of `write_margin_bound`: its logged gap(t) = gamma - margin(w_t) (`margin_gap`)
    against the bound ln n / (t gamma); gamma from the logs (gap / (1 - margin_ratio))."""
    m = m[m["step"] > 0].sort_values("step")
    t, gap = m["step"].to_numpy(float), m["margin_gap"].to_numpy(float)
    ratio_m = m["margin_ratio"].to_numpy(float)
    gam = float(np.median((gap / (1 - ratio_m))[ratio_m != 1]))
    n = int(cfg["dataset"]["train_size"])
    bound = np.log(n) / (t * gam)
    ratio = gap / bound
    late = t >= BOUND_LATE_STEP
    row = {"loss": cfg["training"].get("loss", "logistic"), "run": run, "gamma": gam,
           "t_nontrivial": np.log(n) / gam ** 2, "logged_steps": len(t),   # the bound is below gamma from t_nontrivial on
           "violations": int((ratio > 1).sum()), "max_gap_over_bound": float(ratio.max()),
           "max_gap_over_bound_t": float(t[ratio.argmax()]),
           "final_gap": float(gap[-1]), "final_bound": float(bound[-1]),
           "final_margin_ratio": float(ratio_m[-1]),
           "t_gap_final": float(t[-1] * gap[-1]), "t_gap_min_late": float((t * gap)[late].min()),
           "t_gap_max_late": float((t * gap)[late].max())}
    for lo, hi in BOUND_SLOPES:
        row[f"slope_{lo:.0e}_{hi:.0e}".replace("e+0", "e")] = _log_slope(t, gap, lo, hi)
    return row


def kkt_residual(p2: Problem2, theta: np.ndarray) -> float:
    """||theta - sum_i lambda_i grad q_i(theta)|| / ||theta|| over lambda >= 0 on the points at the
    smallest margin (non-negative least squares): 0 at a KKT point of Problem 2."""
    from scipy.optimize import nnls

    q, jac = p2.margins_jac(theta)
    active = q <= q.min() * (1 + 1e-9)
    _, res = nnls(jac[active].T, theta)
    return float(res / np.linalg.norm(theta))


def _point_config(out_dir: Path, point: str) -> dict | None:
    path = SweepDir(out_dir).point(point).gd_config
    return load_yaml(read_text_untrusted(path)) if is_file(path) else None


def _first_layer_and_output(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """w1 (H x d) and the output weights a (H) of a two-layer ReLU net's `gd/model.pt` (loaded with
    weights_only: tensors and containers only)."""
    state = torch.load(io.BytesIO(read_untrusted(path)), weights_only=True, map_location="cpu")["state_dict"]
    return state["w1"].double().numpy(), state["w2"].double().numpy()[0]


def _sector_points(out_dir: Path) -> dict[tuple, list[tuple[int, str, dict]]]:
    """The points of a sweep of two-layer ReLU nets on orthogonally separable data (`dataset.name:
    orthogonal`, `model.kind: relu`) trained for two numbers of epochs or more, by (init, init scale):
    [(epochs, point, config)] by epochs; empty otherwise."""
    groups: dict[tuple, list[tuple[int, str, dict]]] = {}
    for p in in_sweep_order(point_names(out_dir), point_names(out_dir)):
        cfg = _point_config(out_dir, p)
        if (cfg is None or cfg["dataset"].get("name") != "orthogonal" or cfg["model"].get("kind") != "relu"
                or not is_file(SweepDir(out_dir).point(p).model)):
            return {}
        key = (cfg["model"].get("init"), cfg["model"].get("init_scale"))
        groups.setdefault(key, []).append((int(cfg["training"]["epochs"]), p, cfg))
    if not groups or any(len({e for e, _, _ in g}) < 2 for g in groups.values()):
        return {}
    return {k: sorted(g, key=lambda r: r[0]) for k, g in groups.items()}


def write_sector_tables(out_dir: str | Path) -> list[Path]:
    """For a sweep of two-layer ReLU nets on orthogonally separable data over `training.epochs`
    (`_sector_points`; the same seeds, so each point is the first epochs of the longest one): Lemmas 1-2
    and eq. (9) read from the trained weights. `tables/sectors.csv`: per init and epochs (0: the init,
    rebuilt from the config) the neurons in each sector (`classify_sectors`) and the median cosine of
    the live neurons with their class mean (by the sign of a_j); `tables/balance.csv`: at the init and
    the last epochs, max_j ||a_j| - ||w_j|| | / ||theta|| and the live neurons' largest and median
    relative gaps; `tables/extremal.csv`: `extremal_directions` on the training data, and whether every
    cross-class inner product is negative (the sectors are then "exactly one class active")."""
    from gbcli.config import validate                          # the config and the nets load torch modules
    from gbcli.runs.stages import build_model, dataset_of      # that import the registry

    out_dir = Path(out_dir)
    groups = _sector_points(out_dir)
    if not groups:
        return []
    sect, bal = [], []
    x = y = None
    for (init, scale), runs in groups.items():
        cfg = validate(runs[0][2])
        ds = dataset_of(cfg)
        x, y = ds.x_train.astype(float), ds.y_train.astype(float)
        batch = cfg.training.batch_size or len(x)
        init_state = build_model(cfg, ds.dim).state_dict()
        weights = [(0, init_state["w1"].double().numpy(), init_state["w2"].double().numpy()[0])]
        weights += [(e, *_first_layer_and_output(SweepDir(out_dir).point(p).model)) for e, p, _ in runs]
        last = weights[-1][0]
        for e, w1, a in weights:
            cls = classify_sectors(w1, a, x, y)
            mu = np.where((a > 0)[:, None], x[y > 0].mean(0), x[y < 0].mean(0))
            cm = np.array([_cos(w1[j], mu[j]) for j in range(len(a))])
            live = cls != "dead"
            label = f"{init} x {scale}"
            sect.append({"init": label, "epochs": e, "steps": e * -(-len(x) // batch), "dead": int((cls == "dead").sum()),
                         "pos": int((cls == "pos").sum()), "neg": int((cls == "neg").sum()),
                         "other": int((cls == "other").sum()),
                         "median_cos_class_mean_live": float(np.median(cm[live])) if live.any() else np.nan})
            if e in (0, last):
                theta = np.sqrt((a ** 2).sum() + (w1 ** 2).sum())
                wn = np.linalg.norm(w1, axis=1)
                gap = np.abs(np.abs(a) - wn)
                rel = gap / np.maximum(np.abs(a), wn)
                bal.append({"init": label, "epochs": e, "theta_norm": theta, "max_gap_over_theta": gap.max() / theta,
                            "max_rel_gap_live": float(rel[live].max()) if live.any() else np.nan,
                            "median_rel_gap_live": float(np.median(rel[live])) if live.any() else np.nan})
    ext = extremal_directions(x, y)
    ext["cross_class_products_all_negative"] = bool((x[y > 0] @ x[y < 0].T < 0).all())
    tables = out_dir / layout.TABLES
    write_csv(tables / "sectors.csv", pd.DataFrame(sect))
    write_csv(tables / "balance.csv", pd.DataFrame(bal))
    write_csv(tables / "extremal.csv", ext)
    return []



def premise_seeds(path: str | Path, init: str, count: int, start: int = 0, scan: int = 100_000) -> list[int]:
    """The first `count` values of model.init_seed (from `start`, at most `scan` tried) at which the network
    gb builds from the config `path` (its base values, grid and zip dropped, model.init = `init`) satisfies
    `thm32_premise` on the config's training points: seeds that sample Theorem 3.2 on its premise
    (python scripts/theory_tables.py premise-seeds CONFIG INIT COUNT)."""
    from gbcli.config import apply_preset, read_config, set_path, validate
    from gbcli.runs.stages import build_model, dataset_of

    raw = set_path({k: v for k, v in read_config(path).items() if k not in ("grid", "zip")}, ["model", "init"], init)
    x = dataset_of(validate(apply_preset(raw, str(path)), str(path))).x_train
    seeds = []
    for seed in range(start, start + scan):
        model = build_model(validate(apply_preset(set_path(raw, ["model", "init_seed"], seed), str(path))), x.shape[1])
        if thm32_premise(model.w1.detach().double().numpy(), model.w2[0].detach().double().numpy(), x):
            seeds.append(seed)
            if len(seeds) == count:
                break
    return seeds



def _construction(cfg: dict) -> str | None:
    """`thm32` for Theorem 3.2's net (two ReLU units on two points of the plane, both labelled +1),
    `thm51` for Theorem 5.1's (a diagonal net on x = (1, 1) from w_j(0) = (1, 1)), else None."""
    model, data = cfg["model"], cfg["dataset"]
    x, y = np.asarray(data.get("x") or [], float), list(data.get("y") or [])
    if model.get("kind") == "relu" and model.get("hidden_units") == 2 and x.shape == (2, 2) and y == [1, 1]:
        return "thm32"
    w = np.asarray((model.get("weights") or {}).get("w") or [], float)
    if model.get("kind") == "diagonal" and x.tolist() == [[1.0, 1.0]] and y == [1] and w.size and (w == 1).all():
        return "thm51"
    return None


def remark_row(cfg: dict, kkt: pd.Series, radii: list[float]) -> dict:
    """One construction's row of `write_remarks_table`: GD's limit and the searches (from its
    `tables/kkt.csv` row) next to the closed forms."""
    from gbcli.config import validate                  # the config and the nets load modules that
    from gbcli.runs.stages import build_model          # import the registry

    row = {"construction": cfg["name"], "steps": int(kkt["steps"]), "gd_norm_sq": kkt["gd_norm_sq"],
           "gd_kkt_residual": kkt["kkt_residual"], "global_found": kkt["global_norm_sq"],
           **{f"gd_best_eps_{e}": kkt[f"gd_best_norm_sq_eps_{e}"] for e in radii}}
    if _construction(cfg) == "thm51":
        m = int(cfg["model"]["depth"])
        row.update(closed_limit=2 * m * 2 ** (-2 / m), closed_global=float(m))
    else:
        x = np.asarray(cfg["dataset"]["x"], float)
        u = two_point_svm(x)
        split = 2 * sum(1 / np.linalg.norm(xi) for xi in x) if x[0] @ x[1] < 0 else np.inf
        cos = x[0] @ x[1] / np.linalg.norm(x[0]) / np.linalg.norm(x[1])
        row.update(closed_limit=2 * np.linalg.norm(u), closed_global=min(2 * np.linalg.norm(u), split),
                   angle_deg=float(np.degrees(np.arccos(np.clip(cos, -1, 1)))))
        c = validate(cfg)
        p2 = Problem2(c, build_model(c, 2), x, np.ones(2))
        s = np.sqrt(np.linalg.norm(u))
        theta = p2.to_margin_one(np.concatenate([s * u / np.linalg.norm(u), np.zeros(2), [s, 0.0]]))   # w1 rows, then v
        row["closed_kkt_residual"] = kkt_residual(p2, theta)
        for r in p2.local_search(theta, radii, restarts=REMARK_RESTARTS, seed=0):
            row[f"closed_best_eps_{r['eps']}"] = r["best_norm_sq"]
    row["ratio_norm_limit_over_global"] = float(np.sqrt(row["closed_limit"] / row["closed_global"]))
    return row


def write_remarks_table(out_dir: str | Path) -> list[Path]:
    """For a sweep whose points are all Theorem 3.2's or Theorem 5.1's construction (`_construction`)
    with a `tables/kkt.csv` (the `local-search` objective): `tables/remarks.csv`, per point GD's limit,
    its KKT residual and the searches next to the closed forms. Remark 3.1 (x1 = (1, c), x2 = (-1, c)):
    GD's limit ||theta~||^2 = 2 / c at margin 1, the optimum min(2 / c, 4 / sqrt(1 + c^2)) (one unit
    per point when x1.x2 < 0). Remark 3.2 (perturbed inputs): the limit puts one unit along
    u = argmin ||u|| s.t. <u, x_i> >= 1 (`two_point_svm`), ||theta~||^2 = 2 ||u||, the other unit dead;
    that closed-form limit is checked directly (`closed_kkt_residual`, and the local search around it,
    `closed_best_eps_*`, REMARK_RESTARTS starts). Theorem 5.1 (depth m): limit 2 m 2^(-2/m), optimum m."""
    out_dir = Path(out_dir)
    points = list(point_names(out_dir))
    cfgs = {p: load_yaml(read_text_untrusted(SweepDir(out_dir).point(p).gd_config))
            for p in points if is_file(SweepDir(out_dir).point(p).gd_config)}
    tables = {p: SweepDir(out_dir).point(p).root / layout.TABLES / "kkt.csv" for p in points}
    if not points or any(p not in cfgs or _construction(cfgs[p]) is None or not is_file(tables[p]) for p in points):
        return []
    rows = []
    for p in points:
        kkt = read_csv_untrusted(tables[p]).iloc[0]
        radii = [float(c.rsplit("_", 1)[1]) for c in kkt.index if c.startswith("gd_best_norm_sq_eps_")]
        rows.append(remark_row(cfgs[p], kkt, radii))
    write_csv(out_dir / layout.TABLES / "remarks.csv", pd.DataFrame(rows))
    return []


# the reports this experiment adds to `gb compare` (a run) and to a sweep's aggregation

def write_margin_bound(out_dir: str | Path) -> list[Path]:
    """For a sweep of linear predictors that track `margin` (the columns `margin_gap` and
    `margin_ratio` of `tables/training.csv`): `tables/margin_bound.csv`, per point the explicit bound
    margin(w_t) >= gamma - ln n / (t gamma) against the logged margins (the slides' gradient-flow
    bound for ln R, T '13 technique: with loss-normalized steps eta_t = 1 / R(w_t) a GD step is an
    Euler step of length 1 of dw/dt = -grad ln R, so t steps ~ time t; for coordinate descent the
    same argument in (l1, l_inf) gives gamma_1 - ln n / (t gamma_1); stated for w_0 = 0). Columns:
    the violations (gap above the bound), the largest gap / bound and its step, the final gap and
    bound, t gap(t) at the end and its range from BOUND_LATE_STEP on, and the log-log slopes of the gap."""
    out_dir = Path(out_dir)
    path = SweepDir(out_dir).tables / "training.csv"
    if not is_file(path):
        return []
    training = read_csv_untrusted(path)
    if not {"margin_gap", "margin_ratio", "point", "run", "step"} <= set(training.columns):
        return []
    rows = []
    for run, m in training.groupby("run"):
        cfg_path = SweepDir(out_dir).point(str(m["point"].iloc[0])).gd_config
        if not is_file(cfg_path):
            return []
        cfg = load_yaml(read_text_untrusted(cfg_path))
        if cfg["model"].get("kind") != "linear" or m["margin_gap"].isna().all():
            return []
        rows.append(margin_bound_row(str(run), cfg, m))
    if not rows:
        return []
    write_csv(out_dir / layout.TABLES / "margin_bound.csv", pd.DataFrame(rows))
    return []


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    if what == "premise-seeds":
        print(premise_seeds(args[0], args[1], int(args[2])))
    else:
        reports = {"sectors": write_sector_tables, "remarks": write_remarks_table, "margin-bound": write_margin_bound}
        for path in reports[what](args[0]):
            print(path)
