"""results/conjecture/ (issue 37): where gradient descent on the deep GLN goes at N = 48,000, from
the two long-run sweeps (configs/conjecture-sgd.yaml, configs/conjecture-normalized.yaml).

    python scripts/conjecture_summary.py runs/conjecture-sgd runs/conjecture-normalized [--out results/conjecture]
    python scripts/conjecture_summary.py --cost runs/conjecture-sgd runs/conjecture-normalized   # the tracking's cost
    python scripts/conjecture_summary.py --span runs/conjecture-sgd runs/conjecture-normalized   # outside the data's span
    python scripts/conjecture_summary.py --sharpness runs/conjecture-sgd   # the stable normalized step there
    python scripts/conjecture_summary.py --restate    # rates, drop.csv, span.csv, warm.png, README.md from the tables

Reads each point's metric rows: `gd/metrics.csv` when its training has finished, else the rows of
its last training checkpoint (`gd/checkpoint.pt`, read tensors-only, never unpickled), so the tables
can be made while the runs go on. Writes
- tables/trajectory.csv: one row per (seed, regime, logged step), the convergence columns;
- tables/decades.csv: the values at the last logged step of each decade of steps (10, 100, ...)
  and at the last logged step;
- tables/runs.csv: per point, how far it got (steps done: its last checkpoint's while it trains)
  and its cost (seconds per epoch and per step, wall time of the training, so they include any
  time the machine gave to other work);
- figures/trajectory.png: the curves against steps on a log axis, three seeds, sgd and normalized;
- then, from the committed tables (`--restate` alone remakes these): tables/rate_seeds.csv, one
  power law log value = a + b log t per run, quantity (the inconsistency with svm-gln, the margin
  ratio's gap to 1) and window (`after_drop`: from the run's last lr drop, read from the configs;
  `last_decade`), with the slope's ordinary error and the lag-1 autocorrelation of the residuals;
  tables/rate.csv, per regime, size, H, C, quantity and window, the seeds' mean slope with a
  t-interval over the seeds, the fitted value one decade past the data (never further) and whether
  the target lies within that decade, beside the common-slope fit earlier versions used;
  tables/drop.csv, the disagreeing validation points before the drop and at the end;
  tables/span.csv with svm-l2's angle in its own geometry (from tables/last_angles.csv);
  figures/warm.png, the warm regime against its own full-batch steps; and README.md, rendered from
  scripts/conjecture_readme.md with every number read from the tables.
The rates, README and warm figure are remade only when the tables they need are there
(fig2_trajectory.csv, last_angles.csv, span.csv: --small, scripts/conjecture_angles.py, --span).
With `--small runs/conjecture-fig2` (the N = 2000 counterparts, every fig2 cell with H >= 20), also
tables/fig2_trajectory.csv, tables/fig2_decades.csv (mean over the seeds per H, C and decade) and
figures/fig2.png.
"""

from __future__ import annotations

import argparse
import io
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from gbcli.runs.sweep import expand
from gbcli.fs import layout
from gbcli.store.identity import point_id
from gbcli.fs.safe import atomic_write_bytes, atomic_write_text, read_json, write_csv
from gbcli.training.loop import ROW_TYPES, read_checkpoint


def checkpoint_progress(path: Path) -> tuple[pd.DataFrame, float, int] | None:
    """What a run still training has done so far: the metric rows before its last checkpoint, the
    training seconds and the step at it (None without a usable checkpoint; read tensors-only)."""
    state = read_checkpoint(path)[0] or {}
    rows, seconds, step = state.get("rows"), state.get("seconds"), state.get("step")
    plain = isinstance(rows, list) and all(isinstance(r, dict) and all(
        isinstance(k, str) and isinstance(v, ROW_TYPES) for k, v in r.items()) for r in rows)
    if not (plain and isinstance(seconds, float) and type(step) is int):
        return None
    return pd.DataFrame(rows), seconds, step


COLUMNS = ["inconsistency_svm_gln", "inconsistency_svm_l2", "train_inconsistency_svm_gln",
           "train_inconsistency_svm_l2", "margin_ratio_svm_gln", "margin_ratio_svm_l2", "angle_svm_gln",
           "angle_svm_l2", "train_loss", "train_error", "val_error", "normalized_margin"]


def regime(cfg: dict) -> str:
    """sgd, normalized (full batch from the seeded init) or warm (full batch, normalized, from another
    run's network: `training.init_from`, configs/conjecture-warm.yaml; its steps count from the warm start)."""
    t = cfg["training"]
    if t.get("step_rule", "constant") == "constant":
        return "sgd"
    return "warm" if t.get("init_from") else "normalized"


def points(sweeps: list[Path]) -> pd.DataFrame:
    """Every point's rows, with seed, regime and whether its training has finished."""
    frames, runs = [], []
    for sweep in sweeps:
        for point_cfg in expand(sweep / layout.CONFIG)[1]:   # the sweep's own copy of its config
            point = sweep / "points" / point_id(point_cfg)
            cfg = point_cfg.model_dump(mode="json")
            seed, reg = int(cfg["contexts"]["seed"]), regime(cfg)
            gd = point / "gd"
            if (gd / "summary.json").is_file() and (gd / "metrics.csv").is_file():
                rows, finished = pd.read_csv(gd / "metrics.csv"), True
                summary = read_json(gd / "summary.json")
                seconds, done = float(summary["seconds"]), int(summary["steps"])
            else:
                got = checkpoint_progress(gd / "checkpoint.pt")
                if got is None:
                    print(f"{point}: no metric rows yet (no checkpoint)", file=sys.stderr)
                    continue
                (rows, seconds, done), finished = got, False
            if rows.empty:
                continue
            epochs, n = cfg["training"]["epochs"], cfg["dataset"]["train_size"]
            batch = cfg["training"].get("batch_size") or n
            per_epoch = -(-n // batch)
            runs.append({"point": point.name, "sweep": sweep.name, "seed": seed, "regime": reg,
                         "finished": finished, "steps_planned": epochs * per_epoch, "steps_done": done,
                         "epochs_done": done / per_epoch, "last_logged_step": int(rows.iloc[-1]["step"]),
                         "train_seconds": seconds, "seconds_per_epoch": seconds * per_epoch / max(done, 1),
                         "seconds_per_step": seconds / max(done, 1)})
            rows = rows.assign(seed=seed, regime=reg, finished=finished, hidden_units=cfg["model"]["hidden_units"],
                               contexts=cfg["contexts"]["count"], train_size=n, sweep=sweep.name)
            frames.append(rows[["sweep", "seed", "regime", "hidden_units", "contexts", "train_size", "step", "epoch",
                                *[c for c in COLUMNS if c in rows], "finished"]])
    if not frames:
        sys.exit("no point has logged rows yet")
    return pd.concat(frames, ignore_index=True), pd.DataFrame(runs)


def decades(traj: pd.DataFrame) -> pd.DataFrame:
    """The row at the last logged step <= 10^k, for each k a run reached."""
    out = []
    keys = [k for k in ("sweep", "seed", "regime", "train_size", "hidden_units", "contexts") if k in traj]
    for _, g in traj.groupby(keys):
        g = g.sort_values("step")
        for k in range(1, int(math.log10(max(g.step.max(), 1))) + 1):
            r = g[g.step <= 10 ** k].iloc[-1]
            out.append({"decade": 10 ** k, **r.drop("finished").to_dict()})
        if g.step.max() > 10 ** int(math.log10(max(g.step.max(), 1))):   # and where the run is now
            out.append({"decade": int(g.iloc[-1].step), **g.iloc[-1].drop("finished").to_dict()})
    return pd.DataFrame(out)


def draw_small(traj: pd.DataFrame, path: Path) -> None:
    """N = 2000: the inconsistency with svm-gln (solid) and svm-l2 (dashed) per (H, C), seeds' mean."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.8), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, c in zip(axes, sorted(traj.contexts.unique())):
        for h, color in zip(sorted(traj.hidden_units.unique()), ("tab:blue", "tab:orange", "tab:green")):
            g = traj[(traj.contexts == c) & (traj.hidden_units == h) & (traj.step > 0)]
            m = g.groupby("step")[["inconsistency_svm_gln", "inconsistency_svm_l2"]].mean()
            ax.plot(m.index, m.inconsistency_svm_gln, "-", color=color, label=f"H = {h}, svm-gln")
            ax.plot(m.index, m.inconsistency_svm_l2, "--", color=color, label=f"H = {h}, svm-l2")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("step (log)")
        ax.set_title(f"C = {c}", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("inconsistency with the program (validation)")
    fig.suptitle("N = 2000, SGD for 10x the paper schedule: mean over context seeds 1-3", fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def draw(traj: pd.DataFrame, path: Path) -> None:
    from matplotlib.figure import Figure

    panels = (("inconsistency_svm_gln", "inconsistency with svm-gln (validation)", "log"),
              ("inconsistency_svm_l2", "inconsistency with svm-l2 (validation)", "log"),
              ("margin_ratio_svm_gln", "normalized margin / svm-gln's best", "linear"),
              ("angle_svm_gln", "angle to svm-gln's predictor (degrees)", "log"))
    fig = Figure(figsize=(13, 8.5), layout="constrained")
    axes = fig.subplots(2, 2).ravel()
    colors = {1: "tab:blue", 2: "tab:orange", 3: "tab:green"}
    styles = {"sgd": "-", "normalized": "--", "warm": ":"}
    for ax, (col, label, scale) in zip(axes, panels):
        for (seed, reg), g in traj.groupby(["seed", "regime"]):
            g = g[g.step > 0]
            ax.plot(g.step, g[col], styles[reg], color=colors.get(seed, "k"), marker=".", ms=3,
                    label=f"{reg}, context seed {seed}")
        ax.set_xscale("log")
        ax.set_yscale(scale)
        if col == "margin_ratio_svm_gln":
            ax.axhline(1, color="k", lw=0.6)
            ax.set_ylim(max(-1.0, float(traj[col].min()) - 0.05), 1.05)
        ax.set_xlabel("step (log)")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=8)
    fig.suptitle("deep GLN, H = 50, C = 2, N = 48,000: gradient descent against the certified max-margin programs",
                 fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def draw_warm(traj: pd.DataFrame, geometry: pd.DataFrame, path: Path) -> None:
    """The warm regime against its own full-batch steps (they do not count SGD's): both programs'
    inconsistency, margin ratio and angle, from the SGD network it starts at (step 0). The logged
    angle to svm-l2 of these runs is the raw-coordinate one (the instrument measured it so until
    2026-11-27), drawn dashed and labelled raw; svm-l2's angle in its own geometry is known only at
    the last step (`geometry`: tables/last_angles.csv's warm rows with train_size) and drawn there as a star."""
    from matplotlib.figure import Figure

    sizes = sorted(traj.train_size.unique())
    fig = Figure(figsize=(13, 4.2 * len(sizes)), layout="constrained")
    grid = fig.subplots(len(sizes), 3, squeeze=False)
    panels = ((("inconsistency_svm_gln", "inconsistency_svm_l2"), "inconsistency (validation)", "log"),
              (("margin_ratio_svm_gln", "margin_ratio_svm_l2"), "normalized margin / the program's best", "linear"),
              (("angle_svm_gln", "angle_svm_l2"), "angle to the program's predictor (degrees)", "linear"))
    for axes, n in zip(grid, sizes):
        _warm_row(axes, traj[traj.train_size == n], geometry[geometry.train_size == n], panels, n)
    fig.suptitle("normalized full-batch GD started from the SGD network: solid svm-gln, dashed svm-l2\n"
                 "angle to svm-l2: dashed in raw coordinates (as logged), star in svm-l2's own geometry "
                 "(known at the last step only)", fontsize=11)
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=110, format="png")
    atomic_write_bytes(path, buffer.getvalue())


def _warm_row(axes, traj: pd.DataFrame, geometry: pd.DataFrame, panels, n: int) -> None:
    for ax, (cols, label, scale) in zip(axes, panels):
        for seed, g in traj.groupby("seed"):
            g = g.sort_values("step")
            x = g.step.clip(lower=0.5)   # step 0 (the SGD network) at 0.5 on the log axis
            for col, style in zip(cols, ("-", "--")):
                program = "svm-gln" if col.endswith("svm_gln") else "svm-l2"
                raw = " (raw coordinates)" if col == "angle_svm_l2" else ""
                lines = ax.plot(x, g[col], style, marker=".", ms=3, label=f"{program}{raw}, seed {seed}")
            if col == "angle_svm_l2":
                for r in geometry[geometry.seed == seed].itertuples():
                    ax.plot([r.step], [r.angle_svm_l2], "*", ms=12, color=lines[0].get_color(),
                            label=f"svm-l2, its own geometry (last step), seed {seed}")
        ax.set_xscale("log")
        ax.set_yscale(scale)
        if "margin" in cols[0]:
            ax.axhline(1, color="k", lw=0.6)
        ax.set_xlabel("full-batch steps after the SGD run (log; step 0 at 0.5)")
        ax.set_title(f"N = {n:,}: {label}", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)


def top_eigenvalue(model, x, y, ctx, loss: str, iters: int = 30) -> tuple[float, float]:
    """log R of `model` on (x, y, ctx) and the largest eigenvalue of its Hessian in the parameters, by
    power iteration on Hessian-vector products from a seeded random start."""
    import torch

    from gbcli.training.losses import log_mean_loss

    params = [p for p in model.parameters() if p.requires_grad]
    log_r = log_mean_loss(y * model(x, ctx), loss)
    grads = torch.autograd.grad(log_r, params, create_graph=True)
    gen = torch.Generator().manual_seed(0)
    v = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]
    lam = float("nan")
    for _ in range(iters):
        norm = math.sqrt(sum(float((u * u).sum()) for u in v))
        v = [u / norm for u in v]
        hv = torch.autograd.grad(grads, params, grad_outputs=v, retain_graph=True)
        lam = sum(float((a * b).sum()) for a, b in zip(hv, v))
        v = [h.detach() for h in hv]
    return float(log_r.detach()), lam


def sharpness(sweep: Path, iters: int = 30) -> None:
    """The largest eigenvalue of the Hessian of log R (the full training set) at each finished point's
    network, by power iteration on Hessian-vector products (float64), and the largest stable base step
    of `homogeneous-normalized` there: GD on log R with step lr / ||w||^2 is stable while
    lr * lambda / ||w||^2 < 2, so lr < 2 ||w||^2 / lambda."""
    import torch

    from gbcli.models.base import weight_norm
    from gbcli.runs.stages import load_trained, prepare

    torch.set_num_threads(1)
    for cfg in expand(sweep / layout.CONFIG)[1]:
        point = sweep / "points" / point_id(cfg)
        if not (point / "gd" / "summary.json").is_file():
            continue
        problem = prepare(cfg)
        ds = problem.dataset
        model = load_trained(point, cfg, ds.dim)   # float64
        x, y = torch.tensor(np.array(ds.x_train, dtype=np.float64)), torch.tensor(np.array(ds.y_train, dtype=np.float64))
        ctx = None if problem.ctx_train is None else torch.as_tensor(problem.ctx_train)
        log_r, lam = top_eigenvalue(model, x, y, ctx, cfg.training.loss, iters)
        w2 = weight_norm(model) ** 2
        print(f"{point.name} (H = {cfg.model.hidden_units}, C = {cfg.contexts.count}, seed {cfg.contexts.seed}): log R = {log_r:.4f}, lambda_max = {lam:.4g}, "
              f"||w||^2 = {w2:.4g}: homogeneous-normalized is stable for lr < {2 * w2 / lam:.3g}")


def cost(sweep: Path, repeats: int = 5) -> None:
    """What the tracking adds at this sweep's size: the seconds of one logged step (the training
    and validation sets evaluated) with and without `convergence`, median of `repeats`, the
    references taken from the sweep's solve cache; times the logged steps, over the training time
    of its runs (tables/runs.csv must be there: run the summary first)."""
    import time

    import torch

    from gbcli.runs.stages import build_model, make_tracker, prepare
    from gbcli.store.cache import SolveCache
    from gbcli.training.loop import MetricLog, tensors

    torch.set_num_threads(1)   # as the sweep's workers
    cfg = expand(sweep / layout.CONFIG)[1][0]
    problem = prepare(cfg)
    ds = problem.dataset
    tracker = make_tracker(cfg, problem, SolveCache(sweep / "solves"))
    model = build_model(cfg, ds.dim)
    xt, yt, xv, yv = tensors("cpu", ds.x_train, ds.y_train, ds.x_val, ds.y_val)
    ct, cv = tensors("cpu", problem.ctx_train, problem.ctx_val, dtype=torch.long)
    seconds = {}
    for name, tr in (("without", None), ("with", tracker)):
        log = MetricLog(cfg, xt, yt, ct, xv, yv, cv, tr)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            log.log(model, 0, 0.0, cfg.training.lr, validate=True)
            times.append(time.perf_counter() - t0)
        seconds[name] = float(np.median(times))
    extra = seconds["with"] - seconds["without"]
    print(f"N = {ds.x_train.shape[0]:,}: one logged step {seconds['without']:.3f} s, with convergence "
          f"{seconds['with']:.3f} s (+{extra:.3f} s); {cfg.training.log_points} logged steps in a run")
    runs = pd.read_csv(Path("results/conjecture/tables/runs.csv"))
    for _, r in runs[runs.sweep == sweep.name].iterrows():
        whole = r.seconds_per_step * r.steps_planned
        print(f"  {r.point} ({r.regime}, seed {r.seed}): {cfg.training.log_points} x {extra:.3f} s = "
              f"{cfg.training.log_points * extra:.1f} s of about {whole:,.0f} s of training "
              f"({100 * cfg.training.log_points * extra / whole:.2f}%)")


def span(sweep: Path) -> pd.DataFrame:
    """For each finished point: how much of the network's predictor lies outside the span of the
    training inputs, which gradient descent never moves (the first layer's weights there keep their
    initial values, scaled by w2), and the angle to svm-gln with that part left out (the programs put
    nothing there: their solutions are combinations of the training inputs). svm-gln's norm sees
    every coordinate, so zeta's coordinates are its geometry; svm-l2's angle in its own geometry is
    joined from tables/last_angles.csv by `restate` (span_restated), not measured here in raw coordinates."""
    from gbcli.runs.stages import build_model, load_checkpoint, make_tracker, prepare
    from gbcli.store.cache import SolveCache

    out, problem = [], None
    for cfg in expand(sweep / layout.CONFIG)[1]:
        gd = sweep / "points" / point_id(cfg) / "gd"
        if not (gd / "summary.json").is_file():
            continue
        problem = prepare(cfg)
        tracker = make_tracker(cfg, problem, SolveCache(sweep / "solves"))
        model = build_model(cfg, problem.dataset.dim)
        model.load_state_dict(load_checkpoint(gd / "model.pt")["state_dict"])
        zeta = model.zeta().double().numpy()
        x = np.asarray(problem.dataset.x_train, dtype=np.float64)
        vals, vecs = np.linalg.eigh(x.T @ x)
        basis = vecs[:, vals > 1e-9 * vals.max()]   # the span of the training inputs
        inside = zeta @ basis @ basis.T
        row = {"point": point_id(cfg), "seed": cfg.contexts.seed, "regime": regime(cfg.model_dump(mode="json")),
               "train_size": cfg.dataset.train_size, "hidden_units": cfg.model.hidden_units,
               "contexts": cfg.contexts.count, "null_dimensions": int(x.shape[1] - basis.shape[1]),
               "share_outside_span": float(((zeta - inside) ** 2).sum() / (zeta ** 2).sum())}
        for prog, ref in tracker.against.items():
            if prog != "svm-gln":
                continue
            z, o = inside.ravel(), ref["zeta"].ravel()
            row[f"angle_in_span_{prog.replace('-', '_')}"] = math.degrees(math.acos(
                min(1.0, float(z @ o / (np.linalg.norm(z) * np.linalg.norm(o))))))
        out.append(row)
    return pd.DataFrame(out)


# ---------------------------------------------------------------------------------------------
# From the committed tables (issue 47): the rates, fitted per seed after the last lr drop, with
# seed-level intervals; the README rendered from scripts/conjecture_readme.md with every number it
# quotes read from the tables.

REPO = Path(__file__).resolve().parents[1]
SWEEPS = ("conjecture-sgd", "conjecture-normalized", "conjecture-warm", "conjecture-fig2", "conjecture-fig2-warm")
CONFIDENCE = 0.95
FITTED = {"inconsistency_svm_gln": 0.005, "margin_gap_svm_gln": 0.001}   # quantity -> target it is read against
GROUP = ["sweep", "regime", "train_size", "hidden_units", "contexts"]   # with the seed: one run


def schedules(configs: Path = REPO / "configs") -> pd.DataFrame:
    """One row per point of the conjecture sweeps' configs: its regime, size, seed, steps a run plans,
    validation size and the step of its last lr drop (0 without one): the milestone epoch times the
    steps of an epoch, where the step after which every step is taken at the final lr begins."""
    rows = []
    for name in SWEEPS:
        for cfg in expand(configs / f"{name}.yaml")[1]:
            t, n = cfg.training, cfg.dataset.train_size
            per_epoch = -(-n // (t.batch_size or n))
            rows.append({"sweep": name, "point": point_id(cfg), "regime": regime(cfg.model_dump(mode="json")),
                         "train_size": n, "val_size": cfg.dataset.val_size, "hidden_units": cfg.model.hidden_units,
                         "contexts": cfg.contexts.count, "seed": cfg.contexts.seed, "batch_size": t.batch_size or n,
                         "epochs": t.epochs, "lr": t.lr, "lr_decay": t.lr_decay, "log_points": t.log_points,
                         "steps_planned": t.epochs * per_epoch,
                         "drop_epoch": max(t.lr_milestones, default=0),
                         "drop_step": max(t.lr_milestones, default=0) * per_epoch})
    return pd.DataFrame(rows)


def with_sweep(traj: pd.DataFrame, sched: pd.DataFrame) -> pd.DataFrame:
    """The trajectory with each row's sweep: tables written before the `sweep` column was logged
    get it from the configs (their regime, size, H, C and seed name one point of one sweep; a row
    that names none, or more than one, is refused)."""
    if "sweep" in traj and traj.sweep.notna().all():
        return traj
    keys = [k for k in GROUP if k != "sweep"] + ["seed"]
    meta = sched[[*keys, "sweep"]]
    if meta.duplicated(keys).any():
        raise ValueError("two conjecture sweeps have a point with the same regime, size, H, C and seed: "
                         "the trajectory needs its `sweep` column")
    got = traj.drop(columns=["sweep"], errors="ignore").merge(meta, on=keys, how="left", validate="many_to_one")
    if got.sweep.isna().any():
        raise ValueError("trajectory rows that no conjecture config names: "
                         + str(got[got.sweep.isna()][keys].drop_duplicates().to_dict("records")))
    return got


def fitted_values(rows: pd.DataFrame, quantity: str) -> pd.Series:
    if quantity == "margin_gap_svm_gln":
        return 1 - rows.margin_ratio_svm_gln
    return rows[quantity]


def fit_seed(steps: np.ndarray, values: np.ndarray) -> dict:
    """log10 value = a + b log10 step by least squares: the slope, its ordinary standard error (which
    assumes independent residuals), the lag-1 autocorrelation of the residuals, sum e_t e_t+1 /
    sum e_t^2 (NaN below 4 points: three residuals of a line are always (1, -2, 1) c, r1 = -2/3)."""
    x, y = np.log10(steps.astype(float)), np.log10(values.astype(float))
    b, a = np.polyfit(x, y, 1)
    e = y - (a + b * x)
    sxx = float(((x - x.mean()) ** 2).sum())
    se = math.sqrt(float((e ** 2).sum()) / (len(x) - 2) / sxx) if len(x) > 2 else math.nan
    ee = float((e ** 2).sum())
    lag1 = float((e[1:] * e[:-1]).sum()) / ee if len(x) >= 4 and ee > 0 else math.nan
    return {"slope": float(b), "intercept": float(a), "slope_se_ols": se, "lag1": lag1}


def _windows(g: pd.DataFrame, drop: int) -> dict[str, float]:
    """The first step of each fit window of one run: `after_drop` (runs with an lr drop inside their
    logged steps) from the drop on, where every step is taken at the final lr; `last_decade` from a
    tenth of the last step on."""
    last = int(g.step.max())
    windows = {"last_decade": last / 10}
    return {"after_drop": drop, **windows} if 0 < drop < last else windows


def _in_window(g: pd.DataFrame, quantity: str, start: float) -> tuple[pd.DataFrame, pd.Series]:
    """The run's logged steps >= start with the training set separated and a positive value."""
    rows = g[(g.step >= start) & (g.train_error == 0)].sort_values("step")
    vals = fitted_values(rows, quantity)
    return rows[vals > 0], vals[vals > 0]


def _runs(traj: pd.DataFrame, sched: pd.DataFrame):
    drops = sched.groupby([*GROUP, "seed"]).drop_step.max()
    for key, g in traj.groupby([*GROUP, "seed"]):
        yield key, g, int(drops.get(key, 0))


def rate_seeds(traj: pd.DataFrame, sched: pd.DataFrame) -> pd.DataFrame:
    """Per run, quantity and window (`_windows`): log10 value = a + b log10 step over the window's
    steps with the training set separated (`fit_seed`), and the fitted value at the run's last step."""
    out = []
    for key, g, drop in _runs(traj, sched):
        last = int(g.step.max())
        for quantity in FITTED:
            for window, start in _windows(g, drop).items():
                rows, vals = _in_window(g, quantity, start)
                row = {**dict(zip([*GROUP, "seed"], key)), "quantity": quantity, "window": window,
                       "drop_step": drop, "start": float(start), "last_step": last, "points": len(rows)}
                if len(rows) >= 3:
                    fit = fit_seed(rows.step.to_numpy(), vals.to_numpy())
                    row.update(fit, first_step=int(rows.step.iloc[0]), value_first=float(vals.iloc[0]),
                               value_last=float(vals.iloc[-1]),
                               fitted_last=10 ** (fit["intercept"] + fit["slope"] * math.log10(last)))
                out.append(row)
    return pd.DataFrame(out)


def pooled(traj: pd.DataFrame, sched: pd.DataFrame) -> pd.DataFrame:
    """The fit this page used before issue 47, for comparison: one slope for all seeds of a group,
    each seed its own intercept, least squares over the pooled window rows, with the ordinary
    standard error (which takes the residuals as independent) and each seed's lag-1 autocorrelation
    of its residuals under the common slope (sum e_t e_t+1 / sum e_t^2), which says they are not."""
    parts: dict[tuple, list] = {}
    for key, g, drop in _runs(traj, sched):
        for quantity in FITTED:
            for window, start in _windows(g, drop).items():
                rows, vals = _in_window(g, quantity, start)
                if len(rows) >= 3:
                    parts.setdefault((*key[:-1], quantity, window), []).append(
                        (key[-1], np.log10(rows.step.to_numpy(float)), np.log10(vals.to_numpy(float))))
    out = []
    for key, runs in parts.items():
        x = np.concatenate([r[1] for r in runs])
        y = np.concatenate([r[2] for r in runs])
        which = np.concatenate([[i] * len(r[1]) for i, r in enumerate(runs)])
        design = np.column_stack([x] + [(which == i).astype(float) for i in range(len(runs))])
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        e = y - design @ coef
        dof = max(len(y) - design.shape[1], 1)
        cov = float((e ** 2).sum()) / dof * np.linalg.inv(design.T @ design)
        lag1 = []
        for i in range(len(runs)):
            r = e[which == i]
            lag1.append(float((r[1:] * r[:-1]).sum() / (r ** 2).sum()) if len(r) >= 4 else math.nan)
        out.append({**dict(zip([*GROUP, "quantity", "window"], key)), "pooled_slope": float(coef[0]),
                    "pooled_slope_se": math.sqrt(cov[0, 0]), "pooled_lag1": " ".join(f"{v:.3f}" for v in lag1)})
    return pd.DataFrame(out)


def rate(seeds: pd.DataFrame, pooled_fit: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per regime, size, H, C, quantity and window: the seeds' slopes as independent draws (each seed's
    autocorrelated residuals leave its own slope unbiased, but its ordinary error too small), so the
    seed-level standard error is their standard deviation / sqrt(seeds) and the interval a Student t
    over seeds - 1 degrees of freedom (none for one seed). Read forward at most one decade: the
    seeds' mean fitted value at ten times the last step (with the interval's slopes), and the step at
    which the straight line reaches the target with `target_within_decade` saying whether that lies
    within one decade past the data (if not, no estimate the data support)."""
    from scipy.stats import t as student

    out = []
    fitted = seeds.dropna(subset=["slope"]) if "slope" in seeds else seeds.iloc[:0]
    for key, g in seeds.groupby([*GROUP, "quantity", "window"]):
        row = dict(zip([*GROUP, "quantity", "window"], key))
        f = fitted[(fitted[[*GROUP, "quantity", "window"]] == pd.Series(row)).all(axis=1)]
        row.update(seeds=" ".join(str(s) for s in f.seed), n_seeds=len(f), confidence=CONFIDENCE,
                   target=FITTED[row["quantity"]], last_step=int(g.last_step.max()))
        if f.empty:
            out.append({**row, "note": "fewer than 3 logged steps in the window with the training set separated"})
            continue
        b = float(f.slope.mean())
        row.update(slope=b, slope_min=float(f.slope.min()), slope_max=float(f.slope.max()),
                   lag1_min=float(f.lag1.min()), lag1_max=float(f.lag1.max()))
        if len(f) >= 2:
            se = float(f.slope.std(ddof=1)) / math.sqrt(len(f))
            half = float(student.ppf(0.5 + CONFIDENCE / 2, len(f) - 1)) * se
            row.update(slope_se=se, slope_lo=b - half, slope_hi=b + half)
        else:
            row.update(note="one seed: no seed-level interval")
        last, now = row["last_step"], float(f.fitted_last.mean())
        row.update(fitted_last=now, decade_past=10 * last, at_decade_past=now * 10 ** b)
        if "slope_lo" in row:
            row.update(at_decade_past_lo=now * 10 ** row["slope_lo"], at_decade_past_hi=now * 10 ** row["slope_hi"])
        decades_on = (math.log10(row["target"]) - math.log10(now)) / b if b < 0 else math.inf
        line = last * 10 ** decades_on if decades_on < 300 else math.inf   # a slope of about 0: never
        row.update(steps_to_target_line=line, target_within_decade=bool(line <= 10 * last))
        out.append(row)
    frame = pd.DataFrame(out)
    if pooled_fit is not None and not pooled_fit.empty:
        frame = frame.merge(pooled_fit, on=[*GROUP, "quantity", "window"], how="left", validate="one_to_one")
    return frame


def drop_counts(traj: pd.DataFrame, sched: pd.DataFrame) -> pd.DataFrame:
    """Per run with an lr drop: the validation points on which GD and svm-gln (and svm-l2) disagree at
    the last logged step before the drop and at the run's last logged step."""
    meta = sched.groupby([*GROUP, "seed"])[["drop_step", "val_size"]].max()
    out = []
    for key, g in traj.groupby([*GROUP, "seed"]):
        if key not in meta.index:
            continue
        drop, val = (int(v) for v in meta.loc[key])
        g = g.sort_values("step")
        before = g[g.step < drop]
        if drop == 0 or before.empty or g.step.max() <= drop:
            continue
        b, e = before.iloc[-1], g.iloc[-1]
        out.append({**dict(zip([*GROUP, "seed"], key)), "drop_step": drop, "val_size": val,
                    "step_before": int(b.step), "step_end": int(e.step),
                    **{f"disagree_{p}_{w}": int(round(r[f"inconsistency_{p}"] * val))
                       for p in ("svm_gln", "svm_l2") for w, r in (("before", b), ("end", e))}})
    return pd.DataFrame(out)


def span_restated(span_frame: pd.DataFrame, last: pd.DataFrame) -> pd.DataFrame:
    """tables/span.csv with svm-l2's angle in its own geometry: the raw-coordinate in-span angle to
    svm-l2 (what --span wrote before the instrument measured svm-l2 in its form) is dropped, and the
    whole predictor's angle to svm-l2 in the form's inner product at the same final network
    (tables/last_angles.csv, by point) is joined as `angle_svm_l2`."""
    frame = span_frame.drop(columns=["angle_in_span_svm_l2", "angle_svm_l2"], errors="ignore")
    return frame.merge(last[["point", "angle_svm_l2"]], on="point", how="left", validate="one_to_one")


def restate(out: Path) -> dict[str, pd.DataFrame]:
    """Everything derived from the committed tables of `out`: tables/rate_seeds.csv, rate.csv,
    drop.csv, span.csv (svm-l2 in its geometry), figures/warm.png and README.md."""
    tables = out / "tables"
    read = {name: pd.read_csv(tables / f"{name}.csv") for name in
            ("trajectory", "fig2_trajectory", "decades", "fig2_decades", "runs", "last_angles", "span")}
    sched = schedules()
    traj = with_sweep(pd.concat([read["trajectory"], read["fig2_trajectory"]], ignore_index=True), sched)
    seeds = rate_seeds(traj, sched)
    made = {"rate_seeds": seeds, "rate": rate(seeds, pooled(traj, sched)), "drop": drop_counts(traj, sched),
            "span": span_restated(read["span"], read["last_angles"])}
    for name, frame in made.items():
        write_csv(tables / f"{name}.csv", frame)
    warm = traj[traj.regime == "warm"]
    if not warm.empty:
        draw_warm(warm, warm_last_angles(read["last_angles"], sched), out / "figures" / "warm.png")
    atomic_write_text(out / "README.md", render(TEMPLATE.read_text(), facts(out)))
    return made


def warm_last_angles(last: pd.DataFrame, sched: pd.DataFrame) -> pd.DataFrame:
    """tables/last_angles.csv's warm rows with their size (from the point's config)."""
    got = last.merge(sched[["point", "regime", "train_size"]], on="point", how="inner", validate="one_to_one")
    return got[got.regime == "warm"]


# The README: scripts/conjecture_readme.md with {{name}} placeholders, each filled from `facts`.
TEMPLATE = REPO / "scripts" / "conjecture_readme.md"
PLACEHOLDER = re.compile(r"\{\{([a-z0-9_]+)\}\}")
NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?")


def render(template: str, values: dict[str, str]) -> str:
    missing = sorted({m for m in PLACEHOLDER.findall(template) if m not in values})
    if missing:
        raise KeyError(f"the README template names facts no table gives: {', '.join(missing)}")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def prose(template: str) -> str:
    """The template's own words: placeholders, fenced code blocks and inline code (commands, paths,
    config keys) taken out."""
    text = re.sub(r"^```.*?^```", "", template, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    return PLACEHOLDER.sub("", text)


def unbacked_numbers(template: str, allowed: set[float]) -> list[str]:
    """Numbers written into the template's prose that are not settings of the conjecture configs
    (sizes, H, C, seeds, epochs, lr, ...): every other number must come from a table by a placeholder."""
    bad = []
    for token in NUMBER.findall(prose(template)):
        value = float(token.replace(",", ""))
        if not any(math.isclose(value, a, rel_tol=1e-12) for a in allowed):
            bad.append(token)
    return bad


def config_constants(sched: pd.DataFrame) -> set[float]:
    cols = ["train_size", "val_size", "hidden_units", "contexts", "seed", "batch_size", "epochs", "lr", "lr_decay",
            "log_points", "steps_planned", "drop_epoch", "drop_step"]
    return {float(v) for c in cols for v in sched[c].unique()}


def _pct(x: float, digits: int = 2) -> str:
    return f"{100 * x:.{digits}f}%"


def _signed(x: float, digits: int = 3) -> str:
    return f"{x:+.{digits}f}"


def _sci(x: float) -> str:
    mant, exp = f"{x:.2e}".split("e")
    return f"{mant}e{int(exp)}"


def _span(values, fmt) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo} to {hi}" if lo[0] in "+-" else f"{lo}-{hi}"


def _each(values, fmt) -> str:
    return " / ".join(fmt(v) for v in values)


def _row(frame: pd.DataFrame, **eq) -> pd.Series:
    hit = frame[np.logical_and.reduce([frame[k] == v for k, v in eq.items()])]
    if len(hit) != 1:
        raise LookupError(f"{len(hit)} rows for {eq}")
    return hit.iloc[0]


def _closer(traj: pd.DataFrame) -> tuple[int, int, pd.DataFrame]:
    """Logged steps after the first two decades at which svm-gln is strictly closer than svm-l2."""
    late = traj[traj.step >= 100]
    closer = late.inconsistency_svm_gln < late.inconsistency_svm_l2
    return int(closer.sum()), len(late), late[~closer]


def facts(out: Path) -> dict[str, str]:
    """Every number results/conjecture/README.md quotes, read from out/tables/*.csv (and the configs'
    settings), formatted as it is quoted."""
    tables = out / "tables"
    t = {p.stem: pd.read_csv(p) for p in sorted(tables.glob("*.csv"))}
    seeds, fit, runs, la = t["rate_seeds"], t["rate"], t["runs"], t["last_angles"]
    sched = schedules()
    traj, small = with_sweep(t["trajectory"], sched), with_sweep(t["fig2_trajectory"], sched)
    v: dict[str, str] = {}
    sgd = traj[traj.sweep == "conjecture-sgd"]
    norm = traj[traj.sweep == "conjecture-normalized"]
    warm48 = traj[traj.sweep == "conjecture-warm"]
    warm2 = traj[traj.sweep == "conjecture-fig2-warm"]
    small = small[small.sweep == "conjecture-fig2"]
    big, little = int(sgd.train_size.max()), int(small.train_size.max())
    v.update(n_big=f"{big:,}", n_small=f"{little}", val_big=f"{int(_row(sched, sweep='conjecture-sgd', seed=1).val_size):,}")

    # svm-gln against svm-l2
    for name, frame in (("sgd", sgd), ("norm", norm), ("warm48", warm48), ("warm2", warm2), ("fig2", small)):
        c, n, exc = _closer(frame)
        v[f"closer_{name}"], v[f"logged_{name}"], v[f"exceptions_{name}"] = f"{c}", f"{n}", f"{len(exc)}"
    _, _, exc = _closer(sgd)
    v["exceptions_sgd_list"] = "; ".join(
        f"seed {int(r.seed)}'s step {int(r.step):,} (train error {_pct(r.train_error, 0)}, the inconsistencies "
        f"{_pct(r.inconsistency_svm_gln, 1)} and {_pct(r.inconsistency_svm_l2, 1)})" for r in exc.itertuples())
    _, _, exc = _closer(small)
    v["exceptions_fig2_last_step"] = f"{int(exc.step.max()):,}"
    lasts = pd.concat([traj, small]).sort_values("step").groupby([*GROUP, "seed"]).tail(1)
    v["last_closer"] = f"{int((lasts.inconsistency_svm_gln < lasts.inconsistency_svm_l2).sum())}"
    v["last_runs"] = f"{len(lasts)}"

    # SGD at N = 48,000: the end of the runs
    end = sgd.sort_values("step").groupby("seed").tail(1).sort_values("seed")
    la_sgd = la[la.sweep == "conjecture-sgd"].sort_values("seed")
    v.update(sgd_end_inc_gln=_each(end.inconsistency_svm_gln, _pct), sgd_end_inc_l2=_each(end.inconsistency_svm_l2, _pct),
             sgd_end_ratio_gln=_each(end.margin_ratio_svm_gln, lambda x: f"{x:.2f}"),
             sgd_end_ratio_l2=_each(end.margin_ratio_svm_l2, lambda x: f"{x:.2f}"),
             sgd_end_angle_gln=_each(end.angle_svm_gln, lambda x: f"{x:.1f}"),
             sgd_end_angle_l2=_each(la_sgd.angle_svm_l2, lambda x: f"{x:.1f}"),
             sgd_end_angle_l2_raw=_each(la_sgd.angle_svm_l2_recorded, lambda x: f"{x:.1f}"))

    # SGD at N = 48,000: the rate after the lr drop and over the last decade
    key = dict(sweep="conjecture-sgd", quantity="inconsistency_svm_gln")
    after, dec = _row(fit, **key, window="after_drop"), _row(fit, **key, window="last_decade")
    per_after = seeds[(seeds.sweep == "conjecture-sgd") & (seeds.quantity == key["quantity"]) & (seeds.window == "after_drop")].sort_values("seed")
    per_dec = seeds[(seeds.sweep == "conjecture-sgd") & (seeds.quantity == key["quantity"]) & (seeds.window == "last_decade")].sort_values("seed")
    v.update(sgd_drop=f"{int(per_after.drop_step.iloc[0]):,}",
             sgd_after_points=_span(per_after.points, str), sgd_after_first=f"{int(per_after.first_step.min()):,}",
             sgd_after_slopes=_each(per_after.slope, _signed), sgd_after_mean=_signed(after.slope),
             sgd_after_lo=_signed(after.slope_lo), sgd_after_hi=_signed(after.slope_hi),
             sgd_after_zero="includes 0" if after.slope_lo < 0 < after.slope_hi else "excludes 0",
             conf=f"{100 * after.confidence:.0f}%",
             sgd_dec_slopes=_each(per_dec.slope, _signed), sgd_dec_lag1=_each(per_dec.lag1, lambda x: f"{x:.2f}"),
             sgd_dec_se_ols=_span(per_dec.slope_se_ols, lambda x: f"{x:.3f}"),
             sgd_dec_se=f"{dec.slope_se:.3f}", sgd_dec_lo=_signed(dec.slope_lo), sgd_dec_hi=_signed(dec.slope_hi),
             sgd_dec_start=f"{int(per_dec.first_step.min()):,}",
             sgd_dec_zero="includes 0" if dec.slope_lo < 0 < dec.slope_hi else "excludes 0",
             sgd_pooled_slope=_signed(dec.pooled_slope), sgd_pooled_se=f"{dec.pooled_slope_se:.4f}",
             sgd_pooled_lag1=_each([float(x) for x in dec.pooled_lag1.split()], lambda x: f"{x:.2f}"),
             sgd_decade_past=_sci(after.decade_past), sgd_last=_sci(after.last_step),
             sgd_at_decade_past=_pct(after.at_decade_past), sgd_at_decade_past_lo=_pct(after.at_decade_past_lo),
             sgd_at_decade_past_hi=_pct(after.at_decade_past_hi), sgd_fitted_last=_pct(after.fitted_last),
             target_inc=_pct(after.target, 1))
    drops = t["drop"][t["drop"].sweep == "conjecture-sgd"].sort_values("seed")
    v.update(sgd_step_before=f"{int(drops.step_before.iloc[0]):,}",
             sgd_disagree=", ".join(f"{int(r.disagree_svm_gln_before)} -> {int(r.disagree_svm_gln_end)}"
                                    for r in drops.itertuples()))
    gap = seeds[(seeds.sweep == "conjecture-sgd") & (seeds.quantity == "margin_gap_svm_gln") & (seeds.window == "after_drop")].sort_values("seed")
    v["sgd_gap_after_slopes"] = _each(gap.slope, _signed)
    v["sgd_ratio_before_end"] = ", ".join(
        f"{1 - r.value_first:.3f} -> {1 - r.value_last:.3f}" for r in gap.itertuples())

    # the normalized run from the init
    ns = norm.sort_values("step")
    low = ns.loc[ns.margin_ratio_svm_gln.idxmin()]
    nrun = _row(runs, sweep="conjecture-normalized", seed=1)
    v.update(norm_r0=f"{ns.margin_ratio_svm_gln.iloc[0]:.2f}", norm_rmin=f"{low.margin_ratio_svm_gln:.2f}",
             norm_rmin_step=f"{int(low.step):,}", norm_rlast=f"{ns.margin_ratio_svm_gln.iloc[-1]:.2f}",
             norm_last_step=f"{int(ns.step.iloc[-1]):,}", norm_train_error=_pct(ns.train_error.iloc[-1], 1),
             norm_inc_gln=_pct(ns.inconsistency_svm_gln.iloc[-1], 1), norm_inc_l2=_pct(ns.inconsistency_svm_l2.iloc[-1], 1),
             norm_done=f"{int(nrun.steps_done):,}", norm_planned=f"{int(nrun.steps_planned):,}",
             norm_s_step=f"{nrun.seconds_per_step:.2f}")

    # warm at N = 48,000
    w = warm48.sort_values("step")
    first = w[w.step <= 1000].iloc[-1]
    r0, r_end = w.margin_ratio_svm_gln.iloc[0], w.margin_ratio_svm_gln.iloc[-1]
    pen = w.iloc[-2]
    pace_last = (r_end - pen.margin_ratio_svm_gln) / (w.step.iloc[-1] - pen.step)
    v.update(w48_steps=f"{int(w.step.iloc[-1]):,}", w48_r0=f"{r0:.3f}", w48_r1=f"{r_end:.3f}",
             w48_first_step=f"{int(first.step):,}",
             w48_pace_first=_sci((first.margin_ratio_svm_gln - r0) / first.step),
             w48_pace_last=_sci(pace_last), w48_last_from=f"{int(pen.step):,}",
             w48_angle_drop=f"{w.angle_svm_gln.iloc[0] - w.angle_svm_gln.iloc[-1]:.2f}",
             w48_moved=f"{int(round(abs(w.inconsistency_svm_gln.iloc[-1] - w.inconsistency_svm_gln.iloc[0]) * int(_row(sched, sweep='conjecture-warm', seed=1).val_size)))}",
             w48_decade_past=f"{int(10 * w.step.iloc[-1]):,}",
             w48_ratio_at_pace=f"{r_end + pace_last * 9 * w.step.iloc[-1]:.2f}")
    g48 = _row(fit, sweep="conjecture-warm", quantity="margin_gap_svm_gln", window="last_decade")
    v.update(w48_gap_slope=_signed(g48.slope), w48_ratio_decade_fit=f"{1 - g48.at_decade_past:.3f}")

    # warm at N = 2000
    g2 = seeds[(seeds.sweep == "conjecture-fig2-warm") & (seeds.window == "last_decade")]
    gg, gi = g2[g2.quantity == "margin_gap_svm_gln"].sort_values("seed"), g2[g2.quantity == "inconsistency_svm_gln"].sort_values("seed")
    f_gap = _row(fit, sweep="conjecture-fig2-warm", quantity="margin_gap_svm_gln", window="last_decade")
    f_inc = _row(fit, sweep="conjecture-fig2-warm", quantity="inconsistency_svm_gln", window="last_decade")
    line = gg.last_step * (f_gap.target / gg.fitted_last) ** (1 / gg.slope)
    ends = warm2.sort_values("step").groupby("seed")
    v.update(w2_r0=_span(ends.head(1).margin_ratio_svm_gln, lambda x: f"{x:.2f}"),
             w2_r1=_span(ends.tail(1).margin_ratio_svm_gln, lambda x: f"{x:.3f}"),
             w2_inc0=_span(ends.head(1).inconsistency_svm_gln, lambda x: _pct(x, 1)),
             w2_inc1=_span(ends.tail(1).inconsistency_svm_gln, lambda x: _pct(x, 1)),
             w2_l2_1=_span(ends.tail(1).inconsistency_svm_l2, lambda x: _pct(x, 1)),
             w2_angle0=_span(ends.head(1).angle_svm_gln, lambda x: f"{x:.0f}"),
             w2_angle1=_span(ends.tail(1).angle_svm_gln, lambda x: f"{x:.0f}"),
             w2_steps=f"{int(warm2.step.max()):,}", w2_dec_start=f"{int(gg.first_step.min()):,}",
             w2_gap_slopes=_each(gg.slope, _signed), w2_gap_lag1=_each(gg.lag1, lambda x: f"{x:.2f}"),
             w2_gap_lo=_signed(f_gap.slope_lo), w2_gap_hi=_signed(f_gap.slope_hi),
             w2_gap_last=_span(gg.value_last, lambda x: f"{x:.3f}"),
             w2_decade_past=f"{int(f_gap.decade_past):,}",
             w2_gap_decade_past=f"{f_gap.at_decade_past:.3f}", w2_gap_decade_lo=f"{f_gap.at_decade_past_lo:.3f}",
             w2_gap_decade_hi=f"{f_gap.at_decade_past_hi:.3f}", target_gap=f"{f_gap.target:g}",
             w2_line=_span(line, _sci), w2_inc_slopes=_each(gi.slope, _signed),
             w2_inc_lo=_signed(f_inc.slope_lo), w2_inc_hi=_signed(f_inc.slope_hi),
             w2_inc_decade_past=_pct(f_inc.at_decade_past), w2_inc_decade_lo=_pct(f_inc.at_decade_past_lo),
             w2_inc_decade_hi=_pct(f_inc.at_decade_past_hi))
    la_w2 = la[la.sweep == "conjecture-fig2-warm"]
    la_f2 = la[la.sweep == "conjecture-fig2"]
    la_w48 = la[la.sweep == "conjecture-warm"]
    v.update(w2_l2_geom=_span(la_w2.angle_svm_l2, lambda x: f"{x:.1f}"),
             w2_l2_raw=_span(la_w2.angle_svm_l2_recorded, lambda x: f"{x:.1f}"),
             w48_l2_geom=_span(la_w48.angle_svm_l2, lambda x: f"{x:.1f}"),
             w48_l2_raw=_span(la_w48.angle_svm_l2_recorded, lambda x: f"{x:.1f}"),
             f2_l2_diff=f"{(la_f2.angle_svm_l2 - la_f2.angle_svm_l2_recorded).abs().max():.1f}")

    # the data's span (tables/span.csv)
    sp = t["span"].merge(sched[["point", "sweep"]], on="point", validate="one_to_one")
    s_big, s_f2, s_w2 = (sp[sp.sweep == name] for name in ("conjecture-sgd", "conjecture-fig2", "conjecture-fig2-warm"))
    v.update(span_big_share=_span(s_big.share_outside_span, lambda x: _pct(x, 1)),
             span_big_null=_span(s_big.null_dimensions, str), span_big_angle=_span(s_big.angle_in_span_svm_gln, lambda x: f"{x:.1f}"),
             span_f2_share=_span(s_f2.share_outside_span, lambda x: _pct(x, 0)),
             span_f2_null=_span(s_f2.null_dimensions, str), span_f2_angle=_span(s_f2.angle_in_span_svm_gln, lambda x: f"{x:.0f}"),
             span_w2_share=_span(s_w2.share_outside_span, lambda x: _pct(x, 1)),
             span_w2_angle=_span(s_w2.angle_in_span_svm_gln, lambda x: f"{x:.0f}"))

    # N = 2000, SGD: the rate after its lr drop
    f2a = seeds[(seeds.sweep == "conjecture-fig2") & (seeds.quantity == "inconsistency_svm_gln")]
    f2_after, f2_dec = f2a[f2a.window == "after_drop"], f2a[f2a.window == "last_decade"]
    f2_fit = fit[(fit.sweep == "conjecture-fig2") & (fit.quantity == "inconsistency_svm_gln") & (fit.window == "after_drop")]
    v.update(f2_drop=f"{int(f2_after.drop_step.iloc[0]):,}", f2_runs=f"{len(f2_after)}",
             f2_after_slopes=_span(f2_after.slope, _signed), f2_dec_slopes=_span(f2_dec.slope, _signed),
             f2_groups=f"{len(f2_fit)}", f2_groups_zero=f"{int(((f2_fit.slope_lo < 0) & (f2_fit.slope_hi > 0)).sum())}",
             f2_ratio=_span(lasts[lasts.sweep == 'conjecture-fig2'].margin_ratio_svm_gln, lambda x: f"{x:.2f}"),
             f2_angle=_span(lasts[lasts.sweep == 'conjecture-fig2'].angle_svm_gln, lambda x: f"{x:.0f}"))

    # cost (tables/runs.csv)
    r_sgd = runs[runs.sweep == "conjecture-sgd"]
    r_w2 = runs[runs.sweep == "conjecture-fig2-warm"]
    r_w48 = _row(runs, sweep="conjecture-warm", seed=1)
    v.update(cost_sgd_epoch=_span(r_sgd.seconds_per_epoch, lambda x: f"{x:.2f}"),
             cost_sgd_step=_span(r_sgd.seconds_per_step * 1000, lambda x: f"{x:.1f}"),
             cost_sgd_total=_span(r_sgd.train_seconds, lambda x: f"{x:,.0f}"),
             cost_w48_total=f"{r_w48.train_seconds:,.0f}", cost_w48_step=f"{r_w48.seconds_per_step:.2f}",
             cost_w2_step=_span(r_w2.seconds_per_step * 1000, lambda x: f"{x:.0f}"))

    v.update(sgd_table=_sgd_table(with_sweep(t["decades"], sched), la_sgd), warm_table=_warm_table(traj, runs),
             fig2_table=_fig2_table(t["fig2_decades"]), certificate=_certificate(pd.concat([traj, small])))
    return v


def _sgd_table(dec: pd.DataFrame, last: pd.DataFrame) -> str:
    rows = dec[(dec.sweep == "conjecture-sgd") & (dec.decade >= 10_000)].sort_values(["seed", "step"])
    geom = dict(zip(last.seed, last.angle_svm_l2))
    top = rows.groupby("seed").step.max()
    lines = ["| seed | step | epoch | GD val error | inconsistency, svm-gln | inconsistency, svm-l2 | margin ratio, "
             "svm-gln | angle to svm-gln | angle to svm-l2, its geometry | raw angle to svm-l2 (*) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples():
        ratio = "< 0" if r.margin_ratio_svm_gln < 0 else f"{r.margin_ratio_svm_gln:.3f}"
        g = f"{geom[r.seed]:.1f}" if r.step == top[r.seed] and r.seed in geom else "not logged"
        lines.append(f"| {r.seed} | {int(r.step):,} | {r.epoch:,.0f} | {r.val_error:.4f} | {r.inconsistency_svm_gln:.4f} | "
                     f"{r.inconsistency_svm_l2:.4f} | {ratio} | {r.angle_svm_gln:.1f} | {g} | {r.angle_svm_l2:.1f} |")
    return "\n".join(lines)


def _warm_table(traj: pd.DataFrame, runs: pd.DataFrame) -> str:
    warm = traj[traj.regime == "warm"].sort_values("step")
    cost = runs.set_index(["sweep", "seed"])
    lines = ["| N | seed | full-batch steps | margin ratio, svm-gln: start -> end | angle to svm-gln | "
             "inconsistency, svm-gln | inconsistency, svm-l2 | seconds a step (wall) |", "|---|---|---|---|---|---|---|---|"]
    for (n, sweep, seed), g in sorted(warm.groupby(["train_size", "sweep", "seed"]), key=lambda kv: (-kv[0][0], kv[0][1:])):
        a, b = g.iloc[0], g.iloc[-1]
        s = float(cost.loc[(sweep, seed), "seconds_per_step"])
        size = f"{n:,}" if n >= 10_000 else f"{n}"   # as the page writes N
        lines.append(f"| {size} | {seed} | {int(b.step):,} | {a.margin_ratio_svm_gln:.3f} -> {b.margin_ratio_svm_gln:.3f} | "
                     f"{a.angle_svm_gln:.1f} -> {b.angle_svm_gln:.1f} | {_pct(a.inconsistency_svm_gln)} -> "
                     f"{_pct(b.inconsistency_svm_gln)} | {_pct(a.inconsistency_svm_l2)} -> {_pct(b.inconsistency_svm_l2)} | "
                     f"{s:.3f} |")
    return "\n".join(lines)


def _fig2_table(dec: pd.DataFrame) -> str:
    last = dec[dec.decade == dec.decade.max()].sort_values(["hidden_units", "contexts"])
    lines = ["| H | C | inconsistency, svm-gln | inconsistency, svm-l2 | margin ratio (svm-gln) | angle to svm-gln | "
             "GD val error |", "|---|---|---|---|---|---|---|"]
    for r in last.itertuples():
        lines.append(f"| {r.hidden_units} | {r.contexts} | {r.inconsistency_svm_gln_mean:.4f} | "
                     f"{r.inconsistency_svm_l2_mean:.4f} | {r.margin_ratio_svm_gln_mean:.3f} | {r.angle_svm_gln_mean:.1f} | "
                     f"{r.val_error_mean:.4f} |")
    return "\n".join(lines)


CERTIFICATE = ("kkt_residual", "min_unit_norm", "max_dead_dual_norm")


def _certificate(traj: pd.DataFrame) -> str:
    """The certificate's columns at each run's last logged step, once a run logs them; until then the
    place they go, marked pending."""
    have = [c for c in CERTIFICATE if c in traj]
    logged = traj.dropna(subset=have, how="all") if have else traj.iloc[:0]
    if logged.empty:
        return ("**PENDING.** No run in these tables logs the certificate yet (columns "
                + ", ".join(f"`{c}`" for c in CERTIFICATE) + " of `training.track: [convergence]`). "
                "The runs that do are pending; their last steps will be tabulated here.")
    last = logged.sort_values("step").groupby([*GROUP, "seed"]).tail(1)
    lines = ["| regime | N | seed | step | " + " | ".join(have) + " |", "|---" * (4 + len(have)) + "|"]
    for r in last.itertuples():
        lines.append(f"| {r.regime} | {r.train_size:,} | {r.seed} | {int(r.step):,} | "
                     + " | ".join(f"{getattr(r, c):.3g}" for c in have) + " |")
    return "\n".join(lines)


def kept(path: Path, made: pd.DataFrame) -> pd.DataFrame:
    """`made` (rows of the sweeps read now) with the rows of the committed table at `path` whose
    sweeps were not read this time: runs whose directories are gone keep their rows."""
    if not path.is_file():
        return made
    old = pd.read_csv(path)
    if "sweep" not in old:
        old = with_sweep(old, schedules())
    old = old[~old.sweep.isin(set(made.sweep))]
    return pd.concat([old, made], ignore_index=True) if len(old) else made


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, default=Path("results/conjecture"))
    ap.add_argument("--restate", action="store_true", help="no sweeps: remake the rates, drop.csv, span.csv, "
                    "figures/warm.png and README.md from the committed tables of --out")
    ap.add_argument("--cost", action="store_true", help="measure what the tracking costs at the sweeps' size")
    ap.add_argument("--span", action="store_true", help="finished points: the predictor outside the span of the "
                    "training inputs (tables/span.csv)")
    ap.add_argument("--sharpness", action="store_true", help="finished points: the Hessian of log R's top eigenvalue "
                    "and the largest stable base step of the normalized rule there")
    ap.add_argument("--small", type=Path, help="the N = 2000 sweep (configs/conjecture-fig2.yaml)")
    args = ap.parse_args()
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    if args.restate:
        made = restate(args.out)
        print(made["rate"].to_string(index=False))
        return
    if not args.sweeps:
        ap.error("name the sweeps (or --restate)")
    if args.cost:
        for sweep in args.sweeps:
            cost(sweep)
        return
    if args.sharpness:
        for sweep in args.sweeps:
            sharpness(sweep)
        return
    if args.span:
        frame = pd.concat([span(sweep) for sweep in args.sweeps], ignore_index=True)
        write_csv(args.out / "tables" / "span.csv", frame)
        print(frame.to_string(index=False))
        return
    tables = args.out / "tables"
    traj, runs = points(args.sweeps)
    traj, runs = kept(tables / "trajectory.csv", traj), kept(tables / "runs.csv", runs)
    traj = traj.sort_values(["regime", "train_size", "seed", "step"]).reset_index(drop=True)
    tables.mkdir(parents=True, exist_ok=True)
    dec = decades(traj)
    for name, frame in (("trajectory", traj), ("decades", dec), ("runs", runs)):
        write_csv(tables / f"{name}.csv", frame)
    draw(traj[traj.regime != "warm"], args.out / "figures" / "trajectory.png")
    print(runs.to_string(index=False), "\n")
    show = ["regime", "train_size", "seed", "decade", "epoch", "inconsistency_svm_gln", "inconsistency_svm_l2",
            "margin_ratio_svm_gln", "angle_svm_gln", "angle_svm_l2", "train_error", "val_error"]
    print(dec[[c for c in show if c in dec]].to_string(index=False), "\n")
    if args.small:
        small, _ = points([args.small])
        small = kept(tables / "fig2_trajectory.csv", small)
        small = small.sort_values(["hidden_units", "contexts", "seed", "step"]).reset_index(drop=True)
        sdec = decades(small)
        cols = ["inconsistency_svm_gln", "inconsistency_svm_l2", "margin_ratio_svm_gln", "angle_svm_gln",
                "train_error", "val_error"]
        mean = sdec.groupby(["hidden_units", "contexts", "decade"])[cols].agg(["mean", "count"])   # one schedule
        mean.columns = [f"{a}_{b}" for a, b in mean.columns]
        mean = mean.reset_index()
        write_csv(tables / "fig2_trajectory.csv", small)
        write_csv(tables / "fig2_decades.csv", mean)
        draw_small(small, args.out / "figures" / "fig2.png")
        show = ["hidden_units", "contexts", "decade", "inconsistency_svm_gln_count", *[f"{c}_mean" for c in cols]]
        print("\nN = 2000 (mean over seeds):\n" + mean[show].to_string(index=False))
    needed = ("fig2_trajectory", "fig2_decades", "last_angles", "span")
    missing = [n for n in needed if not (tables / f"{n}.csv").is_file()]
    if missing:
        print(f"not restated (rates, README): tables/{', tables/'.join(missing)} missing; make them "
              "(--small, scripts/conjecture_angles.py, --span), then --restate", file=sys.stderr)
        return
    print(restate(args.out)["rate"].to_string(index=False))


if __name__ == "__main__":
    main()
