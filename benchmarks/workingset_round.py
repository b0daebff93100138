"""Benchmark: one working-set round of a full-scale program replayed alone, from the state saved by
`benchmarks/fullscale_solve.py --save-rounds DIR`, with different starts for its interior-point method.

    GB_DATA_DIR=../shared/data .venv/bin/python benchmarks/workingset_round.py DIR OBJECTIVE SEED K \\
        [--starts current,cold,relative:0.1:0.3] [--max-iters 100] [--trace] [--ipm NAME=VALUE ...]

Round K+1 is solved on its saved working set. Starts: `current` is the solver's warm start from
round K (its lam, margin slacks and s, shifted by ipm.WARM_SHIFT x the largest lam and WARM_MU,
then scaled to lam'Q lam = WARM_F); `cold` the solver's cold start; `balanced:X:MU[:cold]` takes the relative start
(or a uniform lam and mu = MU) with s chosen so that every group's s_g w_g is the points' mean
mu_n lam_n (the cold and warm starts leave those two far apart); `relative:X:MU` shifts lam by
X sqrt(max_g f_g(lam) / max_g f_g(1)) instead (f_g(v) = v'Q_g v: a shift that moves V(lam) by about
a fraction X, where the largest-lam shift swamps a nearly inseparable program's cancelling V) and
mu by MU. One line per start: iterates, CPU seconds, the first iterate with a positive margin on the
working set, the best gap. One torch and one BLAS thread; writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", type=Path)
    ap.add_argument("objective", choices=["svm-gln", "svm-l2"])
    ap.add_argument("seed", type=int)
    ap.add_argument("k", type=int, help="replay round K+1 from round K's answer")
    ap.add_argument("--hidden-units", type=int, default=10)
    ap.add_argument("--starts", default="current,cold")
    ap.add_argument("--max-iters", type=int, default=100)
    ap.add_argument("--trace", action="store_true", help="a line per interior-point iterate")
    ap.add_argument("--ipm", action="append", default=[], metavar="NAME=VALUE",
                    help="set a constant of gbcli.programs.ipm for the replay (e.g. GMRES_STEPS=40, REFINE=0)")
    args = ap.parse_args()

    import torch

    from gbcli.config import load_config
    from gbcli.programs import ipm, norm_of
    from gbcli.programs.solvers.dual import kernel_problem
    from gbcli.programs.workingset import margins, subset
    from gbcli.runs.stages import build_design, prepare
    from gbcli.runs.sweep import limit_threads

    limit_threads(1)
    for item in args.ipm:   # numbers, or 0/1 for the switches
        name, value = item.split("=", 1)
        if not hasattr(ipm, name):
            raise SystemExit(f"--ipm {item}: gbcli.programs.ipm has no {name}")
        current = getattr(ipm, name)
        setattr(ipm, name, bool(int(value)) if isinstance(current, bool) else type(current)(value))
    cfg = load_config(ROOT / "configs" / "fullscale.yaml", (
        f"model.hidden_units={args.hidden_units}", f"contexts.seed={args.seed}", f"svm.objectives=[{args.objective}]"))
    design = build_design(args.objective, cfg, prepare(cfg), None)
    norm = norm_of(design)
    with np.load(args.rounds / f"round-{args.k}.npz") as a, np.load(args.rounds / f"round-{args.k + 1}.npz") as b:
        wk, lamk, sk, w1, note = a["w"], a["lam"], a["s"], b["w"], str(b["message"])
    m = margins(design, norm.predictor(subset(design, wk), lamk, sk))
    lam = np.zeros(len(design.y_train))
    lam[wk] = lamk
    warm_lam, warm_mu = lam[w1], np.maximum(m - 1, 0)[w1]   # as the working set hands them on
    grp = kernel_problem(subset(design, w1))

    def f_of(v: np.ndarray) -> np.ndarray:   # f_g(v) = v'Q_g v for every group
        t = torch.as_tensor(v)
        return (grp.u(t) * t[:, None]).sum(0).numpy()

    f_warm, f_ones = f_of(warm_lam).max(), f_of(np.ones(len(w1))).max()
    relative = np.sqrt(f_warm / f_ones)   # a shift of x * relative moves V(lam) by about a fraction x
    print(f"round {args.k} -> {args.k + 1}: {len(wk)} -> {len(w1)} points; largest lam {warm_lam.max():.3e}; "
          f"max f(lam) {f_warm:.3e}, max f(1) {f_ones:.3e}; the saved round ended: {note or 'optimal'}", flush=True)
    for name in args.starts.split(","):
        trace: list[dict] = []
        saved = ipm.TRACE, ipm.WARM_SHIFT, ipm.WARM_MU
        ipm.TRACE = trace.append if not args.trace else (lambda d: (trace.append(d), print("    iterate " + " ".join(
            f"{k}={v:.3e}" if isinstance(v, float) else f"{k}={v}" for k, v in d.items()), flush=True)))
        if name == "current":
            start = (warm_lam, warm_mu, sk)
        elif name == "cold":
            start = None
        elif name.startswith("balanced"):   # balanced:X:MU[:cold]: complementarity of the groups at the points' mean
            parts = name.split(":")
            x, mu = float(parts[1]), float(parts[2])
            lam0 = np.ones(len(w1)) if parts[-1] == "cold" else warm_lam + x * relative
            mu0 = np.full(len(w1), mu) if parts[-1] == "cold" else warm_mu + mu
            f = f_of(lam0)
            lam_f = lam0 * np.sqrt(ipm.WARM_F / f.max())          # as interior_point scales a start
            w_f = 0.5 - 0.5 * ipm.WARM_F * f / f.max()
            start = (lam0, mu0, np.full(len(f), float(np.mean(mu0 * lam_f))) / w_f)
            ipm.WARM_SHIFT, ipm.WARM_MU = 0.0, 0.0
        else:
            _, x, mu = name.split(":")
            start = (warm_lam + float(x) * relative, warm_mu + float(mu), sk + float(x) * sk.max())
            ipm.WARM_SHIFT, ipm.WARM_MU = 0.0, 0.0   # shifted here already
        try:
            cpu = time.process_time()
            status, message, _, _, it = ipm.interior_point(grp, norm.quadratic, 1e-6, args.max_iters, start=start)
            cpu = time.process_time() - cpu
        finally:
            ipm.TRACE, ipm.WARM_SHIFT, ipm.WARM_MU = saved
        first = next((r["it"] for r in trace if r["min_margin"] > 0), None)
        gaps = [r["gap"] for r in trace if r["gap"] is not None]
        steps = " ".join(f"{r['step']:.2f}{r['limited_by'][:2]}" for r in trace[1:16])
        print(f"  {name}: {status} after {it} iterates, {cpu:.0f} CPU s; first positive margin at iterate {first}; "
              f"best gap {min(gaps) if gaps else float('nan'):.2e}; first iterate: min margin {trace[0]['min_margin']:.3e}, "
              f"dual {trace[0]['dual']:.3e}; step lengths {steps}", flush=True)


if __name__ == "__main__":
    main()
