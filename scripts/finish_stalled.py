"""Finish a stored dual solution that stalled before the active-set polish existed (issue 13).

    python scripts/finish_stalled.py RUN_DIR OBJECTIVE [--cache SOLVES_DIR]

RUN_DIR/svm/OBJECTIVE/ must hold a `result.json` of the dual solver with status `inaccurate` and its
`solution.npz` (zeta, and lam: the multipliers of the final working set, zero elsewhere). The
working set's final round is taken up where the interior-point method stopped: the same call the
solver now makes when it stalls (`gbcli.programs.ipm.polish` with the residuals of
`gbcli.programs.solvers.dual.primal_products`), on the points with lam > 0, with the group
multipliers s recovered from zeta = recover(V(lam), s). The result is certified on all N points
and recorded as a fresh `result.json` (its message says it was finished here, and `solve_seconds`
adds the polish to the stored solve); a certified result also enters the solve cache (`--cache`,
e.g. a sweep's OUT/solves), so the sweep's other points with the same program reuse it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gbcli.config import Config  # noqa: E402
from gbcli.io import load_yaml  # noqa: E402
from gbcli.programs import Solution, combination, norm_of  # noqa: E402
from gbcli.programs.ipm import polish  # noqa: E402
from gbcli.programs.solvers.dual import kernel_problem, primal_products  # noqa: E402
from gbcli.programs.workingset import margins, subset  # noqa: E402
from gbcli.runs.cache import SolveCache  # noqa: E402
from gbcli.runs.stages import _record, build_design, prepare, run_lock, svm_manifest  # noqa: E402
from gbcli.runs.sweep import limit_threads  # noqa: E402


def final_round(design, zeta: np.ndarray, lam: np.ndarray):
    """(W, its sub-design, its kernel problem, s) of a stored working-set answer: W the points with
    lam > 0, s the group multipliers with zeta = recover(V(lam), s) (up to zeta's rescaling)."""
    norm = norm_of(design)
    w = np.flatnonzero(lam > 0)
    sub = subset(design, w)
    grp = kernel_problem(sub)
    v = combination(sub, lam[w])
    if grp.e is None:   # one group: zeta = s recover(V, 1)
        r = norm.recover(sub, v, np.ones(1))
        s = np.array([float(np.sum(zeta * r) / np.sum(r * r))])
    else:
        s = np.array([float(np.linalg.norm(zeta[g]) / max(np.linalg.norm(v[g]), 1e-300)) for g in design.groups])
    return w, sub, grp, s


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--cache"):
        print(__doc__)
        return 2
    run_dir, obj = Path(argv[0]), argv[1]
    limit_threads(1)   # as a sweep's worker
    out = run_dir / "svm" / obj
    try:   # a missing, truncated or foreign file: one line, exit 2, nothing written
        old = json.loads((out / "result.json").read_text())
        status, solver = old["status"], old["solver"]
        cfg = Config.model_validate(load_yaml((run_dir / "gd" / "config.yaml").read_text()))
        with np.load(out / "solution.npz", allow_pickle=False) as z:
            zeta, lam = z["zeta"], z["lam"]
    except Exception as exc:   # noqa: BLE001 (OSError, JSON, YAML, validation, npz errors alike)
        print(f"{run_dir}: cannot read the stored solve ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
        return 2
    if status != "inaccurate" or solver != "dual":
        print(f"{out}: status {status} of solver {solver}; only a stalled dual solve is finished here")
        return 2
    problem = prepare(cfg)
    design = build_design(obj, cfg, problem)
    norm = norm_of(design)
    start = time.perf_counter()
    w, sub, grp, s = final_round(design, zeta, lam)
    done = polish(grp, lam[w], s, norm.quadratic, primal_products(sub, grp))
    if done is None:
        print(f"{out}: the polish did not improve the stored answer; nothing written")
        return 1
    lam_w, s, gap = done
    full = np.zeros(len(lam))
    full[w] = lam_w
    new = norm.predictor(sub, lam_w, s, precise=True)
    low = float(margins(design, new).min())
    if low <= 0:
        print(f"{out}: the polished predictor has no positive margin on all N points; nothing written")
        return 1
    new = new / low   # every one of the N margins >= 1
    seconds = time.perf_counter() - start
    message = (f"finished by scripts/finish_stalled.py: the stored working-set answer ({old['message']}) polished on "
               f"its active set of {int((lam_w > 0).sum())} points to a relative gap of {gap:.1e} in {seconds:.1f} s")
    sol = Solution(new, "optimal" if gap <= cfg.svm.certify_tol else "inaccurate", norm.value(design, new),
                   float(old["solve_seconds"]) + seconds, "dual", message, old["iterations"], full)
    r = record(run_dir, obj, cfg, design, problem, sol, argv[3] if len(argv) == 4 else None)
    return 0 if r["certified"] else 1


def record(run_dir: Path, obj: str, cfg, design, problem, sol: Solution, cache_dir: str | None) -> dict:
    """Certify sol on the point's design and record it as RUN_DIR/svm/OBJ/result.json (under the run's
    lock, a line in its log.txt); a certified optimum or infeasibility also enters the solve cache."""
    out = run_dir / "svm" / obj
    with run_lock(run_dir):
        r = _record(obj, cfg, design, sol, out, problem.dataset, svm_manifest(cfg, run_dir, False))
    print(f"{out}: {r['status']}, certified {r['certified']}, relative gap {r['rel_gap']:.2e}, "
          f"min margin {r['min_margin']:.10f}, objective {r['objective']:.10g}, val error {r['val_error']:.4f}"
          + (f", relative margin bound {r['relative_margin_bound']:.2e}" if "relative_margin_bound" in r else ""))
    with open(run_dir / "log.txt", "a") as log:
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {obj}: {sol.message}; {r['status']}, certified {r['certified']}\n")
    if cache_dir is not None and r["certified"] and r["status"] in ("optimal", "infeasible"):   # as a sweep caches
        cache = SolveCache(cache_dir)
        key = cache.key(design, "dual", cfg.svm.max_iters, cfg.svm.eps, cfg.svm.certify_tol)
        with cache.claim(key):
            cache.put(key, sol, f"{run_dir.name}/{obj}")
        print(f"cached as {key}")
    return r


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
