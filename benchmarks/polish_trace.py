"""Benchmark: the active-set polish's Newton steps from a stored dual answer, with a float64 and a
long-double iterate (issue 13: why seed 2's H = 10 svm-l2 at N = 48,000 stopped at 1.02e-6).

    GB_DATA_DIR=../shared/data .venv/bin/python benchmarks/polish_trace.py RUN_DIR OBJECTIVE

RUN_DIR/svm/OBJECTIVE/solution.npz is a working-set answer of the dual solver (any status). For
each iterate type, one line per Newton step (pass, step, largest residual of the active margins
and group constraints, computed through the primal in long double) and the polish's final
relative gap, or "no improvement" when it returns None. One torch and one BLAS thread; writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("objective")
    ap.add_argument("--steps", type=int, default=12, help="Newton steps a pass at most (the solver's default)")
    args = ap.parse_args()

    from finish_stalled import final_round
    from gbcli.config import Config
    from gbcli.io import load_yaml
    from gbcli.programs import norm_of
    from gbcli.programs.ipm import _gap, polish
    from gbcli.programs.solvers.dual import primal_products
    from gbcli.runs.stages import build_design, prepare
    from gbcli.runs.sweep import limit_threads

    limit_threads(1)
    cfg = Config.model_validate(load_yaml((args.run_dir / "gd" / "config.yaml").read_text()))
    design = build_design(args.objective, cfg, prepare(cfg))
    with np.load(args.run_dir / "svm" / args.objective / "solution.npz", allow_pickle=False) as z:
        zeta, lam = z["zeta"], z["lam"]
    w, sub, grp, s = final_round(design, zeta, lam)
    quadratic = norm_of(design).quadratic
    exact = primal_products(sub, grp)
    m, f = exact(lam[w], s)
    print(f"stored answer: {len(w)} points with lam > 0, relative gap {_gap(m, f, lam[w], s, quadratic):.3e} "
          f"(through the primal in long double)")
    for name, dtype in [("float64", np.float64), ("long double", np.longdouble)]:
        start = time.process_time()
        done = polish(grp, lam[w], s, quadratic, exact, steps=args.steps, dtype=dtype,
                      trace=lambda p, k, r: print(f"  {name}: pass {p} step {k}: residual {r:.2e}", flush=True))
        result = "no improvement" if done is None else f"relative gap {done[2]:.3e}"
        print(f"{name} iterate: {result} ({time.process_time() - start:.1f} CPU s)", flush=True)


if __name__ == "__main__":
    main()
