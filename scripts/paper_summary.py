"""Every number of results/paper/README.md, from the committed tables (nothing is typed in by hand).

    python scripts/paper_summary.py [results/paper]        # prints the README's tables as markdown
    python scripts/paper_summary.py --batch-order runs/paper-fig3-momentum-order results/paper/fig3-momentum-order/tables
    python scripts/paper_summary.py --l2-reference runs/paper-fig2     # svm-l2-reference: points it constrains
    python scripts/paper_summary.py --published                     # fig2's svm-gln-reference per run against the published errors
    python scripts/paper_summary.py --claims [--tables DIR]          # paper 000's claims (results/paper/claims.yaml; --claim ID: one)

Reads `<dir>/{fig2,fig3,fig3-momentum-order,shallow}/tables/{errors,inconsistency}.csv` (whichever exist)
and prints one section per question the README answers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

import claims   # scripts/claims.py (scripts/ is on the path when run as a script)


def md(df: pd.DataFrame, digits: int = 4) -> str:
    """A plain markdown table (no extra dependency)."""
    df = df.reset_index() if not isinstance(df.index, pd.RangeIndex) else df
    fmt = lambda v: f"{v:.{digits}f}" if isinstance(v, float) else str(v)
    rows = [" | ".join(map(str, df.columns))] + [" | ".join("---" for _ in df.columns)]
    rows += [" | ".join(fmt(v) for v in r) for r in df.itertuples(index=False)]
    return "\n".join(f"| {r} |" for r in rows)


def read(base: Path, grid: str):
    t = base / grid / "tables"
    if not (t / "errors.csv").exists():
        return None, None
    return pd.read_csv(t / "errors.csv"), pd.read_csv(t / "inconsistency.csv")


def fig2(base: Path) -> None:
    e, i = read(base, "fig2")
    if e is None:
        return
    print("## fig2: overview (mean over points)\n")
    gd = e[e.predictor == "gd-gln"].groupby("momentum").val_error.mean()
    print("gd-gln val error by momentum:", ", ".join(f"{m:g}: {v:.4f}" for m, v in gd.items()), "\n")
    ov = i.groupby(["predictor_a", "momentum"]).agg(
        svm_val_error=("svm_val_error", "mean"), inconsistency=("inconsistency", "mean"),
        published_inconsistency=("published_inconsistency", "mean"),
        expected_if_uncorrelated=("expected_if_uncorrelated", "mean"), points=("point", "count"))
    print(md(ov), "\n")

    m0 = i[i.momentum == 0]
    print("## fig2: the published way of measuring against the correct one, by median init (momentum 0)\n")
    by = m0.groupby(["predictor_a", "median_init"]).agg(
        inconsistency=("inconsistency", "mean"), published_inconsistency=("published_inconsistency", "mean"),
        share_above_10pct_published=("published_inconsistency", lambda s: float((s > 0.1).mean())),
        share_above_10pct=("inconsistency", lambda s: float((s > 0.1).mean())))
    print(md(by), "\n")

    print("## fig2: svm-gln per cell (momentum 0, mean over the three context seeds)\n")
    g = m0[m0.predictor_a == "svm-gln"].groupby(["median_init", "hidden_units", "contexts", "train_size"]).agg(
        gd_val_error=("gd_val_error", "mean"), svm_val_error=("svm_val_error", "mean"),
        inconsistency=("inconsistency", "mean"), published_inconsistency=("published_inconsistency", "mean"))
    print(md(g), "\n")

    g0 = m0[m0.predictor_a == "svm-gln"]
    print("svm-gln inconsistency (momentum 0) by H:", ", ".join(f"{k}: {v:.4f}" for k, v in g0.groupby("hidden_units").inconsistency.mean().items()),
          "; by N:", ", ".join(f"{k}: {v:.4f}" for k, v in g0.groupby("train_size").inconsistency.mean().items()), "\n")
    print("## fig2: svm-gln against svm-l2 (share of points where svm-gln is closer to GD)\n")
    p = i.pivot_table(index=["point"], columns="predictor_a", values="inconsistency")
    mom = i.drop_duplicates("point").set_index("point").momentum
    for col in ("svm-l2", "svm-l2-reference"):
        if col in p:
            closer = (p["svm-gln"] < p[col]).groupby(mom).mean()
            print(f"svm-gln closer than {col}:", ", ".join(f"momentum {m:g}: {v:.3f}" for m, v in closer.items()))
    units = i.drop_duplicates("point").set_index("point").hidden_units
    gap = (p["svm-l2"] - p["svm-gln"])[mom.loc[p.index] == 0]
    print("svm-l2 minus svm-gln inconsistency (momentum 0) by H:",
          ", ".join(f"{k}: {v:.4f}" for k, v in gap.groupby(units.loc[gap.index]).mean().items()))
    pp = i.pivot_table(index=["point"], columns="predictor_a", values="published_inconsistency")
    closer = (pp["svm-gln"] < pp["svm-l2"]).groupby(mom).mean()
    print("measured the published way, svm-gln closer than svm-l2:",
          ", ".join(f"momentum {m:g}: {v:.3f}" for m, v in closer.items()), "\n")
    st = e[e.predictor != "gd-gln"].groupby("predictor").status.value_counts().unstack(fill_value=0)
    print("statuses of the programs:\n")
    print(md(st), "\n")


def fig3(base: Path) -> None:
    e, i = read(base, "fig3")
    if e is None:
        return
    print("## fig3: statuses (points per program)\n")
    st = e[e.predictor != "gd-relu"].groupby(["predictor", "momentum"]).status.value_counts().unstack(fill_value=0)
    print(md(st), "\n")
    print("## fig3: infeasible points by H (both momenta)\n")
    inf = e[e.status == "infeasible"].groupby(["predictor", "hidden_units"]).size().unstack(fill_value=0)
    print(md(inf), "\n")
    uncert = e[(e.predictor != "gd-relu") & (e.certified != True)]   # noqa: E712 (NaN-safe)
    print(f"programs without a certificate: {len(uncert)}\n")

    print("## fig3: errors and inconsistency on the same points (where the program is feasible)\n")
    gd = e[e.predictor == "gd-relu"].set_index("point")
    rows = []
    for (pred, mom), grp in i.groupby(["predictor_a", "momentum"]):
        pts = grp.point
        all_pts = gd[gd.momentum == mom]
        rows.append({"predictor": pred, "momentum": mom, "feasible points": len(pts),
                     "svm val error": grp.svm_val_error.mean(),
                     "gd val error, same points": gd.loc[pts].val_error.mean(),
                     "gd val error, all points": all_pts.val_error.mean(),
                     "inconsistency": grp.inconsistency.mean(),
                     "2p(1-p)": grp.expected_if_uncorrelated.mean()})
    print(md(pd.DataFrame(rows)), "\n")

    p = i.pivot_table(index="point", columns="predictor_a", values="inconsistency")
    mom = i.drop_duplicates("point").set_index("point").momentum
    print("## fig3: the ordering svm-hl < svm-lc < svm-rc, on the points where all three are feasible\n")
    rows = []
    for m in sorted(mom.unique()):
        q = p[(mom.loc[p.index] == m)].dropna(subset=["svm-hl", "svm-lc", "svm-rc"])
        rows.append({"momentum": m, "points": len(q), **q[["svm-hl", "svm-lc", "svm-rc"]].mean().to_dict(),
                     "share in this order": float(((q["svm-hl"] < q["svm-lc"]) & (q["svm-lc"] < q["svm-rc"])).mean())})
    print(md(pd.DataFrame(rows)), "\n")
    if "svm-lc-always-on" in p:
        print("## fig3: svm-lc against svm-lc-always-on where svm-lc is feasible\n")
        q = p.dropna(subset=["svm-lc"])
        print(md(q[["svm-lc", "svm-lc-always-on"]].groupby(mom.loc[q.index]).mean()), "\n")

    print("## fig3: gd-relu runs that collapsed (train error > 0.4)\n")
    c = gd[gd.train_error > 0.4][["hidden_units", "train_size", "init_seed", "momentum", "train_error", "val_error"]]
    print(md(c) if len(c) else "none", "\n")
    m9 = gd[(gd.momentum == 0.9)]
    print("gd-relu val error by H and momentum (all points):\n")
    print(md(gd.groupby(["hidden_units", "momentum"]).val_error.mean().unstack()), "\n")
    print("momentum 0.9 without the collapsed runs, by H:",
          ", ".join(f"H={h}: {v:.4f}" for h, v in m9[m9.train_error <= 0.4].groupby("hidden_units").val_error.mean().items()),
          "\n")


def shallow(base: Path) -> None:
    e, i = read(base, "shallow")
    if e is None:
        return
    e = e.assign(k=np.log2(e.contexts).round().astype(int))
    i = i.assign(k=np.log2(i.contexts).round().astype(int))
    print("## shallow: statuses (points per program)\n")
    print(md(e.groupby(["predictor", "momentum"]).status.value_counts().unstack(fill_value=0)), "\n")
    uncert = e[(e.predictor != "gd-shallow") & (e.certified != True)]   # noqa: E712 (NaN-safe)
    print(f"programs without a certificate: {len(uncert)}\n")
    print("## shallow: overview (mean over points)\n")
    ov = e.groupby(["predictor", "momentum"])[["train_error", "val_error"]].mean()
    print(md(ov), "\n")
    cols = [c for c in ("inconsistency", "published_inconsistency", "expected_if_uncorrelated") if c in i]
    ic = i.groupby("momentum")[cols].mean()
    print("svm-shallow against gd-shallow by momentum:\n")
    print(md(ic), "\n")
    print("## shallow: by number of hyperplanes k (C = 2^k; mean over N, seeds and inits)\n")
    gd0 = e[(e.predictor == "gd-shallow")].pivot_table(index="k", columns="momentum", values="val_error")
    sv = e[e.predictor == "svm-shallow"].groupby("k").val_error.mean()
    inc = i.pivot_table(index="k", columns="momentum", values="inconsistency")
    exp0 = i[i.momentum == 0].groupby("k").expected_if_uncorrelated.mean()
    t = pd.DataFrame({"gd val error, m 0": gd0[0.0], "gd val error, m 0.9": gd0[0.9], "svm-shallow val error": sv,
                      "inconsistency, m 0": inc[0.0], "inconsistency, m 0.9": inc[0.9], "2p(1-p), m 0": exp0})
    print(md(t, digits=3), "\n")
    print("## shallow: by training size N (momentum 0; mean over k, seeds and inits)\n")
    g = e[e.momentum == 0].pivot_table(index="train_size", columns="predictor", values="val_error")
    g["inconsistency"] = i[i.momentum == 0].groupby("train_size").inconsistency.mean()
    print(md(g, digits=3), "\n")


def best_configuration(base: Path) -> None:
    """Figure 2c: the best shallow and deep configurations (validation error averaged over the three
    context seeds, then the minimum over H, C or k, init and, for GD, momentum), per N."""
    deep, _ = read(base, "fig2")
    flat, _ = read(base, "shallow")
    if deep is None or flat is None:
        return
    keys = ["predictor", "train_size", "hidden_units", "contexts", "median_init", "momentum"]
    rows = []
    for e in (flat, deep):
        e = e[~e.predictor.str.endswith("-reference")]
        m = e.groupby(keys).val_error.mean().reset_index()
        for (pred, n), g in m.groupby(["predictor", "train_size"]):
            b = g.loc[g.val_error.idxmin()]
            rows.append({"predictor": pred, "N": n, "best val error": b.val_error,
                         "at": f"H={b.hidden_units}, C={b.contexts}, median {b.median_init}, m {b.momentum:g}"})
    t = pd.DataFrame(rows).pivot_table(index="predictor", columns="N", values="best val error")
    print("## Figure 2c: best configuration per predictor and N (mean over the context seeds)\n")
    print(md(t), "\n")
    print(md(pd.DataFrame(rows).sort_values(["N", "best val error"]).reset_index(drop=True)), "\n")
    s = deep[(deep.momentum == 0) & deep.predictor.isin(["svm-gln", "svm-l2"])]
    g = s.pivot_table(index=["train_size", "hidden_units", "contexts", "median_init", "context_seed"],
                      columns="predictor", values="val_error")
    d = g["svm-gln"] - g["svm-l2"]
    cells = d.groupby(level=[0, 1, 2, 3]).mean()
    print(f"svm-gln minus svm-l2 val error, paired on the same contexts: lower at {int((d < 0).sum())} of {len(d)} "
          f"points and {int((cells < 0).sum())} of {len(cells)} cells (mean over seeds); by H:",
          ", ".join(f"{h}: {v:+.4f}" for h, v in d.groupby(level=1).mean().items()), "\n")


def batch_order_table(sweep_dir: Path, out: Path) -> None:
    """The sweep tables do not carry training.batch_seed: read it from each point's resolved config
    and write `<out>/batch_order.csv` (one row per GD network)."""
    e = pd.read_csv(sweep_dir / "tables" / "errors.csv")
    gd = e[e.predictor == "gd-relu"].copy()
    gd["batch_seed"] = [yaml.safe_load((sweep_dir / "points" / p / "gd" / "config.yaml").read_text())["training"]["batch_seed"]
                        for p in gd.point]
    lc = e[e.predictor == "svm-lc"].set_index("point").status
    gd["svm_lc_status"] = gd.point.map(lc)
    cols = ["hidden_units", "train_size", "init_seed", "momentum", "batch_seed", "train_error", "val_error", "svm_lc_status", "point"]
    out.mkdir(parents=True, exist_ok=True)
    gd[cols].sort_values(["train_size", "init_seed", "batch_seed"]).to_csv(out / "batch_order.csv", index=False)


def momentum_order(base: Path) -> None:
    path = base / "fig3-momentum-order" / "tables" / "batch_order.csv"
    if not path.exists():
        return
    print("## fig3, H = 10, momentum 0.9: the same networks with four other batch orders\n")
    gd = pd.read_csv(path)
    gd = gd.assign(collapsed=gd.train_error > 0.4)
    print(f"collapsed (train error > 0.4): {int(gd.collapsed.sum())} of {len(gd)} runs; "
          f"train error > 0.1: {int((gd.train_error > 0.1).sum())}; svm-lc infeasible: "
          f"{int((gd.svm_lc_status == 'infeasible').sum())}\n")
    e3, _ = read(base, "fig3")
    if e3 is not None:   # with the grid's own batch order (batch_seed 1) and the momentum-0 networks
        g3 = e3[e3.predictor == "gd-relu"]
        runs = pd.concat([gd.train_error, g3[(g3.hidden_units == 10) & (g3.momentum == 0.9)].train_error])
        print(f"all {len(runs)} H = 10 momentum-0.9 runs: train error > 0.4 in {int((runs > 0.4).sum())}, "
              f"> 0.05 in {int((runs > 0.05).sum())}; the momentum-0 networks of fig3 end at train error "
              f"<= {g3[g3.momentum == 0].train_error.max():.3f}\n")
    t = gd.pivot_table(index=["train_size", "init_seed"], columns="batch_seed", values="train_error")
    print("train error by batch order (columns: training.batch_seed):\n")
    print(md(t), "\n")


def l2_reference_counts(sweep_dir: Path) -> None:
    """How many training points svm-l2-reference constrains (from each result's message), per (H, C)."""
    import json
    import re
    rows = []
    for f in sorted(sweep_dir.glob("points/*/svm/svm-l2-reference/result.json")):
        rec = json.loads(f.read_text())
        cfg = yaml.safe_load((f.parents[2] / "gd" / "config.yaml").read_text())
        m = re.search(r"constrains (\d+) of (\d+)", rec.get("message", ""))
        rows.append({"H": cfg["model"]["hidden_units"], "C": cfg["contexts"]["count"],
                     "constrained": int(m.group(1)) if m else float("nan"), "objective": rec["objective"]})
    df = pd.DataFrame(rows)
    t = df.groupby(["H", "C"]).agg(points_constrained=("constrained", "mean"),
                                   optimum_zero=("objective", lambda v: float((v < 1e-20).mean())),
                                   median_optimum=("objective", "median"))
    t["median_optimum"] = [f"{v:.1e}" for v in t.median_optimum]
    print(md(t, digits=3))


# ---------------------------------------------------------------------------------------------
# Claims table for paper 000 (issue 27): every statement the paper makes about Figures 2-5 and in
# its text, as data in results/paper/claims.yaml, evaluated on the committed tables by scripts/claims.py.
# `python scripts/paper_summary.py --claims` prints it; `--claim ID` prints one claim's numbers
# condition by condition.
# ---------------------------------------------------------------------------------------------

CLAIMS_FILE = Path(__file__).resolve().parents[1] / "results" / "paper" / "claims.yaml"


def evaluate_claims(base: Path, claims_file: Path = CLAIMS_FILE) -> list[dict]:
    """Every claim with its conditions, verdict, command and (where defined) control."""
    spec = claims.load(claims_file)
    return claims.evaluate(spec, claims.read_tables(spec, base))


def print_claims(base: Path, only: str | None = None) -> list[dict]:
    spec = claims.load(CLAIMS_FILE)
    rows = evaluate_claims(base)
    if only is not None:
        rows = [r for r in rows if r["id"] == only]
        if not rows:
            raise SystemExit(f"no claim {only!r}")
        r = rows[0]
        print(f"{r['id']} ({r['where']}): \"{r['statement']}\"\nevaluated as: {r['evaluated_as']}; claim: d < 0"
              f"{' (equality: d == 0)' if r['rule'] == 'd == 0' else ''}\npublished: {r['published']}\n")
        for c in r["conds"]:
            print(f"  {c.verdict:30s} {c.text()}")
        print(f"verdict: {r['verdict']}")
        if r["shown_conds"]:
            print("\nshown, not part of the verdict:")
            for c in r["shown_conds"]:
                print(f"  {c.verdict:30s} {c.text()}")
        if r.get("control"):
            print(f"\ncontrol: {r['control']}")
            for c in r["control_conds"]:
                print(f"  {c.verdict:30s} {c.text()}")
        return rows
    print("## Claims of paper 000 (Figures 2-5 and text)\n")
    print("`python scripts/paper_summary.py --claims` (one claim in detail: `--claim ID`).\n")
    print(claims.METHOD, "\n")
    print("Sizes (results/paper/claims.yaml):", "; ".join(f"'{k}' = at least {v['at_least']:g}: {v['why']}"
                                                          for k, v in spec.get("sizes", {}).items()), "\n")
    print("| id | claim (the paper's words, where) | evaluated as (claim: d < 0) | ours: d [95% interval] | published "
          "| verdict | controls | command |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        many = len(r["conds"]) > 1
        ours = "; ".join(c.text() + (f" -> {c.verdict}" if many else "") for c in r["conds"])
        if r["shown_conds"]:
            ours += ". Shown, not part of the verdict: " + "; ".join(f"{c.text()} -> {c.verdict}" for c in r["shown_conds"])
        ctrl = r.get("control", "") or ("-" if r["verdict"] == "reproduced" else "none yet")
        if r["control_conds"]:
            ctrl += " Control: " + "; ".join(f"{c.text()} -> {c.verdict}" for c in r["control_conds"])
        cells = [r["id"], f"\"{r['statement']}\" ({r['where']})", r["evaluated_as"], ours, r["published"],
                 f"**{r['verdict']}**", ctrl, f"`{r['command']}`"]
        print("| " + " | ".join(str(c).replace("\n", " ").replace("|", "\\|") for c in cells) + " |")
    print(f"\n{claims.tally_line(rows)}", "\n")
    if spec.get("not_in_table"):
        print("Not in the table (no committed table can test them):\n")
        for n in spec["not_in_table"]:
            print(f"- {n['where']}: \"{n['statement']}\". Why: {n['why']}. Tested by "
                  + ", ".join(f"`{t}`" for t in n["covered_by"]) + ".")
        print()
    like_with_like(base)
    return rows


def like_with_like(base: Path) -> None:
    """The paper's mean svm-gln inconsistencies came from the published program (svm-gln-reference),
    measured the published way: set them against that, and the corrected svm-gln beside it."""
    _, i = read(base, "fig2")
    m0 = i[i.momentum == 0]
    t = m0[m0.predictor_a.isin(["svm-gln", "svm-gln-reference"])].groupby(["predictor_a", "median_init"]) \
        .published_inconsistency.mean().unstack()
    paper = "about 0.08 and 0.17 (protocol sec. 10)"
    if (base / PUBLISHED_FIG2).exists():
        pub = pd.read_csv(base / PUBLISHED_FIG2)
        ours = m0[m0.predictor_a == "svm-gln-reference"]
        cells = ["contexts", "hidden_units", "train_size", "context_seed", "median_init"]
        paper = "; ".join(f"{'with' if mi else 'without'} median init: "
                          + claims.published_cells(pub[pub.median_init == mi], "inconsistency", cells, ours, "published_inconsistency")
                          for mi in (False, True))
    print("svm-gln inconsistency measured the published way (momentum 0, all cells):",
          "; ".join(f"{p}: {t.loc[p, False]:.4f} without, {t.loc[p, True]:.4f} with median init" for p in t.index),
          f"\nthe paper's: {paper}\n")


PUBLISHED_FIG2 = Path("published") / "fig2-svm-gln-reference.csv"
VAL_POINTS = 12_000   # the validation set of every Figure 2 run (protocol section 8)


def published_comparison(base: Path, tol: float = 0.002) -> pd.DataFrame | None:
    """Figure 2's svm-gln-reference validation error per run against the published one (issue 27).

    `<base>/published/fig2-svm-gln-reference.csv` holds the published code's `implicit_bias` programs
    (its svm-gln-reference) as sflippl/implicit-bias-glns stores them (`data/deep_gln_cp/*/accs.csv`,
    135 of its 144 runs; results/paper/README.md says where). A run is a momentum-0 point of fig2 (the
    program does not depend on the momentum). With the published draws and bit order, the errors must
    agree within `tol` in nearly every run."""
    e, _ = read(base, "fig2")
    if e is None or not (base / PUBLISHED_FIG2).exists():
        return None
    keys = ["contexts", "hidden_units", "train_size", "context_seed", "median_init"]
    pub = pd.read_csv(base / PUBLISHED_FIG2)
    ours = e[(e.predictor == "svm-gln-reference") & (e.momentum == 0)][keys + ["val_error"]]
    m = pub[keys + ["val_error"]].merge(ours, on=keys, how="left", suffixes=("_published", ""))
    m["diff"] = m.val_error - m.val_error_published
    m["val_points"] = (m["diff"].abs() * VAL_POINTS).round().astype("Int64")
    print(f"## fig2: svm-gln-reference against the published validation errors, per run (within {tol})\n")
    by = m.groupby("contexts").agg(runs=("diff", "size"), compared=("diff", "count"),
                                   within=("diff", lambda d: int((d.abs() <= tol + 1e-12).sum())),
                                   max_abs_diff=("diff", lambda d: float(d.abs().max())),
                                   max_val_points=("val_points", "max"))
    print(md(by), "\n")
    off = m[~(m["diff"].abs() <= tol + 1e-12)]
    if len(off):
        print(f"runs off by more than {tol} (or missing here):\n")
        print(md(off.sort_values(keys).reset_index(drop=True)), "\n")
    return m


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="Every number of results/paper/README.md, from the committed tables.")
    parser.add_argument("base", nargs="?", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "paper",
                        help="the folder of the grids' tables (default: results/paper)")
    parser.add_argument("--l2-reference", type=Path, metavar="SWEEP_DIR",
                        help="print instead svm-l2-reference's counts from a sweep's point records")
    parser.add_argument("--batch-order", nargs=2, type=Path, metavar=("SWEEP_DIR", "OUT_TABLES_DIR"),
                        help="write instead the batch-order table of a sweep")
    parser.add_argument("--published", action="store_true",
                        help="print instead fig2's svm-gln-reference errors against the published ones, per run")
    parser.add_argument("--claims", action="store_true",
                        help="print instead the claims table of paper 000 (verdicts from the tables)")
    parser.add_argument("--claim", metavar="ID", help="print one claim of --claims condition by condition")
    parser.add_argument("--tables", type=Path, metavar="DIR",
                        help="the folder of the grids' tables (same as BASE; for --claims on a copy)")
    args = parser.parse_args(argv)
    if args.claims or args.claim:
        print_claims(args.tables or args.base, args.claim)
        return
    if args.published:
        published_comparison(args.tables or args.base)
        return
    if args.l2_reference is not None:
        l2_reference_counts(args.l2_reference)
        return
    if args.batch_order is not None:
        batch_order_table(*args.batch_order)
        return
    base = args.base
    pd.set_option("display.width", 200)
    fig2(base)
    published_comparison(base)
    fig3(base)
    momentum_order(base)
    shallow(base)
    best_configuration(base)


if __name__ == "__main__":
    main(sys.argv[1:])
