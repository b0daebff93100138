"""Where a finished sweep's time went: per-point training and solve seconds, from its result files.

    python benchmarks/sweep_times.py runs/paper-fig2 [--jobs 2]

Prints, per model size, the points, mean training and solve seconds per point, and the sum; the
last line divides the total by --jobs, the wall time the same points need on a machine that runs
nothing else (process start-up, data loading and `compare` are not in these files and come on top).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd


def point_times(out: Path) -> pd.DataFrame:
    rows = []
    for summary in sorted(out.glob("points/*/gd/summary.json")):
        point = summary.parent.parent
        errors = point / "tables" / "errors.csv"
        if not errors.is_file():
            continue
        meta = pd.read_csv(errors).iloc[0]
        results = [json.loads(r.read_text()) for r in point.glob("svm/*/result.json")]
        # a result reused from the solve cache (`cached_from`) cost its point no solve
        solve = sum(r["solve_seconds"] for r in results if "cached_from" not in r)
        rows.append({"hidden_units": meta["hidden_units"], "contexts": meta["contexts"],
                     "train_size": meta["train_size"], "momentum": meta["momentum"],
                     "train_seconds": json.loads(summary.read_text())["seconds"], "solve_seconds": solve,
                     "solved": sum("cached_from" not in r for r in results),
                     "cached": sum("cached_from" in r for r in results)})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    t = point_times(args.sweep_dir)
    if t.empty:
        raise SystemExit(f"{args.sweep_dir}: no finished points")
    by = t.groupby(["hidden_units", "contexts"]).agg(points=("train_seconds", "size"),
                                                     train_mean=("train_seconds", "mean"),
                                                     solve_mean=("solve_seconds", "mean"))
    by["total_s"] = t.groupby(["hidden_units", "contexts"]).apply(
        lambda g: (g.train_seconds + g.solve_seconds).sum(), include_groups=False)
    print(by.round(2).to_string())
    total = float((t.train_seconds + t.solve_seconds).sum())
    print(f"\nprograms: {t.solved.sum()} solved, {t.cached.sum()} reused from the solve cache")
    print(f"{len(t)} points: training {t.train_seconds.sum():.0f} s + solving {t.solve_seconds.sum():.0f} s "
          f"= {total:.0f} s; / {args.jobs} jobs = {total / args.jobs / 60:.1f} min")


if __name__ == "__main__":
    main()
