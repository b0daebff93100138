"""results/conjecture/ (issue 37): where gradient descent on the deep GLN goes at N = 48,000, from
the two long-run sweeps (configs/conjecture-sgd.yaml, configs/conjecture-normalized.yaml).

    python scripts/conjecture_summary.py runs/conjecture-sgd runs/conjecture-normalized [--out results/conjecture]
    python scripts/conjecture_summary.py --cost runs/conjecture-sgd runs/conjecture-normalized   # the tracking's cost
    python scripts/conjecture_summary.py --span runs/conjecture-sgd runs/conjecture-normalized   # outside the data's span
    python scripts/conjecture_summary.py --sharpness runs/conjecture-sgd   # the stable normalized step there

Reads each point's metric rows: `gd/metrics.csv` when its training has finished, else the rows of
its last training checkpoint (`gd/checkpoint.pt`, read tensors-only, never unpickled), so the tables
can be made while the runs go on. Writes
- tables/trajectory.csv: one row per (seed, regime, logged step), the convergence columns;
- tables/decades.csv: the values at the last logged step of each decade of steps (10, 100, ...)
  and at the last logged step;
- tables/rate.csv: per regime, a power law inconsistency_svm_gln ~ a t^b fitted over the logged
  steps of the last decade each seed reached, once it separates the training set (least squares
  in log-log, all seeds pooled, each with its own intercept), the slope's standard error and the
  steps at which the fit reaches an inconsistency of 0.5% and 0.1% (with the range the slope's 95%
  interval gives);
- tables/runs.csv: per point, how far it got (steps done: its last checkpoint's while it trains)
  and its cost (seconds per epoch and per step, wall time of the training, so they include any
  time the machine gave to other work);
- figures/trajectory.png: the curves against steps on a log axis, three seeds, sgd and normalized;
  figures/warm.png: the warm regime (configs/conjecture-warm.yaml) against its own full-batch steps.
With `--small runs/conjecture-fig2` (the N = 2000 counterparts, every fig2 cell with H >= 20), also
tables/fig2_trajectory.csv, tables/fig2_decades.csv (mean over the seeds per H, C and decade) and
figures/fig2.png.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from gbcli.runs.sweep import expand
from gbcli.store import layout
from gbcli.store.identity import point_id
from gbcli.store.safe import read_json, write_csv
from gbcli.training.loop import checkpoint_progress

COLUMNS = ["inconsistency_svm_gln", "inconsistency_svm_l2", "train_inconsistency_svm_gln",
           "train_inconsistency_svm_l2", "margin_ratio_svm_gln", "margin_ratio_svm_l2", "angle_svm_gln",
           "angle_svm_l2", "train_loss", "train_error", "val_error", "normalized_margin"]
TARGETS = (0.005, 0.001)


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
                               contexts=cfg["contexts"]["count"], train_size=n)
            frames.append(rows[["seed", "regime", "hidden_units", "contexts", "train_size", "step", "epoch",
                                *[c for c in COLUMNS if c in rows], "finished"]])
    if not frames:
        sys.exit("no point has logged rows yet")
    return pd.concat(frames, ignore_index=True), pd.DataFrame(runs)


def decades(traj: pd.DataFrame) -> pd.DataFrame:
    """The row at the last logged step <= 10^k, for each k a run reached."""
    out = []
    for _, g in traj.groupby(["seed", "regime", "train_size", "hidden_units", "contexts"]):
        g = g.sort_values("step")
        for k in range(1, int(math.log10(max(g.step.max(), 1))) + 1):
            r = g[g.step <= 10 ** k].iloc[-1]
            out.append({"decade": 10 ** k, **r.drop("finished").to_dict()})
        if g.step.max() > 10 ** int(math.log10(max(g.step.max(), 1))):   # and where the run is now
            out.append({"decade": int(g.iloc[-1].step), **g.iloc[-1].drop("finished").to_dict()})
    return pd.DataFrame(out)


def rate(traj: pd.DataFrame) -> pd.DataFrame:
    """log inc = a_seed + b log t over the steps of each seed's last decade (t >= its last step / 10)
    at which the training set is separated (train error 0): the asymptotic phase, not the approach."""
    out = []
    for (reg, n), g in traj.groupby(["regime", "train_size"]):
        xs, ys, seeds = [], [], []
        for seed, s in g.groupby("seed"):
            s = s[(s.step >= s.step.max() / 10) & (s.inconsistency_svm_gln > 0) & (s.train_error == 0)]
            xs += list(np.log10(s.step))
            ys += list(np.log10(s.inconsistency_svm_gln))
            seeds += [seed] * len(s)
        xs, ys = np.array(xs, dtype=float), np.array(ys, dtype=float)
        useds = sorted(set(seeds))
        if len(xs) < len(useds) + 3:
            out.append({"regime": reg, "train_size": n, "points": len(xs),
                        "note": "too few logged steps in the last decade with the training set separated"})
            continue
        design = np.column_stack([xs] + [np.array(seeds) == s for s in useds]).astype(float)
        coef, res, *_ = np.linalg.lstsq(design, ys, rcond=None)
        dof = len(xs) - design.shape[1]
        sigma2 = float(((ys - design @ coef) ** 2).sum()) / max(dof, 1)
        cov = sigma2 * np.linalg.inv(design.T @ design)
        b, se = float(coef[0]), float(math.sqrt(cov[0, 0]))
        from scipy.stats import t as student
        half = float(student.ppf(0.975, max(dof, 1))) * se
        row = {"regime": reg, "train_size": n, "points": len(xs), "seeds": " ".join(map(str, useds)), "slope": b, "slope_se": se,
               "slope_lo": b - half, "slope_hi": b + half}
        a = float(np.mean(coef[1:]))   # the seeds' mean intercept
        for target in TARGETS:
            for name, slope in (("", b), ("_lo", b - half), ("_hi", b + half)):
                exponent = (math.log10(target) - a) / slope if slope < 0 else math.inf
                steps = 10 ** exponent if exponent < 300 else math.inf   # a slope of about 0: never
                row[f"steps_to_{target:g}{name}"] = steps
        out.append(row)
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


def draw_warm(traj: pd.DataFrame, path: Path) -> None:
    """The warm regime against its own full-batch steps (they do not count SGD's): both programs'
    inconsistency, margin ratio and angle, from the SGD network it starts at (step 0)."""
    from matplotlib.figure import Figure

    sizes = sorted(traj.train_size.unique())
    fig = Figure(figsize=(13, 4.2 * len(sizes)), layout="constrained")
    grid = fig.subplots(len(sizes), 3, squeeze=False)
    panels = ((("inconsistency_svm_gln", "inconsistency_svm_l2"), "inconsistency (validation)", "log"),
              (("margin_ratio_svm_gln", "margin_ratio_svm_l2"), "normalized margin / the program's best", "linear"),
              (("angle_svm_gln", "angle_svm_l2"), "angle to the program's predictor (degrees)", "linear"))
    for axes, n in zip(grid, sizes):
        _warm_row(axes, traj[traj.train_size == n], panels, n)
    fig.suptitle("normalized full-batch GD started from the SGD network (solid svm-gln, dashed svm-l2)", fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _warm_row(axes, traj: pd.DataFrame, panels, n: int) -> None:
    for ax, (cols, label, scale) in zip(axes, panels):
        for seed, g in traj.groupby("seed"):
            g = g.sort_values("step")
            x = g.step.clip(lower=0.5)   # step 0 (the SGD network) at 0.5 on the log axis
            for col, style in zip(cols, ("-", "--")):
                program = "svm-gln" if col.endswith("svm_gln") else "svm-l2"
                ax.plot(x, g[col], style, marker=".", ms=3, label=f"{program}, seed {seed}")
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
    initial values, scaled by w2), and the angle to each program with that part left out (the
    programs put nothing there: their solutions are combinations of the training inputs)."""
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
            z, o = inside.ravel(), ref["zeta"].ravel()
            row[f"angle_in_span_{prog.replace('-', '_')}"] = math.degrees(math.acos(
                min(1.0, float(z @ o / (np.linalg.norm(z) * np.linalg.norm(o))))))
        out.append(row)
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("results/conjecture"))
    ap.add_argument("--cost", action="store_true", help="measure what the tracking costs at the sweeps' size")
    ap.add_argument("--span", action="store_true", help="finished points: the predictor outside the span of the "
                    "training inputs (tables/span.csv)")
    ap.add_argument("--sharpness", action="store_true", help="finished points: the Hessian of log R's top eigenvalue "
                    "and the largest stable base step of the normalized rule there")
    ap.add_argument("--small", type=Path, help="the N = 2000 sweep (configs/conjecture-fig2.yaml)")
    args = ap.parse_args()
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
    traj, runs = points(args.sweeps)
    traj = traj.sort_values(["regime", "train_size", "seed", "step"]).reset_index(drop=True)
    tables = args.out / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    dec, fit = decades(traj), rate(traj)
    for name, frame in (("trajectory", traj), ("decades", dec), ("rate", fit), ("runs", runs)):
        write_csv(tables / f"{name}.csv", frame)
    draw(traj[traj.regime != "warm"], args.out / "figures" / "trajectory.png")
    if (traj.regime == "warm").any():
        draw_warm(traj[traj.regime == "warm"], args.out / "figures" / "warm.png")
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    print(runs.to_string(index=False), "\n")
    show = ["regime", "train_size", "seed", "decade", "epoch", "inconsistency_svm_gln", "inconsistency_svm_l2",
            "margin_ratio_svm_gln", "angle_svm_gln", "angle_svm_l2", "train_error", "val_error"]
    print(dec[[c for c in show if c in dec]].to_string(index=False), "\n")
    print(fit.to_string(index=False))
    if args.small:
        small, _ = points([args.small])
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


if __name__ == "__main__":
    main()
