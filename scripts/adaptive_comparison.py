"""Issue 47: the fixed normalized step against the adaptive one (`training.adaptive_step`), warm
from the same SGD networks (configs/conjecture-fig2-warm.yaml, configs/conjecture-fig2-adaptive.yaml).

    python scripts/adaptive_comparison.py FIXED_SWEEP ADAPTIVE_SWEEP [--r R] [--out results/conjecture/tables/adaptive.csv]

For each seed: the margin ratio r (to svm-gln) both runs are compared at (default: the smallest of
the fixed runs' final ratios, so every run reaches it), each run's steps to reach it (the first
logged step at which margin_ratio_svm_gln >= r: logged steps are log-spaced, so this is an upper
bound within one logging interval), its final ratio, its inconsistency with svm-gln and angle to it
at its last logged step, its training seconds and gradient evaluations (steps, plus the adaptive
rule's Hessian-vector products counted as one each: 1 + power_iters per estimate), and the angle
between the two runs' final predictors zeta (zeta[h*C + c] = w2[h] w1[h, c], the raw coordinates).
Both runs' directories are untrusted input: metrics.csv is read as data, model.pt tensors only.
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
    """seed -> the point's run directory (each point's gd/config.yaml names its seed)."""
    out = {}
    for point in sorted((sweep / "points").iterdir()):
        cfg_path = point / "gd" / "config.yaml"
        if not (cfg_path.is_file() and not cfg_path.is_symlink() and (point / "gd" / "summary.json").is_file()):
            continue
        cfg = yaml.safe_load(cfg_path.read_text())
        out[int(cfg["contexts"]["seed"])] = point
    return out


def zeta(run: Path) -> np.ndarray:
    from gbcli.runs.stages import load_checkpoint

    sd = load_checkpoint(run / "gd" / "model.pt")["state_dict"]
    w1, w2 = sd["w1"].double().numpy(), sd["w2"].double().numpy()[0]
    count = w1.shape[0] // w2.shape[0]
    return (np.repeat(w2, count)[:, None] * w1).reshape(-1)


def row_of(run: Path, rule: str, seed: int, r: float) -> dict:
    m = pd.read_csv(run / "gd" / "metrics.csv")
    summary = json.loads((run / "gd" / "summary.json").read_text())
    cfg = yaml.safe_load((run / "gd" / "config.yaml").read_text())
    reached = m[m[RATIO] >= r]
    steps = int(m["step"].iloc[-1])
    adaptive = cfg["training"].get("adaptive_step")
    estimates = 0 if not adaptive else math.ceil(steps / adaptive["every"])
    hvps = estimates * (adaptive["power_iters"] + 1) if adaptive else 0
    last = m.iloc[-1]
    return {"seed": seed, "rule": rule, "r": r,
            "steps_to_r": int(reached["step"].iloc[0]) if len(reached) else None,
            "steps": steps, "final_ratio": float(last[RATIO]),
            "inconsistency_svm_gln": float(last["inconsistency_svm_gln"]),
            "angle_svm_gln": float(last["angle_svm_gln"]),
            "final_lr": float(last["lr"]), "status": summary.get("status"),
            "seconds": float(summary.get("seconds", float("nan"))), "gradient_evaluations": steps + hvps}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixed", type=Path)
    ap.add_argument("adaptive", type=Path)
    ap.add_argument("--r", type=float, default=None, help="the margin ratio compared at (default: see above)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "conjecture" / "tables" / "adaptive.csv")
    args = ap.parse_args(argv)
    fixed, adaptive = runs_of(args.fixed), runs_of(args.adaptive)
    seeds = sorted(set(fixed) & set(adaptive))
    if not seeds:
        print("no seed has both a fixed and an adaptive run", file=sys.stderr)
        return 2
    r = args.r if args.r is not None else min(float(pd.read_csv(fixed[s] / "gd" / "metrics.csv")[RATIO].iloc[-1])
                                              for s in seeds)
    rows = []
    for s in seeds:
        a, b = zeta(fixed[s]), zeta(adaptive[s])
        angle = math.degrees(math.acos(max(-1.0, min(1.0, float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))))))
        pair = [row_of(fixed[s], "fixed", s, r), row_of(adaptive[s], "adaptive", s, r)]
        for row in pair:
            row["angle_between_deg"] = angle
        f, ad = pair[0]["steps_to_r"], pair[1]["steps_to_r"]
        pair[1]["speedup_steps"] = f / ad if f and ad else None
        rows.extend(pair)
    table = pd.DataFrame(rows)
    from gbcli.store.safe import write_csv

    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(args.out, table)
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
