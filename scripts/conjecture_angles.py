"""The angle to svm-l2 at the last logged step of each conjecture run, in svm-l2's own geometry.

Until 2026-11-27 the `convergence` instrument measured `angle_svm_l2` in zeta's raw coordinates,
which include directions that neither svm-l2's quadratic form nor any GLN predictor sees (a vector
added to every context of one unit and subtracted from another's): that angle depended on them. The
instrument now measures it in the form's inner product. The networks are stored only at their last
step, so this script recomputes that step's angle from each sweep point's final network and the
reference program the sweep's solve cache holds, beside the raw angle its metrics.csv recorded and,
as a check that the same network and reference were used, the angle to svm-gln and both
inconsistencies (which did not change).

    GB_DATA_DIR=... python scripts/conjecture_angles.py runs/conjecture-fig2 runs/conjecture-sgd \\
        runs/conjecture-warm runs/conjecture-fig2-warm > results/conjecture/tables/last_angles.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

COLUMNS = ["sweep", "point", "hidden_units", "contexts", "seed", "step", "angle_svm_l2_recorded", "angle_svm_l2",
           "angle_svm_gln_recorded", "angle_svm_gln", "inconsistency_svm_l2_recorded", "inconsistency_svm_l2"]


def last_step(point: Path, sweep: Path) -> dict | None:
    """The recomputed convergence columns of a point's final network (None for a point with none)."""
    import torch

    from gbcli.errors import GbError
    from gbcli.runs.load import load_run
    from gbcli.runs.stages import make_tracker, prepare
    from gbcli.store.cache import SolveCache

    try:
        run = load_run(point)
    except GbError as exc:
        print(f"conjecture_angles: {point}: skipped ({exc})", file=sys.stderr)
        return None
    cfg, model = run.config, run.model
    if model is None or run.metrics is None or not len(run.metrics):
        return None
    problem = prepare(cfg)
    tracker = make_tracker(cfg, problem, SolveCache(sweep / "solves"))
    ds = problem.dataset
    t = lambda a, dtype=torch.float64: torch.tensor(np.array(a), dtype=dtype)   # a copy: splits are read-only
    x, y, ct = t(ds.x_train), t(ds.y_train), t(problem.ctx_train, torch.long)
    xv, cv = t(ds.x_val), t(problem.ctx_val, torch.long)
    with torch.no_grad():
        margins, val_out = y * model(x, ct), model(xv, cv)
    row = tracker.measure(model, x, y, ct, margins, val_out)
    last = run.metrics.iloc[-1]
    return {"sweep": sweep.name, "point": point.name, "hidden_units": cfg.model.hidden_units,
            "contexts": cfg.contexts.count, "seed": cfg.contexts.seed, "step": int(last["step"]),
            **{f"{c}_recorded": float(last[c]) for c in ("angle_svm_l2", "angle_svm_gln", "inconsistency_svm_l2")},
            **{c: float(row[c]) for c in ("angle_svm_l2", "angle_svm_gln", "inconsistency_svm_l2")}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweeps", nargs="+", type=Path, help="conjecture sweep directories (runs/conjecture-*)")
    a = ap.parse_args()
    import pandas as pd
    import torch

    torch.set_num_threads(1)
    rows = []
    for sweep in a.sweeps:
        if not (sweep / "points").is_dir():
            ap.error(f"{sweep}: not a sweep directory (no points/)")
        for point in sorted((sweep / "points").iterdir()):
            row = last_step(point, sweep)
            if row is not None:
                rows.append(row)
    pd.DataFrame(rows, columns=COLUMNS).round(4).to_csv(sys.stdout, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
