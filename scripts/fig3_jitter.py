"""How much Figure 3's svm-lc moves when its trained ReLU network moves by floating-point noise
(issue 36: on another CPU the committed fig3 networks differ by about 2e-5 relative, and svm-lc,
whose gates are the trained network's activation patterns, moved by up to 0.0076 in validation error).

For each committed fig3 point (`results/paper/fig3/solutions/<id>/`: its config and the trained
network `model.pt`), the network's weights are jittered by `--scale` relative (w + scale * rms(w) * g,
g standard normal, one draw per `--jitters` seed), svm-lc is built from the jittered network, solved
and certified, and its validation error and objective are written next to the committed ones
(`results/paper/fig3/tables/errors.csv`). The spread of a point is the largest distance among the
committed value and its jittered ones. A claim whose effect lies inside this spread is decided by
floating-point noise, not by the data.

    GB_DATA_DIR=../shared/data python scripts/fig3_jitter.py --jitters 3 --scale 2e-5 --out results/paper/fig3-jitter/jitter.csv
    python scripts/fig3_jitter.py --claims results/paper/fig3-jitter/jitter.csv --out results/paper/fig3-jitter/claims.csv

The second form needs no data: it evaluates the claims of `results/paper/claims.yaml` again with
fig3's svm-lc validation errors replaced by each jittered draw, and lists each claim's verdict and
estimates per draw; a claim whose verdict differs between draws is decided by floating-point noise.

Reads the committed files as untrusted data (`load_checkpoint`: tensors only, never a pickle).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gbcli.config import Config  # noqa: E402
from gbcli.programs.solvers import SOLVERS  # noqa: E402
from gbcli.programs.solvers import default_solver  # noqa: E402
from gbcli.registry import program_of, spec_of  # noqa: E402
from gbcli.runs.stages import _record, load_checkpoint, prepare, solve_options  # noqa: E402
from gbcli.config import read_stored_config  # noqa: E402
from gbcli.fs.safe import write_csv  # noqa: E402


def jittered(model: torch.nn.Module, scale: float, seed: int) -> torch.nn.Module:
    """A copy of `model` whose every weight tensor moved by `scale` of its own RMS, in a random direction."""
    out = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for w in out.weights():
            rms = float(w.double().pow(2).mean().sqrt())
            w.add_(scale * rms * torch.randn(w.shape, generator=gen, dtype=torch.float64).to(w.dtype))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(ROOT / "results/paper/fig3"))
    ap.add_argument("--objective", default="svm-lc")
    ap.add_argument("--jitters", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1e-6)
    ap.add_argument("--train-size", type=int, nargs="*", default=None, help="only these N")
    ap.add_argument("--claims", metavar="JITTER_CSV", help="re-evaluate the claims on the jittered svm-lc errors")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.claims:
        return claims_under_jitter(Path(args.claims), Path(args.results), Path(args.out))
    folder = Path(args.results)
    committed = pd.read_csv(folder / "tables/errors.csv", dtype={"point": str})
    committed = committed[committed["predictor"] == args.objective].set_index("point")
    rows, start = [], time.time()
    points = sorted(p for p in (folder / "solutions").iterdir() if p.name in committed.index)
    for i, sol_dir in enumerate(points):
        cfg = Config.model_validate(read_stored_config(sol_dir / "config.yaml"))
        if args.train_size and cfg.dataset.train_size not in args.train_size:
            continue
        problem = prepare(cfg)
        dim = problem.dataset.dim
        model = spec_of(cfg).load(load_checkpoint(sol_dir / "model.pt"), cfg, dim, sol_dir / "model.pt")
        base = committed.loc[sol_dir.name]
        row = {"point": sol_dir.name, "train_size": cfg.dataset.train_size, "hidden_units": cfg.model.hidden_units,
               "init_seed": cfg.model.init_seed, "committed_val_error": float(base["val_error"]),
               "committed_objective": float(base["objective"])}
        prog = program_of(cfg, args.objective)
        for k in range(1, args.jitters + 1):
            design = prog.design(cfg, problem, jittered(model, args.scale, k))
            use = cfg.svm.solver or default_solver(design.norm)
            sol = SOLVERS[use].solve(design, cfg.svm.max_iters, cfg.svm.eps, **solve_options(cfg, use))
            r = _record(args.objective, cfg, design, sol, sol_dir, problem.dataset, {}, write=False)
            row.update({f"val_error_{k}": r["val_error"], f"objective_{k}": r["objective"],
                        f"certified_{k}": bool(r["certified"]) and r["status"] == "optimal"})
        vals = [row["committed_val_error"]] + [row[f"val_error_{k}"] for k in range(1, args.jitters + 1)]
        objs = [row["committed_objective"]] + [row[f"objective_{k}"] for k in range(1, args.jitters + 1)]
        row["val_error_spread"] = float(np.max(vals) - np.min(vals))
        row["objective_spread_rel"] = float((np.max(objs) - np.min(objs)) / np.mean(objs))
        rows.append(row)
        print(f"[{i + 1}/{len(points)}] {sol_dir.name} N={row['train_size']} H={row['hidden_units']}: val error "
              f"{row['committed_val_error']:.4f} -> {', '.join(f'{v:.4f}' for v in vals[1:])} "
              f"({time.time() - start:.0f} s)", flush=True)
    table = pd.DataFrame(rows)
    write_csv(Path(args.out), table)
    print(table.groupby("train_size")[["val_error_spread", "objective_spread_rel"]].agg(["mean", "max"]).to_string())
    return 0


def claims_under_jitter(jitter_csv: Path, folder: Path, out: Path) -> int:
    """Each claim whose numbers read fig3's svm-lc validation errors, evaluated on the committed
    tables and on each jittered draw (the draw's svm-lc val_error in place of the committed one)."""
    import claims as cl   # scripts/claims.py (this script's folder is on the path)

    spec = cl.load(ROOT / "results/paper/claims.yaml")
    tables = cl.read_tables(spec, folder.parent)
    jit = pd.read_csv(jitter_csv, dtype={"point": str}).set_index("point")
    draws = sorted(int(c.rsplit("_", 1)[1]) for c in jit.columns if c.startswith("val_error_") and c[10:].isdigit())
    errors = tables["fig3/errors"]
    lc = (errors["predictor"] == "svm-lc") & errors["point"].astype(str).isin(jit.index)
    uses = [c for c in spec["claims"] if "svm-lc" in repr(c.get("conditions"))]
    rows = []
    for label, column in [("committed", None)] + [(f"jitter {k}", f"val_error_{k}") for k in draws]:
        t = dict(tables)
        if column is not None:
            e = errors.copy()
            e.loc[lc, "val_error"] = e.loc[lc, "point"].astype(str).map(jit[column]).to_numpy()
            t["fig3/errors"] = e
        for r in cl.evaluate({**spec, "claims": uses}, t):
            rows.append({"claim": r["id"], "tables": label, "verdict": r["verdict"],
                         "estimates": "; ".join(f"{c.label}: {c.est:+.4f} [{c.lo:+.4f}, {c.hi:+.4f}]" for c in r["conds"])})
    table = pd.DataFrame(rows)
    verdicts = table.pivot(index="claim", columns="tables", values="verdict")
    verdicts["decided by noise"] = verdicts.nunique(axis=1) > 1
    write_csv(out, table)
    print(verdicts.to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
