"""Rebuild a grid's tables from the committed rows that a code change cannot have touched and a
sweep of the rest (issue 27: the published bit order changes only the C >= 4 points of fig2).

    python scripts/merge_grid_tables.py results/paper/fig2 runs/paper-fig2-bitorder OUT --keep "contexts == 2"

OLD is a results folder (`tables/{errors,inconsistency,points,failures}.csv`), NEW a sweep directory
whose `tables/` hold the other points. The rows of OLD's points that satisfy --keep (a pandas query on
errors.csv) are kept, every other point comes from NEW; a point in both is refused. The rows are put in
the order of OLD's `points.csv` (the grid's order, as a full sweep writes them), `summary.csv` is
recomputed and the figures redrawn with gb's own functions, into OUT/{tables,figures}.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd


def merge(old: Path, new: Path, out: Path, keep: str) -> None:
    from gbcli.io import write_csv
    from gbcli.reports.tables import summarize
    from gbcli.runs.sweep import draw_figures

    t_old, t_new = old / "tables", new / "tables"
    e_old, i_old = pd.read_csv(t_old / "errors.csv"), pd.read_csv(t_old / "inconsistency.csv")
    e_new, i_new = pd.read_csv(t_new / "errors.csv"), pd.read_csv(t_new / "inconsistency.csv")
    order = pd.read_csv(t_old / "points.csv").point.tolist()
    kept = set(e_old.query(keep).point)
    if kept & set(e_new.point):
        sys.exit(f"points in both: {sorted(kept & set(e_new.point))[:5]}")
    missing = set(order) - kept - set(e_new.point)
    if missing:
        sys.exit(f"{len(missing)} points of {t_old / 'points.csv'} are in neither: {sorted(missing)[:5]}")
    rank = {p: k for k, p in enumerate(order)}

    def combine(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
        cols = list(dict.fromkeys([*a.columns, *b.columns]))
        both = pd.concat([a[a.point.isin(kept)].reindex(columns=cols), b.reindex(columns=cols)], ignore_index=True)
        return both.sort_values("point", key=lambda s: s.map(rank), kind="stable").reset_index(drop=True)

    errors, incons = combine(e_old, e_new), combine(i_old, i_new)
    tables = out / "tables"
    write_csv(tables / "errors.csv", errors)
    write_csv(tables / "inconsistency.csv", incons)
    fails = pd.read_csv(t_new / "failures.csv")
    write_csv(tables / "failures.csv", fails)
    write_csv(tables / "points.csv", pd.read_csv(t_old / "points.csv"))
    write_csv(tables / "summary.csv", summarize(errors, incons))
    draw_figures(errors, incons, out)
    print(f"{len(kept)} points kept from {old}, {e_new.point.nunique()} from {new}; {len(fails)} failures -> {out}")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path, help="results folder with the committed tables")
    ap.add_argument("new", type=Path, help="sweep directory with the regenerated points")
    ap.add_argument("out", type=Path, help="where to write tables/ and figures/")
    ap.add_argument("--keep", required=True, help='rows of OLD to keep, a pandas query (e.g. "contexts == 2")')
    args = ap.parse_args(argv)
    merge(args.old, args.new, args.out, args.keep)


if __name__ == "__main__":
    main(sys.argv[1:])
