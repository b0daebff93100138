"""Issue 47: the fixed normalized step against the adaptive one (`training.adaptive_step`), warm
from the same SGD networks (configs/conjecture-fig2-warm.yaml, configs/conjecture-fig2-adaptive.yaml).

    python scripts/adaptive_comparison.py FIXED ADAPTIVE --plan          # the fixed run's steps to each seed's r
    python scripts/adaptive_comparison.py FIXED ADAPTIVE --at-r FIXED_AT_R [--out results/conjecture/tables/adaptive.csv]

FIXED, ADAPTIVE: the two sweeps (seeds 1-3 each). For each seed, r is the adaptive run's final
margin ratio to svm-gln (`margin_ratio_svm_gln`); the fixed run's steps to r are interpolated
linearly in log(step) between its two logged steps around r (logged steps are log-spaced), and
`--plan` prints them (rounded up) so the fixed run can be trained again to exactly that many steps
(FIXED_AT_R: the same warm config, one `training.epochs` per seed), which gives the fixed step's
predictor at r. The table: per seed and rule, r, the steps to r, the ratio reached, the
inconsistency with svm-gln (validation) and the angle to svm-gln (in its own geometry) there, the
angle between the two rules' predictors at r (zeta[h*C + c] = w2[h] w1[h, c], raw coordinates), the
gradient evaluations (steps, plus the adaptive rule's 1 + power_iters double-backward passes per
estimate, counted as one each) and the training seconds. Run directories are untrusted input:
metrics.csv is read as data, model.pt tensors only (gbcli.runs.stages.load_checkpoint).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RATIO = "margin_ratio_svm_gln"


def runs_of(sweep: Path) -> dict[int, Path]:
    """seed -> the point's run directory (finished points only; gd/config.yaml names the seed)."""
    out = {}
    for point in sorted((sweep / "points").iterdir()):
        gd = point / "gd"
        if gd.is_symlink() or not (gd / "summary.json").is_file() or (gd / "config.yaml").is_symlink():
            continue
        out[int(yaml.safe_load((gd / "config.yaml").read_text())["contexts"]["seed"])] = point
    return out


def metrics(run: Path) -> pd.DataFrame:
    return pd.read_csv(run / "gd" / "metrics.csv")


def steps_to(m: pd.DataFrame, r: float) -> float:
    """The step at which the logged ratio first reaches r, interpolated in log(step); NaN if never."""
    above = np.flatnonzero(m[RATIO].to_numpy() >= r)
    if not len(above):
        return float("nan")
    k = int(above[0])
    if k == 0:
        return float(m["step"].iloc[0])
    s0, s1 = float(m["step"].iloc[k - 1]), float(m["step"].iloc[k])
    r0, r1 = float(m[RATIO].iloc[k - 1]), float(m[RATIO].iloc[k])
    frac = (r - r0) / (r1 - r0) if r1 > r0 else 1.0
    lo = math.log(max(s0, 1.0))
    return math.exp(lo + frac * (math.log(s1) - lo))


def zeta(run: Path) -> np.ndarray:
    from gbcli.runs.stages import load_checkpoint

    sd = load_checkpoint(run / "gd" / "model.pt")["state_dict"]
    w1, w2 = sd["w1"].double().numpy(), sd["w2"].double().numpy()[0]
    return (np.repeat(w2, w1.shape[0] // w2.shape[0])[:, None] * w1).reshape(-1)


def angle(a: np.ndarray, b: np.ndarray) -> float:
    return math.degrees(math.acos(max(-1.0, min(1.0, float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))))))


def row_of(run: Path, rule: str, seed: int, r: float, to_r: float) -> dict:
    m = metrics(run)
    summary = json.loads((run / "gd" / "summary.json").read_text())
    adaptive = yaml.safe_load((run / "gd" / "config.yaml").read_text())["training"].get("adaptive_step")
    steps = int(m["step"].iloc[-1])
    passes = math.ceil(steps / adaptive["every"]) * (adaptive["power_iters"] + 1) if adaptive else 0
    last = m.iloc[-1]
    return {"seed": seed, "rule": rule, "r": round(r, 6), "steps_to_r": round(to_r), "steps": steps,
            "ratio": float(last[RATIO]), "inconsistency_svm_gln": float(last["inconsistency_svm_gln"]),
            "angle_svm_gln": float(last["angle_svm_gln"]), "eta0_last": float(last["lr"]),
            "gradient_evaluations": steps + passes, "seconds": round(float(summary["seconds"]), 1),
            "status": summary["status"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixed", type=Path)
    ap.add_argument("adaptive", type=Path)
    ap.add_argument("--plan", action="store_true", help="print each seed's r and the fixed run's steps to it")
    ap.add_argument("--at-r", type=Path, help="the fixed step trained again to its steps to r (one point per seed)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "conjecture" / "tables" / "adaptive.csv")
    args = ap.parse_args(argv)
    fixed, adaptive = runs_of(args.fixed), runs_of(args.adaptive)
    seeds = sorted(set(fixed) & set(adaptive))
    if not seeds:
        print("no seed has both a fixed and an adaptive run", file=sys.stderr)
        return 2
    r = {s: float(metrics(adaptive[s])[RATIO].iloc[-1]) for s in seeds}
    to_r = {s: steps_to(metrics(fixed[s]), r[s]) for s in seeds}
    if args.plan:
        for s in seeds:
            print(f"seed {s}: r = {r[s]:.6f}, fixed steps to r = {to_r[s]:.1f} -> epochs {math.ceil(to_r[s])}")
        return 0
    at_r = runs_of(args.at_r) if args.at_r else {}
    rows = []
    for s in seeds:
        ref = at_r.get(s, fixed[s])   # the fixed predictor at r (or, without the rerun, at its end)
        between = angle(zeta(ref), zeta(adaptive[s]))
        f_row = row_of(ref, "fixed" if s in at_r else "fixed (end, not at r)", s, r[s], to_r[s])
        a_row = row_of(adaptive[s], "adaptive", s, r[s], float(metrics(adaptive[s])["step"].iloc[-1]))
        for row in (f_row, a_row):
            row["angle_between_deg"] = between
        a_row["speedup_steps"] = f_row["steps_to_r"] / a_row["steps_to_r"]
        a_row["speedup_gradients"] = f_row["steps_to_r"] / a_row["gradient_evaluations"]
        rows.extend([f_row, a_row])
    table = pd.DataFrame(rows)
    from gbcli.fs.safe import write_csv

    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(args.out, table)
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
