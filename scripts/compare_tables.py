"""What changed between two versions of a sweep's tables (issue 26: the committed paper tables
regenerated after a solver change). Prints, per predictor, how many rows were compared, the largest
relative change of the objective, and how many validation errors, statuses and inconsistencies
changed at all.

    python scripts/compare_tables.py results/paper/fig2/tables runs/paper-fig2/tables

Rows are matched on (point, predictor) in errors.csv and on (point, predictor, reference) columns
of inconsistency.csv (every column but the numbers). Exit code 1 when the two tables do not hold the
same rows, 2 for a missing file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path, help="a tables/ folder")
    ap.add_argument("new", type=Path, help="another tables/ folder")
    args = ap.parse_args()
    for d in (args.old, args.new):
        if not (d / "errors.csv").is_file():
            print(f"gb: {d / 'errors.csv'}: no such file", file=sys.stderr)
            return 2
    old, new = (pd.read_csv(d / "errors.csv") for d in (args.old, args.new))
    key = ["point", "predictor"]
    both = old.merge(new, on=key, how="outer", suffixes=("_old", "_new"), indicator=True)
    unmatched = int((both["_merge"] != "both").sum())
    both = both[both["_merge"] == "both"]
    print("| predictor | rows | largest relative objective change | val_error changed | train_error changed | status changed |")
    print("|---|---|---|---|---|---|")
    for pred, g in both.groupby("predictor"):
        o, n = g["objective_old"].astype(float), g["objective_new"].astype(float)
        rel = ((n - o).abs() / o.abs()).max() if o.notna().any() else float("nan")
        def changed(c: str) -> int:   # two missing values (an infeasible program's errors) are the same
            o, n = g[f"{c}_old"], g[f"{c}_new"]
            return int((~((o == n) | (o.isna() & n.isna()))).sum())
        print(f"| {pred} | {len(g)} | {rel:.1e} | {changed('val_error')} | {changed('train_error')} | {changed('status')} |")
    inc_old, inc_new = (d / "inconsistency.csv" for d in (args.old, args.new))
    if inc_old.is_file() and inc_new.is_file():
        a, b = pd.read_csv(inc_old), pd.read_csv(inc_new)
        num = [c for c in a.columns if pd.api.types.is_float_dtype(a[c])]
        ids = [c for c in a.columns if c not in num]
        m = a.merge(b, on=ids, how="outer", suffixes=("_old", "_new"), indicator=True)
        unmatched += int((m["_merge"] != "both").sum())
        m = m[m["_merge"] == "both"]
        for c in num:
            diff = (m[f"{c}_old"] - m[f"{c}_new"]).abs()
            print(f"inconsistency.csv {c}: {int((diff > 0).sum())} of {len(m)} rows changed, largest {diff.max():.2g}")
    if unmatched:
        print(f"{unmatched} rows are in one table only")
    return 1 if unmatched else 0


if __name__ == "__main__":
    sys.exit(main())
