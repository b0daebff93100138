"""Record a dual answer solved outside a sweep as a point's result (issue 13: seed 3 at H = 10).

    python scripts/adopt_solution.py RUN_DIR OBJECTIVE SOLUTION.npz [--cache SOLVES_DIR] [--note TEXT]

SOLUTION.npz is `benchmarks/fullscale_solve.py --save-solution`'s file (zeta, lam, status, message,
seconds, iterations) for the program of RUN_DIR's configuration (RUN_DIR/gd/config.yaml) and
OBJECTIVE: a predictor, or a dual ray (status infeasible, zeta empty). The answer is certified on
the point's own design, as any solve is (a ray by its bound on every predictor's relative margin), and recorded as
RUN_DIR/svm/OBJECTIVE/result.json with its message saying where it came from (and --note); a
certified optimal one also enters the solve cache (--cache, a sweep's OUT/solves), so the resumed
sweep reuses it instead of solving again. An answer of another size, a non-finite one or one without
a predictor is refused with exit 2 and nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from finish_stalled import record  # noqa: E402

from gbcli.config import Config  # noqa: E402
from gbcli.io import load_yaml  # noqa: E402
from gbcli.programs import Solution, norm_of  # noqa: E402
from gbcli.runs.stages import build_design, prepare  # noqa: E402
from gbcli.runs.sweep import limit_threads  # noqa: E402


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("objective")
    ap.add_argument("solution", type=Path)
    ap.add_argument("--cache", default=None, help="a sweep's OUT/solves")
    ap.add_argument("--note", default=None, help="said in the result's message")
    args = ap.parse_args(argv)   # a wrong command line: usage, exit 2
    run_dir, obj, path = args.run_dir, args.objective, args.solution
    limit_threads(1)
    try:   # a missing, truncated or foreign file: one line, exit 2, nothing written
        cfg = Config.model_validate(load_yaml((run_dir / "gd" / "config.yaml").read_text()))
        with np.load(path, allow_pickle=False) as z:
            zeta, lam = np.asarray(z["zeta"], np.float64), np.asarray(z["lam"], np.float64)
            status, message = str(z["status"]), str(z["message"])
            seconds, iterations = float(z["seconds"]), int(z["iterations"])
    except Exception as exc:   # noqa: BLE001 (OSError, YAML, validation, npz errors alike)
        print(f"{path}: cannot read the answer or {run_dir}'s configuration ({type(exc).__name__}: "
              f"{str(exc).splitlines()[0][:200] if str(exc) else ''})")
        return 2
    if obj not in cfg.svm.objectives:
        print(f"{obj}: not an objective of {run_dir}'s configuration ({', '.join(cfg.svm.objectives)})")
        return 2
    problem = prepare(cfg)
    design = build_design(obj, cfg, problem)
    ray = status == "infeasible" and zeta.size == 0   # a dual ray: its certificate is a relative margin bound
    if (not ray and zeta.shape != (design.rows, design.x_train.shape[1])) or lam.shape != design.y_train.shape \
            or not (np.isfinite(zeta).all() and np.isfinite(lam).all()):
        print(f"{path}: zeta {zeta.shape} and lam {lam.shape} do not fit {obj} of {run_dir} "
              f"({design.rows} x {design.x_train.shape[1]}, {len(design.y_train)} points), or are not finite")
        return 2
    note = f"solved outside the sweep and adopted by scripts/adopt_solution.py from {path.name}"
    if args.note:
        note += f" ({args.note})"
    sol = Solution(None if ray else zeta, status, float("nan") if ray else norm_of(design).value(design, zeta),
                   seconds, "dual", f"{message}; {note}", iterations, lam)
    r = record(run_dir, obj, cfg, design, problem, sol, args.cache)
    return 0 if r["certified"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
