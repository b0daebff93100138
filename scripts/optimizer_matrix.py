"""The optimizer x program matrix of results/optimizers/ (issue 50), from sweeps made by `gb sweep`.

For each point of each sweep (one optimizer, one data seed) and each program the sweep solved, two
numbers at the end of training:
- the margin ratio in that program's geometry: the network's normalized margin
  min_n y_n f(x_n) / ||theta||_q^L (q the program's norm, L the model's degree) over the largest one
  the program's certified optimum allows (linear: 1 / sqrt(opt) for the l2 SVM, 1 / opt for the lq
  LPs and cone programs; GLN: 1 / (2 opt) for svm-gln, 1 / opt for svm-gln-linf);
- the inconsistency between the network and the program's predictor on the validation points, as
  `gb compare` wrote it in the point's tables/inconsistency.csv.
A point not (yet) trained shows as a row with its status and no cells.
A cell is the mean over seeds (and the range). The verdict compares each optimizer's cell for the
program its theorem names with the bars of issue 50's acceptance: margin ratio > 0.99 and
inconsistency <= 0.01 ("reached"), margin ratio > 0.95 ("approaching") or neither ("not reached").

    python scripts/optimizer_matrix.py SWEEP [SWEEP ...] --out results/optimizers/NAME [--programs DIR]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from gbcli.errors import GbError
from gbcli.fs.safe import load_npz_untrusted
from gbcli.metrics import inconsistency as metric_inconsistency
from gbcli.optimizers import geometry
from gbcli.registry import MODELS
from gbcli.runs.index import sweep_points
from gbcli.runs.load import load_run
from gbcli.runs.stages import prepare
from gbcli.runs.threads import limit_threads

GEOMETRY = {"sq": 2.0, "group": 2.0, "l2": 2.0, "l1": 1.0, "linf": math.inf, "l1.5": 1.5}
NAME = {1.0: "l1", 2.0: "l2", math.inf: "linf", 1.5: "l1.5"}
THEOREM = {"sgd": "Soudry et al. 2018 (linear); Lyu and Li 2020 (homogeneous: KKT of the l2 margin)",
           "sign": "Gunasekar et al. 2018 (linear); Tsilivis et al. 2024 (homogeneous: KKT of the l-infinity margin)",
           "steepest-l1": "Gunasekar et al. 2018 (linear); Tsilivis et al. 2024 (homogeneous: KKT of the l1 margin)",
           "steepest-l2": "Gunasekar et al. 2018 (linear); Tsilivis et al. 2024 (homogeneous)",
           "mirror": "Sun et al. 2022 (linear only)",
           "adam": "Zhang, Zou, Cao 2024 (linear only, decreasing step, vanishing epsilon)"}


def best_margin(kind: str, norm: str, optimum: float) -> float:
    """The largest normalized margin a certified optimum allows (see the module docstring)."""
    if kind == "linear":
        return 1.0 / math.sqrt(optimum) if norm == "sq" else 1.0 / optimum
    if kind == "gln":
        return 1.0 / (2.0 * optimum) if norm == "group" else 1.0 / optimum
    raise SystemExit(f"no margin bound written for model kind {kind}")


def q_norm(w: torch.Tensor, q: float) -> float:
    w = w.abs()
    return float(w.max()) if q == math.inf else float(w.pow(q).sum() ** (1 / q))


def point_rows(sweep: Path, point: str, programs_dir: Path | None = None) -> list[dict]:
    try:
        run = load_run(sweep / "points" / point)
    except GbError:   # a point not started yet
        return [{"point": point, "status": "not run"}]
    inconsistency = run.inconsistency if run.inconsistency is not None else pd.DataFrame(
        columns=["predictor_a", "inconsistency"])
    cfg, kind = run.config, run.config.model.kind
    seed = cfg.contexts.seed if kind == "gln" else cfg.dataset.data_seed   # what the sweeps vary
    if run.model is None:
        return [{"point": point, "optimizer": cfg.training.optimizer, "seed": seed,
                 "status": (run.summary or {}).get("status", "not run")}]
    problem = prepare(cfg)
    ds = problem.dataset
    x = torch.tensor(ds.x_train, dtype=torch.float64)
    ctx = None if problem.ctx_train is None else torch.tensor(problem.ctx_train)
    net = run.model.double()
    with torch.no_grad():
        margins = torch.tensor(ds.y_train) * (net(x, ctx) if ctx is not None else net(x)).reshape(-1)
    w = torch.cat([p.detach().double().reshape(-1) for p in net.weights()])
    degree = MODELS[kind].Params.homogeneity
    with torch.no_grad():   # the network's validation outputs, for programs solved outside the sweep
        xv = torch.tensor(ds.x_val, dtype=torch.float64)
        val_out = (net(xv, torch.tensor(problem.ctx_val)) if ctx is not None else net(xv)).reshape(-1).numpy()
    results = dict(run.results)
    extra = programs_dir / f"seed{cfg.contexts.seed}" if programs_dir is not None else None
    if extra is not None and extra.is_dir():   # `gb fit-svm` of the same problem (--programs)
        other = load_run(extra)
        for program, rec in other.results.items():
            if program not in results and rec.get("status") == "optimal":
                pred = load_npz_untrusted(extra / "svm" / program / "predictions.npz")["val_out"]
                results[program] = rec
                inconsistency = pd.concat([inconsistency, pd.DataFrame(
                    [{"predictor_a": program, "inconsistency": metric_inconsistency(val_out, pred)}])])
    t = cfg.training
    label = t.optimizer + "".join(f", {k} {v:g}" for k, v in (("eps", getattr(t, "eps", None)),) if v is not None) \
        + (", decaying step" if t.lr_milestones else "")
    rows = []
    for program, rec in sorted(results.items()):
        norm = MODELS[kind].programs[program].norm
        q = GEOMETRY[norm]
        incons = inconsistency[inconsistency.predictor_a == program]
        ok = rec.get("status") == "optimal"
        ratio = float(margins.min()) / q_norm(w, q) ** degree / best_margin(kind, norm, rec["objective"]) if ok else math.nan
        rows.append({"point": point, "optimizer": cfg.training.optimizer, "label": label, "seed": seed,
                     "lr": cfg.training.lr, "step_rule": cfg.training.step_rule, "steps": cfg.training.epochs,
                     "status": run.summary["status"], "program": program, "geometry": NAME[q],
                     "program_status": rec.get("status"), "margin_ratio": ratio,
                     "inconsistency": float(incons.inconsistency.iloc[0]) if len(incons) else math.nan,
                     "predicted": NAME.get(geometry(cfg.training)) == NAME[q],
                     "train_error": float((margins <= 0).double().mean())})
    return rows


def verdict(cell: pd.DataFrame) -> str:
    r, i = cell.margin_ratio.min(), cell.inconsistency.max()
    if r > 0.99 and i <= 0.01:
        return "reached"
    return "approaching" if r > 0.95 else "not reached"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweeps", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--programs", type=Path, help="a folder of `gb fit-svm` runs of the sweeps' problems, seed<K> for "
                                                  "contexts.seed K, whose programs the networks are compared with too")
    a = ap.parse_args()
    limit_threads(1)
    rows = []
    for sweep in a.sweeps:
        grid = [str(r["point"]) for r in sweep_points(sweep)]   # not the folders an earlier grid left
        if not grid:
            raise SystemExit(f"{sweep}: no tables/points.csv (run `gb sweep` on it to the end first)")
        for point in sorted(grid):
            rows += [{"sweep": sweep.name, **r} for r in point_rows(sweep, point, a.programs)]
    df = pd.DataFrame(rows)
    if "program" not in df:
        raise SystemExit("no point of these sweeps has finished")
    a.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out / "cells.csv", index=False)
    order = sorted(set(df.label.dropna()), key=lambda lab: (list(THEOREM).index(lab.split(",")[0]), lab))
    lines = []
    for sweep, part in df.groupby("sweep", sort=False):
        programs = list(dict.fromkeys(part.program.dropna()))
        lines += [f"### {sweep}", "", "margin ratio / inconsistency, mean over seeds (min-max); * the program the "
                  "optimizer's theorem names", "",
                  "| optimizer | " + " | ".join(f"{p} ({part[part.program == p].geometry.iloc[0]})" for p in programs) + " |",
                  "|---|" + "---|" * len(programs)]
        for o in order:
            cells = []
            for p in programs:
                c = part[(part.label == o) & (part.program == p)]
                if c.empty:
                    cells.append("-")
                    continue
                star = "*" if c.predicted.any() else ""
                cells.append(f"{star}{c.margin_ratio.mean():.3f} ({c.margin_ratio.min():.3f}-{c.margin_ratio.max():.3f})"
                             f" / {c.inconsistency.mean():.3f}")
            lines.append(f"| {o} | " + " | ".join(cells) + " |")
        lines += ["", "| optimizer | predicted program | seeds | verdict | theorem |", "|---|---|---|---|---|"]
        for o in order:
            c = part[(part.label == o) & (part.predicted == True)]   # noqa: E712 (a column with NaN)
            theorem = THEOREM[o.split(",")[0]]
            if c.empty:
                lines.append(f"| {o} | none solved | - | no prediction tested | {theorem} |")
            else:
                lines.append(f"| {o} | {c.program.iloc[0]} | {c.seed.nunique()} | {verdict(c)} | {theorem} |")
        lines.append("")
    text = "\n".join(lines)
    (a.out / "matrix.md").write_text(text + "\n")
    print(text)
    plot(df, a.out)


def plot(df: pd.DataFrame, out: Path) -> None:
    """One panel per sweep: each optimizer's margin ratio in each program's geometry (mean over seeds)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = list(dict.fromkeys(df.sweep))
    fig, axes = plt.subplots(1, len(sweeps), figsize=(5.5 * len(sweeps), 4), squeeze=False)
    for ax, sweep in zip(axes[0], sweeps):
        part = df[df.sweep == sweep].dropna(subset=["program"])
        table = part.pivot_table(index="label", columns="program", values="margin_ratio", aggfunc="mean")
        table = table.reindex(sorted(table.index, key=lambda lab: (list(THEOREM).index(lab.split(",")[0]), lab)))
        im = ax.imshow(np.clip(table.values, 0, 1), vmin=0, vmax=1, cmap="viridis")
        ax.set_xticks(range(len(table.columns)), table.columns, rotation=30, ha="right")
        ax.set_yticks(range(len(table.index)), table.index)
        for (i, j), v in np.ndenumerate(table.values):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.6 else "k", fontsize=8)
        ax.set_title(f"{sweep}: margin ratio in each program's geometry", fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    fig.savefig(out / "matrix.png", dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    main()
