"""The tables of results/fullscale/README.md: deep GLNs at N = 48,000 next to the same networks and
programs at N = 500, 1000 and 2000 from the Figure 2 grid (same H, C = 2, median init, momentum 0,
the same published context draws and seeds), for each training schedule (`points.csv`: the paper's
8 epochs at N = 48,000, and 80).

    python scripts/fullscale_summary.py [results/fullscale/tables] [results/paper/fig2/tables] [--figure PNG]
    python scripts/fullscale_summary.py --stages runs/fullscale    # every point's stage results, finished or not
    python scripts/fullscale_summary.py --times runs/fullscale     # every program once: outcome, rounds, seconds
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from paper_summary import md   # the same markdown tables (scripts/ is on the path when run as a script)

ROOT = Path(__file__).resolve().parents[1]


def draw(i: pd.DataFrame, e: pd.DataFrame, path: Path) -> None:
    """Per H: inconsistency with GD (mean and the seeds) and GD's train error against (N, epochs)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    hs = sorted(i.hidden_units.unique())
    fig = Figure(figsize=(6.5 * len(hs), 4.6), layout="constrained")
    axes = fig.subplots(1, len(hs), squeeze=False, sharey=True)[0]   # one scale: the H panels compare
    for ax, h in zip(axes, hs):
        ih, eh = i[i.hidden_units == h], e[(e.hidden_units == h) & (e.predictor == "gd-gln")]
        labels = [c for c in ih["N, epochs"].cat.categories if (ih["N, epochs"] == c).any()]
        x = {c: k for k, c in enumerate(labels)}
        for pred, marker in (("svm-gln", "D"), ("svm-l2", "^")):
            g = ih[ih.predictor_a == pred]
            ax.scatter([x[c] for c in g["N, epochs"]], g.inconsistency, marker=marker, alpha=0.4, s=18)
            m = g.groupby("N, epochs", observed=True).inconsistency.mean()
            ax.plot([x[c] for c in m.index], m.values, marker=marker, label=f"inconsistency with GD, {pred}")
        u = ih[ih.predictor_a == "svm-gln"].groupby("N, epochs", observed=True).expected_if_uncorrelated.mean()
        ax.plot([x[c] for c in u.index], u.values, "k--", label="2p(1-p), uncorrelated")
        t = eh.groupby("N, epochs", observed=True).train_error.mean()
        ax.plot([x[c] for c in t.index if c in x], [v for c, v in t.items() if c in x], "k:", marker="o",
                label="GD train error")
        ax.set_xticks(range(len(labels)), [f"{int(c.split(', ')[0]):,}\n{c.split(', ')[1]} ep." for c in labels], fontsize=8)
        ax.set_xlabel("training set size N, epochs")
        seeds = ", ".join(str(int(k)) for k in sorted(ih.context_seed.unique()))
        ax.set_title(f"deep GLN, H = {h}, C = 2, median init, context seeds {seeds}", fontsize=10)
        handles = ax.get_legend_handles_labels()[0] + [
            Line2D([], [], color="0.5", marker="D", ls="", alpha=0.4, label="faint markers: each context seed")]
        ax.legend(handles=handles, fontsize=7)
    axes[0].set_ylabel("fraction of points\n(inconsistency: validation set; train error: training set)")
    fig.suptitle("inconsistency of the max-margin predictors with the GD network, from the Figure 2 sizes to the "
                 "full training set (line: mean over the context seeds)", fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"figure -> {path}\n")


def stage_results(run_dir: Path, points: pd.DataFrame) -> None:
    """Every stage result under RUN_DIR/points, finished points or not (a point enters the sweep's
    tables only when all its programs are solved)."""
    import json

    rows = []
    for pid, row in points.set_index("point").iterrows():
        d = run_dir / "points" / pid
        base = {"point": pid, "H": row["model.hidden_units"], "seed": row["contexts.seed"], "epochs": row["training.epochs"]}
        if (d / "gd" / "summary.json").is_file():
            g = json.loads((d / "gd" / "summary.json").read_text())
            rows.append({**base, "stage": "gd-gln", "status": g["status"], "train_error": g["train_error"],
                         "val_error": g["val_error"]})
        else:
            rows.append({**base, "stage": "gd-gln", "status": "not run"})
        for r in sorted((d / "svm").glob("*/result.json")):
            v = json.loads(r.read_text())
            rows.append({**base, "stage": r.parent.name, "status": v["status"] + ("" if v["certified"] else ", not certified"),
                         "val_error": v["val_error"], "objective": v["objective"], "rel_gap": "" if v["rel_gap"] is None else f"{v['rel_gap']:.1e}",
                         "solve_seconds": v["solve_seconds"], "cached_from": v.get("cached_from") or ""})
    print(f"## every stage result under {run_dir}/points\n")
    print(md(pd.DataFrame(rows).sort_values(["H", "seed", "epochs", "stage"]).reset_index(drop=True), 6), "\n")


def points_of(run_dir: Path) -> pd.DataFrame:
    """The sweep's points.csv, or (a sweep still running, which writes it at its end) each point's
    H, context seed and schedule from its own gd/config.yaml."""
    if (run_dir / "tables" / "points.csv").is_file():
        return pd.read_csv(run_dir / "tables" / "points.csv")
    import yaml

    rows = []
    for cfg in sorted((run_dir / "points").glob("*/gd/config.yaml")):
        c = yaml.safe_load(cfg.read_text())
        rows.append({"point": cfg.parent.parent.name, "model.hidden_units": c["model"]["hidden_units"],
                     "contexts.seed": c["contexts"]["seed"], "training.epochs": c["training"]["epochs"]})
    return pd.DataFrame(rows)


def program_times(run_dir: Path, points: pd.DataFrame) -> None:
    """Each program of the sweep once (the point that solved it; the others say `cached_from`): its
    outcome and its time, as the sum of its working-set rounds over every invocation that worked on
    it (a resumed solve's `solve_seconds` counts only the last invocation's rounds)."""
    import json
    import re

    rows = []
    for pid, row in points.set_index("point").iterrows():
        for r in sorted((run_dir / "points" / pid / "svm").glob("*/result.json")):
            v = json.loads(r.read_text())
            if v.get("cached_from") and not v["message"].startswith("the dual ray of"):
                continue   # a twin's program: solved once, elsewhere
            rounds = [float(t) for _, t in re.findall(r"\((\d+) steps, ([\d.]+) s\)", v["message"])]
            bound = v.get("relative_margin_bound")
            rows.append({"H": row["model.hidden_units"], "seed": row["contexts.seed"], "program": r.parent.name,
                         "status": v["status"] + ("" if v["certified"] else ", not certified"),
                         "objective": f"{v['objective']:.8g}", "rel_gap": "" if v["rel_gap"] is None else f"{v['rel_gap']:.1e}",
                         "margin bound": "" if bound is None else f"{bound:.1e}",
                         "rounds": len(rounds) or "", "rounds' seconds": f"{sum(rounds):.0f}" if rounds else "",
                         "last run's solve_seconds": f"{v['solve_seconds']:.0f}",
                         "earlier runs' seconds": (lambda m: f"{float(m[1]):.0f}" if m else "")(
                             re.search(r"after ([\d.]+) s of solving in earlier runs", v["message"])),
                         "from": v.get("cached_from") or pid, "commit": v.get("provenance", {}).get("commit", "")[:7]})
    print(f"## every program of {run_dir} once\n")
    print(md(pd.DataFrame(rows).drop_duplicates(["H", "seed", "program"]).sort_values(["H", "seed", "program"], ascending=[False, True, True])
             .reset_index(drop=True), 10), "\n")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="Every table of results/fullscale/README.md, from the committed tables.")
    parser.add_argument("full", nargs="?", type=Path, default=ROOT / "results" / "fullscale" / "tables",
                        help="the full-scale tables (default: results/fullscale/tables)")
    parser.add_argument("fig2", nargs="?", type=Path, default=ROOT / "results" / "paper" / "fig2" / "tables",
                        help="Figure 2's tables (default: results/paper/fig2/tables)")
    parser.add_argument("--stages", type=Path, metavar="RUN_DIR",
                        help="print instead the stage results of every point of a sweep, finished or not")
    parser.add_argument("--times", type=Path, metavar="RUN_DIR",
                        help="print instead every program of a sweep once, with its outcome and time")
    parser.add_argument("--figure", type=Path, metavar="PATH",
                        help="also draw the inconsistency against N and the schedule")
    args = parser.parse_args(argv)
    if args.times is not None:
        program_times(args.times, points_of(args.times))
        return
    if args.stages is not None:
        stage_results(args.stages, points_of(args.stages))
        return
    figure, full, fig2 = args.figure, args.full, args.fig2
    ef, inf = pd.read_csv(full / "errors.csv"), pd.read_csv(full / "inconsistency.csv")
    epochs = pd.read_csv(full / "points.csv").set_index("point")["training.epochs"]   # the two schedules
    ef, inf = ef.assign(epochs=ef.point.map(epochs)), inf.assign(epochs=inf.point.map(epochs))
    e2, i2 = pd.read_csv(fig2 / "errors.csv"), pd.read_csv(fig2 / "inconsistency.csv")
    hs = sorted(ef.hidden_units.unique())
    # the same networks: each H's small-N points only for the context seeds whose N = 48,000 programs
    # are all certified optima (a certified infeasible program has no predictor to compare)
    svm = ef[ef.predictor.str.startswith("svm")]
    solved = svm.groupby(["hidden_units", "context_seed"]).apply(
        lambda t: bool(((t.status == "optimal") & (t.certified == True)).all()))   # noqa: E712 (a column of bools)
    done = {k for k, v in solved.items() if v}
    apart = svm[~pd.Series([k in done for k in zip(svm.hidden_units, svm.context_seed)], index=svm.index)]
    every = ef   # the table of every result keeps them
    keep = lambda t: t[pd.Series([k in done for k in zip(t.hidden_units, t.context_seed)], index=t.index)]
    ef, inf = keep(ef), keep(inf)
    same = lambda t: t[t.hidden_units.isin(hs) & (t.contexts == 2) & t.median_init & (t.momentum == 0)
                       & pd.Series([k in done for k in zip(t.hidden_units, t.context_seed)], index=t.index)]
    e2, i2 = e2.assign(epochs=(400000 / e2.train_size).round().astype(int)), i2.assign(
        epochs=(400000 / i2.train_size).round().astype(int))   # the paper schedule: 200 * 2000 / N epochs
    e, i = pd.concat([same(e2), ef]), pd.concat([same(i2), inf])
    order = [f"{n}, {k}" for n, k in sorted(set(zip(e.train_size, e.epochs)))]
    for t in (e, i):
        t["N, epochs"] = pd.Categorical([f"{n}, {k}" for n, k in zip(t.train_size, t.epochs)], order, ordered=True)
    e, i = e[e.predictor.isin(["gd-gln", "svm-gln", "svm-l2"])], i[i.predictor_a.isin(["svm-gln", "svm-l2"])]

    print("## every N = 48,000 result\n")
    cols = ["predictor", "hidden_units", "context_seed", "epochs", "train_error", "val_error", "status", "objective", "rel_gap",
            "min_margin", "certified", "solve_seconds"]
    every = every[(every.predictor == "gd-gln") | (every.epochs == every.epochs.min())]   # each program once (the schedules share it)
    print(md(every[cols].sort_values(["hidden_units", "context_seed", "predictor", "epochs"]).reset_index(drop=True), 6),
          "\n")
    print(f"context seeds whose N = 48,000 programs are certified optima, used below (the small-N columns use the "
          f"same): {', '.join(f'H = {h}: {sorted(int(k) for hh, k in done if hh == h)}' for h in hs)}\n")
    for (h, k), t in apart.groupby(["hidden_units", "context_seed"]):
        print(f"left out: H = {h}, context seed {k}: " + "; ".join(
            f"{r.predictor} {r.status}" + (" (certified)" if r.certified == True else "")   # noqa: E712
            for r in t.drop_duplicates("predictor").itertuples()) + "\n")
    print("## validation error by N (mean over the context seeds)\n")
    print(md(e.pivot_table(index=["hidden_units", "predictor"], columns="N, epochs", values="val_error", observed=True)), "\n")
    print("## train error by N (mean over the context seeds)\n")
    print(md(e.pivot_table(index=["hidden_units", "predictor"], columns="N, epochs", values="train_error", observed=True)), "\n")
    print("## inconsistency with the GD network by N (mean over the context seeds)\n")
    print(md(i.pivot_table(index=["hidden_units", "predictor_a"], columns="N, epochs", values="inconsistency", observed=True)), "\n")
    print("## published_inconsistency (the published way of measuring) by N\n")
    print(md(i.pivot_table(index=["hidden_units", "predictor_a"], columns="N, epochs",
                           values="published_inconsistency", observed=True)), "\n")
    print("## 2p(1-p) (an uncorrelated predictor with the same errors) by N\n")
    print(md(i.pivot_table(index=["hidden_units", "predictor_a"], columns="N, epochs",
                           values="expected_if_uncorrelated", observed=True)), "\n")
    if figure:
        draw(i, e, figure)
    p = i.pivot_table(index=["hidden_units", "N, epochs", "context_seed"], columns="predictor_a", values="inconsistency",
                      observed=True)
    closer = (p["svm-gln"] < p["svm-l2"]).groupby(level=[0, 1]).agg(lambda c: f"{int(c.sum())} of {len(c)}").unstack()
    print("## context seeds where svm-gln is closer to GD than svm-l2\n")
    print(md(closer), "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
